// all_to_allv for the public APIs: the C++ member calls it with no problem of its own; the C API
// passes what it found wrong in its arguments (NULL arrays, negative entries), which is folded into
// the exchange of counts so that every rank fails with the same error instead of waiting for the
// rank that left early.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "tpf/comm.h"

namespace tpf::detail {

// The two collectives all_to_allv is made of. The blocking call runs them through the public
// calls on the caller's thread; all_to_allv_async as one queued operation (comm/operation_queue.h).
struct AllToAllvSteps {
  // all_gather of `row` int64 per rank.
  std::function<void(const int64_t* send, int64_t* recv, size_t row)> gather_rows;
  // all_to_all of `count` elements of the call's dtype per pair.
  std::function<void(const void* send, void* recv, size_t count)> exchange;
};

// `label` names the communicator in errors ("communicator 'world'").
void all_to_allv(int rank, int size, const std::string& label, const void* send,
                 std::span<const size_t> send_counts, std::span<const size_t> send_displs,
                 void* recv, std::span<const size_t> recv_counts,
                 std::span<const size_t> recv_displs, DType dtype, const AllToAllvSteps& steps,
                 const std::string& caller_problem);

// The blocking form, over comm's public calls.
void all_to_allv(Communicator& comm, const void* send, std::span<const size_t> send_counts,
                 std::span<const size_t> send_displs, void* recv,
                 std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                 DType dtype, const CallOptions& call, const std::string& caller_problem);

}  // namespace tpf::detail
