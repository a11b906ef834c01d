// What `tpf bench` measures: how a sweep size (bytes) maps onto the element counts each collective
// is called with. Pure arithmetic, no communicator, so it can be tested without starting ranks.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "coll/collective_kinds.h"

namespace tpf::cli {

// The vocabulary (names, roots, in-place forms, bus-bandwidth factors) is the fabric's one table.
using coll::Collective;
using coll::collective_choices;
using coll::collective_has_in_place;
using coll::collective_has_root;
using coll::collective_name;
using coll::collective_reduces;
using coll::parse_collective;

// How `tpf bench --async` waits for each call: Work::wait; a loop of Work::wait_for (as Python's
// Work.wait(timeout=...)); a loop of Work::test with a yield between polls (as torch's
// `while not work.is_completed()`).
enum class AsyncWait { wait, timed, poll };
// "wait", "timed", "poll" (the JSON's "wait").
const char* async_wait_name(AsyncWait wait);

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

// min, min*factor, ... while <= max (at least one size: min; only min if it is 0 or factor < 2).
std::vector<size_t> sweep_sizes(size_t min_bytes, size_t max_bytes, size_t factor);

// "8", "64K", "32M", "1G" (binary multiples; a trailing B or iB is accepted: "4KiB", "1MB").
std::optional<size_t> parse_byte_size(std::string_view text) noexcept;

}  // namespace tpf::cli
