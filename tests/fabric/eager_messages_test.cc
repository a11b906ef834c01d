// The eager path of small collectives (src/coll/eager.cc, ShmFabric::eager_*): a broadcast's or
// scatter's root returns without waiting for its readers, messages wrap around the ring, and calls
// that disagree are reported as mismatches, also against a staged call or a dead root, instead of
// timing out. Also the fallback from asymmetric fences to full ones (transport/asymmetric_fence.h).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "comm/settings.h"
#include "support/expect_error.h"
#include "support/multiproc.h"
#include "tpf/comm.h"
#include "tpf/error.h"
#include "transport/shm_fabric.h"

namespace tpf::testing {
namespace {

using std::chrono::milliseconds;
using transport::ShmFabric;

RunOptions run_options() {
  RunOptions o;
  o.comm_options.timeout = milliseconds(20000);
  return o;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

void expect_mismatch_naming(const Error& e, const std::string& mine, const std::string& theirs) {
  const std::string m = e.what();
  TPF_CHILD_CHECK(e.code() == ErrorCode::mismatch,
                  "expected a mismatch, got " + std::string(error_code_name(e.code())) + ": " + m);
  TPF_CHILD_CHECK(contains(m, mine) && contains(m, theirs),
                  "message does not show both calls (" + mine + ", " + theirs + "): " + m);
}

// The value rank-independent broadcast number i carries at element j.
int32_t payload(int i, size_t j) { return i * 1000 + static_cast<int32_t>(j); }

TEST(EagerMessages, BroadcastRootReturnsWithoutReadersAndMessagesWrapTheRing) {
  SharedBlock shared;
  auto& root_done = shared.counter(0);
  // Fewer messages than ring entries: the root must return from all of them while no rank reads.
  constexpr int kUnread = static_cast<int>(ShmFabric::kEagerEntries) - 1;
  expect_all_ok(run_ranks(
      3,
      [&](Communicator& comm) {
        std::vector<int32_t> buf(ShmFabric::kEagerCapacity / sizeof(int32_t));
        auto fill = [&](int i, size_t count) {
          for (size_t j = 0; j < count; ++j) buf[j] = payload(i, j);
        };
        auto check = [&](int i, size_t count) {
          for (size_t j = 0; j < count; ++j) {
            TPF_CHILD_CHECK(buf[j] == payload(i, j), "broadcast " + std::to_string(i) +
                                                         " element " + std::to_string(j) + " is " +
                                                         std::to_string(buf[j]));
          }
        };
        if (comm.rank() == 0) {
          for (int i = 0; i < kUnread; ++i) {
            fill(i, 2);
            comm.broadcast(buf.data(), buf.data(), 2, DType::i32, 0);
          }
          root_done.store(1);
        } else {
          TPF_CHILD_CHECK(wait_until([&] { return root_done.load() == 1; }, milliseconds(20000)),
                          "the root did not return from broadcasts nobody had read yet");
          for (int i = 0; i < kUnread; ++i) {
            comm.broadcast(buf.data(), buf.data(), 2, DType::i32, 0);
            check(i, 2);
          }
        }
        // Many more, of every line count, from every root: entries are reused many times over.
        for (int i = 0; i < 200; ++i) {
          const size_t count = 1 + static_cast<size_t>(i * 7) % buf.size();
          const int root = i % comm.size();
          if (comm.rank() == root) fill(i, count);
          comm.broadcast(buf.data(), buf.data(), count, DType::i32, root);
          check(i, count);
        }
        int32_t one = 1, sum = 0;
        comm.all_reduce(&one, &sum, 1, DType::i32, ReduceOp::sum);
        TPF_CHILD_CHECK(sum == comm.size(),
                        "all_reduce after the broadcasts gave " + std::to_string(sum));
      },
      run_options()));
}

// A small scatter's root posts every block in one eager message and returns, as a broadcast's
// does; each rank reads its own block. Then scatters from every root, of every count up to twice
// the eager size (the larger ones staged), each rank checking its block.
TEST(EagerMessages, ScatterRootReturnsWithoutReadersAndEveryRankGetsItsBlock) {
  SharedBlock shared;
  auto& root_done = shared.counter(0);
  constexpr int kUnread = static_cast<int>(ShmFabric::kEagerEntries) - 1;
  constexpr size_t kRanks = 3;
  expect_all_ok(run_ranks(
      kRanks,
      [&](Communicator& comm) {
        const int me = comm.rank();
        // Blocks of up to twice the eager scatter's 256 bytes (coll/eager.cc).
        constexpr size_t kMostCount = 2 * 256 / (kRanks * sizeof(int32_t));
        std::vector<int32_t> blocks(kRanks * kMostCount), mine(kMostCount);
        // Scatter i's element j of rank r's block.
        auto value = [](int i, size_t r, size_t j) {
          return payload(i, j) + static_cast<int32_t>(r) * 100000;
        };
        auto fill = [&](int i, size_t count) {
          for (size_t r = 0; r < kRanks; ++r)
            for (size_t j = 0; j < count; ++j) blocks[r * count + j] = value(i, r, j);
        };
        auto check = [&](int i, size_t count) {
          for (size_t j = 0; j < count; ++j) {
            TPF_CHILD_CHECK(mine[j] == value(i, static_cast<size_t>(me), j),
                            "scatter " + std::to_string(i) + " element " + std::to_string(j) +
                                " is " + std::to_string(mine[j]));
          }
        };
        if (me == 0) {
          for (int i = 0; i < kUnread; ++i) {
            fill(i, 2);
            comm.scatter(blocks.data(), mine.data(), 2, DType::i32, 0);
            check(i, 2);
          }
          root_done.store(1);
        } else {
          TPF_CHILD_CHECK(wait_until([&] { return root_done.load() == 1; }, milliseconds(20000)),
                          "the root did not return from scatters nobody had read yet");
          for (int i = 0; i < kUnread; ++i) {
            comm.scatter(blocks.data(), mine.data(), 2, DType::i32, 0);
            check(i, 2);
          }
        }
        for (int i = 0; i < 200; ++i) {
          const size_t count = 1 + static_cast<size_t>(i * 7) % kMostCount;
          const int root = i % comm.size();
          if (me == root) fill(i, count);
          comm.scatter(blocks.data(), mine.data(), count, DType::i32, root);
          check(i, count);
        }
      },
      run_options()));
}

TEST(EagerMessages, DisagreeingSmallCollectivesAreReportedOnBothRanks) {
  expect_all_ok(run_ranks(
      2,
      [](Communicator& comm) {
        float a[2] = {1, 2}, b[4] = {};
        auto e = expect_error("small all_reduce vs all_gather", [&] {
          if (comm.rank() == 0) {
            comm.all_reduce(a, b, 2, DType::f32, ReduceOp::sum);
          } else {
            comm.all_gather(a, b, 2, DType::f32);
          }
        });
        expect_mismatch_naming(e, "all_reduce", "all_gather");
      },
      run_options()));
}

TEST(EagerMessages, SmallCallAgainstAStagedCallIsAMismatchNotATimeout) {
  // Rank 0's call travels as an eager message, rank 1's in staged steps: each must notice the
  // other's signal of the wrong kind (the 20 s timeout would give ErrorCode::timeout instead).
  expect_all_ok(run_ranks(
      2,
      [](Communicator& comm) {
        const size_t count = comm.rank() == 0 ? 2 : 65536;
        std::vector<float> a(count, 1.0f), b(count);
        auto e = expect_error("all_reduce of 2 vs 65536 elements", [&] {
          comm.all_reduce(a.data(), b.data(), count, DType::f32, ReduceOp::sum);
        });
        expect_mismatch_naming(e, "count=2", "count=65536");
      },
      run_options()));
}

TEST(EagerMessages, DisagreeingBroadcastRootsAreReportedAtTheNextSmallCollective) {
  // Each rank believes it is the root, so nobody reads: the roots return at once (as designed),
  // and the next small collective finds the stale broadcast where it expects its own call.
  expect_all_ok(run_ranks(
      2,
      [](Communicator& comm) {
        float x = 1, y = 0;
        comm.broadcast(&x, &x, 1, DType::f32, comm.rank());
        auto e = expect_error("all_reduce after broadcasts with different roots",
                              [&] { comm.all_reduce(&x, &y, 1, DType::f32, ReduceOp::sum); });
        expect_mismatch_naming(e, "all_reduce", "broadcast");
      },
      run_options()));
}

// The same where a staged step comes next (a barrier, a large all_reduce): each rank compares
// its peers' unread messages once they all arrived, so the outcome does not depend on who
// arrived first (until 2026-12-06 only a peer still absent was looked at, and the barrier after
// rank 3 took itself for the root of everyone else's broadcast from rank 2 passed where rank 3
// arrived first: failed in 3 of 3 runs of this test).
TEST(EagerMessages, DisagreeingBroadcastRootsAreReportedAtTheNextStagedStep) {
  for (const size_t next_count : {size_t{0}, size_t{1} << 16}) {
    SCOPED_TRACE(next_count == 0 ? "barrier" : "all_reduce of 64 Ki elements");
    expect_all_ok(run_ranks(
        4,
        [&](Communicator& comm) {
          float x = static_cast<float>(comm.rank());
          comm.broadcast(&x, &x, 1, DType::f32, comm.rank() == 3 ? 3 : 2);
          std::vector<float> a(next_count, 1.0f), b(next_count);
          auto e = expect_error("a staged step after broadcasts from rank 2 and rank 3", [&] {
            if (next_count == 0) {
              comm.barrier();
            } else {
              comm.all_reduce(a.data(), b.data(), next_count, DType::f32, ReduceOp::sum);
            }
          });
          expect_mismatch_naming(e, next_count == 0 ? "barrier" : "all_reduce", "broadcast");
        },
        run_options()));
  }
}

TEST(EagerMessages, AKilledRootIsReportedByTheRanksWaitingForItsMessage) {
  auto outcomes = run_ranks(
      3,
      [](Communicator& comm) {
        comm.barrier();
        if (comm.rank() == 0) ::raise(SIGKILL);
        float x = 0;
        auto e = expect_error("small broadcast from a killed root",
                              [&] { comm.broadcast(&x, &x, 1, DType::f32, 0); });
        TPF_CHILD_CHECK(e.code() == ErrorCode::peer_died, e.what());
        TPF_CHILD_CHECK(std::regex_search(std::string(e.what()), std::regex("rank[^0-9]{0,24}0")),
                        "message does not name rank 0: " + std::string(e.what()));
      },
      run_options());
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_EQ(outcomes[0].signal, SIGKILL) << outcomes[0].describe();
  EXPECT_TRUE(outcomes[1].ok()) << outcomes[1].describe();
  EXPECT_TRUE(outcomes[2].ok()) << outcomes[2].describe();
}

TEST(FenceFallback, FullFencesOnBothSidesGiveTheSameResults) {
  // With TPF_ASYMMETRIC_FENCES=0 no rank registers for membarrier, so posts use full fences and
  // sleepers plain ones. A rank that arrives late makes the others reach the futex sleep, whose
  // wake-up then depends on that pairing.
  SharedBlock shared;
  auto& arrived = shared.counter(0);
  expect_all_ok(run_ranks_raw(
      3,
      [&](const RankContext& ctx) {
        ::setenv("TPF_ASYMMETRIC_FENCES", "0", 1);
        Communicator comm = Communicator::create(ctx.rank, ctx.size, ctx.store_address, ctx.secret,
                                                 ctx.comm_options);
        TPF_CHILD_CHECK(!detail::resolve_comm_settings().asymmetric_fences,
                        "TPF_ASYMMETRIC_FENCES=0 did not turn the asymmetric fences off");
        for (int round = 0; round < 3; ++round) {
          if (comm.rank() == round) {  // the others wait in the broadcast meanwhile
            TPF_CHILD_CHECK(
                wait_until([&] { return arrived.load() >= 2 * (round + 1); }, milliseconds(20000)),
                "the other ranks did not reach the broadcast");
            // Enough for them to pass the spin and yield phases of their wait and go to sleep.
            const auto until = std::chrono::steady_clock::now() + milliseconds(20);
            while (std::chrono::steady_clock::now() < until) std::this_thread::yield();
          } else {
            arrived.fetch_add(1);
          }
          int32_t value = comm.rank() == round ? 1000 + round : -1;
          comm.broadcast(&value, &value, 1, DType::i32, round);
          TPF_CHILD_CHECK(value == 1000 + round, "broadcast gave " + std::to_string(value));
          std::vector<float> big(100000, 1.0f), sum(big.size());
          comm.all_reduce(big.data(), sum.data(), big.size(), DType::f32, ReduceOp::sum);
          TPF_CHILD_CHECK(sum.front() == 3.0f && sum.back() == 3.0f, "staged all_reduce is wrong");
        }
      },
      run_options()));
}

}  // namespace
}  // namespace tpf::testing
