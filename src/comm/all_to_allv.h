// all_to_allv for the public APIs: the C++ member calls it with no problem of its own; the C API
// passes what it found wrong in its arguments (NULL arrays, negative entries), which is folded into
// the exchange of counts so that every rank fails with the same error instead of waiting for the
// rank that left early.
#pragma once

#include <span>
#include <string>

#include "tpf/comm.h"

namespace tpf::detail {

void all_to_allv(Communicator& comm, const void* send, std::span<const size_t> send_counts,
                 std::span<const size_t> send_displs, void* recv,
                 std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                 DType dtype, const CallOptions& call, const std::string& caller_problem);

}  // namespace tpf::detail
