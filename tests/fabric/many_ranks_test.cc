// More ranks on one machine than the sizes tuned for a few: the store's limit of connections that
// have not said hello (64) and the point at which a rank's point-to-point mailboxes shrink (64
// ranks: ShmFabric::mailbox_chunk_bytes). Before 2026-12-05, `tpf run -n 128` lost ranks whose
// hello came late, and 512 ranks needed 32 GiB of shared memory.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "support/multiproc.h"
#include "tpf/comm.h"

namespace tpf {
namespace {

constexpr int kRanks = 72;

TEST(ManyRanksOnOneMachine, SeventyTwoRanksReduceAndPassMessagesLargerThanAMailboxRoundARing) {
  testing::RunOptions options;
  options.deadline = std::chrono::minutes(5);  // a hang guard: 72 processes on 2 loaded cores
  testing::expect_all_ok(testing::run_ranks(
      kRanks,
      [](Communicator& comm) {
        const int rank = comm.rank();
        std::vector<int64_t> sums(1000);
        for (size_t i = 0; i < sums.size(); ++i) sums[i] = rank * 1000 + static_cast<int64_t>(i);
        comm.all_reduce(sums.data(), sums.data(), sums.size(), DType::i64, ReduceOp::sum);
        for (size_t i = 0; i < sums.size(); ++i) {
          const int64_t expected =
              int64_t{1000} * (kRanks - 1) * kRanks / 2 + kRanks * static_cast<int64_t>(i);
          TPF_CHILD_CHECK(sums[i] == expected, "element " + std::to_string(i) + " is " +
                                                   std::to_string(sums[i]) + ", not " +
                                                   std::to_string(expected));
        }
        // 100 KiB: two mailbox chunks of 72 ranks (56.9 KiB each) and a part of a third.
        constexpr size_t kWords = 100 * 1024 / 4;
        std::vector<int32_t> out(kWords), in(kWords);
        for (size_t i = 0; i < kWords; ++i) out[i] = rank * 1000003 + static_cast<int32_t>(i);
        const int next = (rank + 1) % kRanks, previous = (rank + kRanks - 1) % kRanks;
        Work sent = comm.send_async(out.data(), kWords, DType::i32, next);
        comm.recv(in.data(), kWords, DType::i32, previous);
        sent.wait();
        for (size_t i = 0; i < kWords; ++i) {
          const int32_t expected = previous * 1000003 + static_cast<int32_t>(i);
          TPF_CHILD_CHECK(in[i] == expected, "word " + std::to_string(i) + " from rank " +
                                                 std::to_string(previous) + " is " +
                                                 std::to_string(in[i]));
        }
      },
      options));
}

}  // namespace
}  // namespace tpf
