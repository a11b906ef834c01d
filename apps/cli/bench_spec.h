// What `tpf bench` measures: the collectives it knows, how a sweep size (bytes) maps onto the
// element counts each collective is called with, and the nccl-tests bus-bandwidth factors. Pure
// arithmetic, no communicator, so it can be tested without starting ranks.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

namespace tpf::cli {

enum class Collective {
  all_reduce,
  all_gather,
  reduce_scatter,
  broadcast,
  reduce,
  all_to_all,
  gather,
  scatter,
  sendrecv,  // ring shift: every rank sends to rank+1 and receives from rank-1
  barrier,
};

std::optional<Collective> parse_collective(std::string_view name) noexcept;
const char* collective_name(Collective c) noexcept;
// "all_reduce|all_gather|..." for usage and error messages.
const char* collective_choices() noexcept;

// Reductions print their op and rooted collectives their root; the others print "none" / -1.
bool collective_reduces(Collective c) noexcept;
bool collective_has_root(Collective c) noexcept;
// False where the API defines no in-place form (all_to_all, gather, scatter, sendrecv, barrier).
bool collective_has_in_place(Collective c) noexcept;

// Element counts of one call, following nccl-tests: `bytes` is the largest buffer a rank touches
// (all_gather's output, reduce_scatter's input, the root's gather/scatter buffer, each rank's
// all_to_all buffer), so blocks of nranks elements are rounded down.
struct CallShape {
  size_t count = 0;       // the count argument passed to the call
  size_t send_elems = 0;  // elements of the send buffer
  size_t recv_elems = 0;  // elements of the receive buffer
  size_t bytes = 0;       // bytes as reported (after rounding), the basis of algbw
  size_t elems = 0;       // elements as reported in the table's count column (bytes / elem size)
};

// nullopt when `bytes` is too small to give every rank one element.
std::optional<CallShape> call_shape(Collective c, size_t bytes, size_t elem_size, int nranks);

// busbw = algbw * factor (nccl-tests): all_reduce 2(n-1)/n; all_gather, reduce_scatter,
// all_to_all, gather, scatter (n-1)/n; broadcast, reduce, sendrecv 1; barrier 0.
double bus_factor(Collective c, int nranks) noexcept;

// min, min*factor, ... while <= max (at least one size: min; only min if it is 0 or factor < 2).
std::vector<size_t> sweep_sizes(size_t min_bytes, size_t max_bytes, size_t factor);

// "8", "64K", "32M", "1G" (binary multiples; a trailing B or iB is accepted: "4KiB", "1MB").
std::optional<size_t> parse_byte_size(std::string_view text) noexcept;

}  // namespace tpf::cli
