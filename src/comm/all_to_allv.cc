// Communicator::all_to_allv: a count per pair, run as one all_to_all of the largest block.
// Padding to the largest block makes it inherit everything all_to_all already guarantees (shared
// memory inside a host, the network between, fingerprints, deadlines, abort) at the price of time
// and scratch that follow the largest block rather than the sum of the blocks; an algorithm that
// moves only the real blocks is future work (docs/fabric.md).

#include "comm/all_to_allv.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "tpf/comm.h"
#include "tpf/error.h"

namespace tpf {
namespace {

// What each rank tells every other before any data moves, as one row of int64: whether its own
// arguments are usable (so that one rank's bad input fails every rank at once, not at a deadline),
// then its send counts, then its receive counts.
constexpr size_t kValid = 0;
size_t row_length(int n) { return 1 + 2 * static_cast<size_t>(n); }
size_t send_at(int j) { return 1 + static_cast<size_t>(j); }
size_t recv_at(int n, int i) { return 1 + static_cast<size_t>(n) + static_cast<size_t>(i); }

// Why this rank's arguments cannot be used, or "" when they can.
std::string argument_problem(int n, const void* send, std::span<const size_t> send_counts,
                             std::span<const size_t> send_displs, const void* recv,
                             std::span<const size_t> recv_counts,
                             std::span<const size_t> recv_displs, DType dtype) {
  const size_t un = static_cast<size_t>(n);
  if (send_counts.size() != un || send_displs.size() != un || recv_counts.size() != un ||
      recv_displs.size() != un) {
    return "send_counts, send_displs, recv_counts and recv_displs hold " +
           std::to_string(send_counts.size()) + ", " + std::to_string(send_displs.size()) + ", " +
           std::to_string(recv_counts.size()) + " and " + std::to_string(recv_displs.size()) +
           " entries; each must hold one per rank (" + std::to_string(n) + ")";
  }
  size_t element = 0;
  try {
    element = dtype_size(dtype);
  } catch (const Error& e) {
    return e.what();
  }
  // Counts travel as int64 in the exchange below.
  const size_t max_elements =
      std::min<size_t>(std::numeric_limits<size_t>::max() / element,
                       static_cast<size_t>(std::numeric_limits<int64_t>::max()));
  auto block_problem = [&](const char* side, std::span<const size_t> counts,
                           std::span<const size_t> displs, const void* buffer) -> std::string {
    for (size_t j = 0; j < un; ++j) {
      if (counts[j] > max_elements || displs[j] > max_elements - counts[j]) {
        return std::string(side) + " block " + std::to_string(j) + " (displacement " +
               std::to_string(displs[j]) + ", count " + std::to_string(counts[j]) +
               ") does not fit in memory";
      }
      if (counts[j] > 0 && buffer == nullptr) {
        return std::string(side) + " buffer is null but block " + std::to_string(j) + " has " +
               std::to_string(counts[j]) + " elements";
      }
    }
    return "";
  };
  if (auto problem = block_problem("send", send_counts, send_displs, send); !problem.empty())
    return problem;
  if (auto problem = block_problem("recv", recv_counts, recv_displs, recv); !problem.empty())
    return problem;
  // Receive blocks that overlap would leave the result up to the order of the copies.
  std::vector<std::pair<size_t, size_t>> blocks;  // (displacement, peer), non-empty only
  for (size_t i = 0; i < un; ++i) {
    if (recv_counts[i] > 0) blocks.emplace_back(recv_displs[i], i);
  }
  std::sort(blocks.begin(), blocks.end());
  for (size_t k = 1; k < blocks.size(); ++k) {
    const size_t before = blocks[k - 1].second, after = blocks[k].second;
    if (recv_displs[before] + recv_counts[before] > recv_displs[after]) {
      return "the receive blocks from ranks " + std::to_string(std::min(before, after)) + " and " +
             std::to_string(std::max(before, after)) + " overlap";
    }
  }
  return "";
}

}  // namespace

void Communicator::all_to_allv(const void* send, std::span<const size_t> send_counts,
                               std::span<const size_t> send_displs, void* recv,
                               std::span<const size_t> recv_counts,
                               std::span<const size_t> recv_displs, DType dtype,
                               const CallOptions& call) {
  detail::all_to_allv(*this, send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype,
                      call, "");
}

namespace detail {

void all_to_allv(Communicator& comm, const void* send, std::span<const size_t> send_counts,
                 std::span<const size_t> send_displs, void* recv,
                 std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                 DType dtype, const CallOptions& call, const std::string& caller_problem) {
  const AllToAllvSteps steps{[&](const int64_t* mine, int64_t* table, size_t row) {
                               comm.all_gather(mine, table, row, DType::i64, call);
                             },
                             [&](const void* out, void* in, size_t count) {
                               comm.all_to_all(out, in, count, dtype, call);
                             }};
  all_to_allv(comm.rank(), comm.size(), "communicator '" + comm.name() + "'", send, send_counts,
              send_displs, recv, recv_counts, recv_displs, dtype, steps, caller_problem);
}

void all_to_allv(int me, int n, const std::string& label, const void* send,
                 std::span<const size_t> send_counts, std::span<const size_t> send_displs,
                 void* recv, std::span<const size_t> recv_counts,
                 std::span<const size_t> recv_displs, DType dtype, const AllToAllvSteps& steps,
                 const std::string& caller_problem) {
  const std::string where = "all_to_allv on " + label;
  const std::string problem = !caller_problem.empty()
                                  ? caller_problem
                                  : argument_problem(n, send, send_counts, send_displs, recv,
                                                     recv_counts, recv_displs, dtype);
  // Every rank's counts both ways, so that every rank checks every pair alike.
  const size_t row = row_length(n);
  std::vector<int64_t> mine(row, 0);
  if (problem.empty()) {
    mine[kValid] = 1;
    for (int j = 0; j < n; ++j) {
      mine[send_at(j)] = static_cast<int64_t>(send_counts[j]);
      mine[recv_at(n, j)] = static_cast<int64_t>(recv_counts[j]);
    }
  }
  std::vector<int64_t> table(row * static_cast<size_t>(n));
  steps.gather_rows(mine.data(), table.data(), row);
  auto at = [&](int r, size_t column) { return table[static_cast<size_t>(r) * row + column]; };
  for (int r = 0; r < n; ++r) {
    if (at(r, kValid) != 0) continue;
    throw Error(
        ErrorCode::invalid_argument,
        where + ": rank " + std::to_string(r) +
            (r == me ? ": " + problem : " passed invalid arguments (its error says which)"));
  }
  int64_t largest = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      const int64_t sends = at(i, send_at(j)), expects = at(j, recv_at(n, i));
      if (sends != expects) {
        throw Error(ErrorCode::mismatch,
                    where + ": rank " + std::to_string(i) + " sends " + std::to_string(sends) +
                        " elements to rank " + std::to_string(j) + ", which expects " +
                        std::to_string(expects) + " (its recv_counts[" + std::to_string(i) + "])");
      }
      largest = std::max(largest, sends);
    }
  }
  if (largest == 0) return;
  // Every block padded to the largest: block j of `out` goes to rank j, block i of `in` came from
  // rank i. The padding travels but is never read.
  const size_t element = dtype_size(dtype);
  if (static_cast<uint64_t>(largest) >
      std::numeric_limits<size_t>::max() / element / 2 / static_cast<size_t>(n)) {
    throw Error(ErrorCode::resource, where + ": " + std::to_string(n) + " blocks of " +
                                         std::to_string(largest) +
                                         " elements (the largest pair's) do not fit in memory");
  }
  const size_t block_bytes = static_cast<size_t>(largest) * element;
  std::vector<std::byte> out(block_bytes * static_cast<size_t>(n));
  std::vector<std::byte> in(out.size());
  const auto* send_bytes = static_cast<const std::byte*>(send);
  for (int j = 0; j < n; ++j) {
    if (send_counts[j] == 0) continue;
    std::memcpy(out.data() + static_cast<size_t>(j) * block_bytes,
                send_bytes + send_displs[j] * element, send_counts[j] * element);
  }
  steps.exchange(out.data(), in.data(), static_cast<size_t>(largest));
  auto* recv_bytes = static_cast<std::byte*>(recv);
  for (int i = 0; i < n; ++i) {
    if (recv_counts[i] == 0) continue;
    std::memcpy(recv_bytes + recv_displs[i] * element,
                in.data() + static_cast<size_t>(i) * block_bytes, recv_counts[i] * element);
  }
}

}  // namespace detail
}  // namespace tpf
