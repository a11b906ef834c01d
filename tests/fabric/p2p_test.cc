// Point-to-point messages: they leave the collectives' sequence alone (ranks outside a send/recv
// stay in step), sends and receives progress independently (large rings do not deadlock, also
// beside collectives), and a stuck or broken transfer names the peer.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "support/async_waits.h"
#include "support/expect_error.h"
#include "support/multiproc.h"
#include "tpf/comm.h"
#include "tpf/error.h"

namespace tpf::testing {
namespace {

using std::chrono::milliseconds;

RunOptions run_options(milliseconds comm_timeout = milliseconds(60000)) {
  RunOptions o;
  o.deadline = milliseconds(110000);
  o.comm_options.timeout = comm_timeout;
  return o;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Element i of rank r's message in round `round`: distinct per sender, position and round.
int32_t pattern(int rank, size_t i, int round) {
  return static_cast<int32_t>(static_cast<uint32_t>(i * 2654435761u) ^
                              (static_cast<uint32_t>(rank) << 24) ^
                              static_cast<uint32_t>(round * 7919));
}

std::vector<int32_t> message(int rank, size_t count, int round) {
  std::vector<int32_t> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = pattern(rank, i, round);
  return out;
}

// The first index where `got` differs from rank `from`'s message, or "" if none.
std::string first_difference(const std::vector<int32_t>& got, int from, int round) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != pattern(from, i, round)) {
      return "element " + std::to_string(i) + " of " + std::to_string(got.size()) + " is " +
             std::to_string(got[i]) + ", expected " + std::to_string(pattern(from, i, round));
    }
  }
  return "";
}

TEST(P2pSequence, SendRecvBetweenTwoOfThreeRanksLeavesTheNextCollectiveInStep) {
  expect_all_ok(run_ranks(3, [](Communicator& comm) {
    const int me = comm.rank();
    std::vector<float> buf(100, 1.0f);
    comm.all_reduce(buf.data(), buf.data(), buf.size(), DType::f32, ReduceOp::sum);
    for (int round = 0; round < 3; ++round) {
      std::vector<int32_t> msg = message(0, 5000, round), got(5000);
      if (me == 0) comm.send(msg.data(), msg.size(), DType::i32, 1);
      if (me == 1) {
        comm.recv(got.data(), got.size(), DType::i32, 0);
        const std::string diff = first_difference(got, 0, round);
        TPF_CHILD_CHECK(diff.empty(), "recv: " + diff);
      }
      if (me == 1) comm.send_async(msg.data(), 3, DType::i32, 2).wait();
      if (me == 2) comm.recv_async(got.data(), 3, DType::i32, 1).wait();
      // Rank 2 took part in neither the first send nor its recv: the collective still matches.
      std::vector<int64_t> v(7, me + 1), sum(7);
      comm.all_reduce(v.data(), sum.data(), v.size(), DType::i64, ReduceOp::sum);
      TPF_CHILD_CHECK(sum[6] == 6, "all_reduce after send/recv: " + std::to_string(sum[6]));
      comm.barrier();
    }
    TPF_CHILD_CHECK(comm.next_sequence() == 7,
                    "collectives started: " + std::to_string(comm.next_sequence()));
  }, run_options()));
}

// Every rank sends `count` elements to the next and receives from the previous, asynchronously
// and in the order given; then both complete.
void ring_exchange(Communicator& comm, size_t count, bool recv_first, int round) {
  const int n = comm.size(), me = comm.rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  std::vector<int32_t> out = message(me, count, round), in(count, 0);
  Work sent, received;
  if (recv_first) {
    received = comm.recv_async(in.data(), count, DType::i32, prev);
    sent = comm.send_async(out.data(), count, DType::i32, next);
  } else {
    sent = comm.send_async(out.data(), count, DType::i32, next);
    received = comm.recv_async(in.data(), count, DType::i32, prev);
  }
  sent.wait();
  received.wait();
  const std::string diff = first_difference(in, prev, round);
  TPF_CHILD_CHECK(diff.empty(), "ring of " + std::to_string(count) + " from rank " +
                                    std::to_string(prev) + ": " + diff);
}

class P2pRing : public ::testing::TestWithParam<int> {};

// 64 MiB to the next rank while 64 MiB arrive from the previous (torch's batch_isend_irecv, a
// pipeline's exchange): with a two-chunk mailbox, a send that blocked its own receive deadlocked.
TEST_P(P2pRing, LargeMessagesBothWaysDoNotDeadlock) {
  const int n = GetParam();
#if defined(__SANITIZE_ADDRESS__)
  const size_t count = (size_t{8} << 20) / 4;  // 8 MiB: still 128 mailbox chunks each way
#else
  const size_t count = (n <= 4 ? size_t{64} << 20 : size_t{16} << 20) / 4;
#endif
  expect_all_ok(run_ranks(n, [&](Communicator& comm) {
    ring_exchange(comm, count, /*recv_first=*/false, 0);
    ring_exchange(comm, count / 3 + 1, /*recv_first=*/true, 1);
  }, run_options()));
}

// A blocking recv drives the same engine as the rank's earlier asynchronous send.
TEST_P(P2pRing, BlockingReceiveAfterAsynchronousSend) {
  const int n = GetParam();
  const size_t count = size_t{3} << 20;  // 12 MiB
  expect_all_ok(run_ranks(n, [&](Communicator& comm) {
    const int me = comm.rank();
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    std::vector<int32_t> out = message(me, count, 5), in(count);
    Work sent = comm.send_async(out.data(), count, DType::i32, next);
    comm.recv(in.data(), count, DType::i32, prev);
    sent.wait();
    const std::string diff = first_difference(in, prev, 5);
    TPF_CHILD_CHECK(diff.empty(), "blocking recv: " + diff);
  }, run_options()));
}
INSTANTIATE_TEST_SUITE_P(Ranks, P2pRing, ::testing::Values(2, 3, 4, 5, 6, 7, 8),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

// A large send in flight does not hold up the collectives that follow it: the receiver takes
// part in them before it posts the matching receive.
TEST(P2pProgress, PendingSendDoesNotBlockCollectives) {
  expect_all_ok(run_ranks(3, [](Communicator& comm) {
    const int me = comm.rank();
    const size_t count = size_t{4} << 20;
    std::vector<int32_t> out = message(0, count, 9), in(count);
    Work sent;
    if (me == 0) sent = comm.send_async(out.data(), count, DType::i32, 2);
    std::vector<double> v(1 << 16, 0.5), sum(1 << 16);
    for (int i = 0; i < 3; ++i) {
      comm.all_reduce(v.data(), sum.data(), v.size(), DType::f64, ReduceOp::sum);
      TPF_CHILD_CHECK(sum[123] == 1.5, "all_reduce beside a pending send");
    }
    if (me == 2) {
      comm.recv(in.data(), count, DType::i32, 0);
      const std::string diff = first_difference(in, 0, 9);
      TPF_CHILD_CHECK(diff.empty(), "recv after collectives: " + diff);
    }
    if (me == 0) sent.wait();
  }, run_options()));
}

// Many messages in flight in both directions between every pair, posted in a scrambled order,
// still match in issue order per pair and direction.
TEST(P2pProgress, ManyMessagesPerPairMatchInIssueOrder) {
  expect_all_ok(run_ranks(4, [](Communicator& comm) {
    const int n = comm.size(), me = comm.rank();
    constexpr int kMessages = 6;
    const size_t sizes[kMessages] = {1, 70000, 0, 12345, 3, 200000};
    std::vector<std::vector<int32_t>> outs, ins;
    std::vector<Work> works;
    for (int k = 0; k < kMessages; ++k) {
      for (int d = 1; d < n; ++d) {  // peers in a different order on every rank
        const int to = (me + d) % n, from = (me + n - d) % n;
        outs.push_back(message(me * 16 + to, sizes[k], k));
        ins.emplace_back(sizes[k]);
        works.push_back(comm.recv_async(ins.back().data(), sizes[k], DType::i32, from));
        works.push_back(comm.send_async(outs.back().data(), sizes[k], DType::i32, to));
      }
    }
    for (Work& w : works) w.wait();
    size_t i = 0;
    for (int k = 0; k < kMessages; ++k) {
      for (int d = 1; d < n; ++d, ++i) {
        const int from = (me + n - d) % n;
        const std::string diff = first_difference(ins[i], from * 16 + me, k);
        TPF_CHILD_CHECK(diff.empty(), "message " + std::to_string(k) + " from rank " +
                                          std::to_string(from) + ": " + diff);
      }
    }
  }, run_options()));
}

// Two threads of one rank make blocking calls at once: one drives, the other's transfer is moved
// by the driver (or by the progress thread once the driver returns).
TEST(P2pProgress, BlockingCallsFromTwoThreadsOfOneRank) {
  expect_all_ok(run_ranks(3, [](Communicator& comm) {
    const int me = comm.rank();
    constexpr int kRounds = 20;
    const size_t count = 100000;
    if (me == 0) {
      auto sender = [&](int peer) {
        for (int round = 0; round < kRounds; ++round) {
          std::vector<int32_t> out = message(peer, count, round);
          comm.send(out.data(), count, DType::i32, peer);
        }
      };
      std::thread to_1(sender, 1), to_2(sender, 2);
      to_1.join();
      to_2.join();
    } else {
      for (int round = 0; round < kRounds; ++round) {
        std::vector<int32_t> in(count);
        comm.recv(in.data(), count, DType::i32, 0);
        const std::string diff = first_difference(in, me, round);
        TPF_CHILD_CHECK(diff.empty(), "round " + std::to_string(round) + ": " + diff);
      }
    }
    comm.barrier();
  }, run_options()));
}

// An asynchronous transfer is moved by whoever waits for it (Work::wait takes the driver role,
// from any thread, one after another), beside a blocking call of another thread that holds the
// role meanwhile, by a thread that polls (Work::test takes one round), and by the progress thread
// where nobody moves them (Work::completed only looks).
// 1 MiB messages: many chunks, so no single round of the driver finishes one.
TEST(P2pProgress, AsyncTransfersMoveWithTheirWaitersAndWithoutThem) {
  expect_all_ok(run_ranks(
      3,
      [](Communicator& comm) {
        const int n = comm.size(), me = comm.rank();
        const int next = (me + 1) % n, prev = (me + n - 1) % n;
        const size_t count = size_t{1} << 18;
        auto expect_from_prev = [&](const std::vector<int32_t>& in, int round) {
          const std::string diff = first_difference(in, prev, round);
          TPF_CHILD_CHECK(diff.empty(), "round " + std::to_string(round) + ": " + diff);
        };
        for (int round = 0; round < 6; ++round) {
          const std::vector<int32_t> out = message(me, count, round);
          std::vector<int32_t> in(count, -1);
          WaitOnAnotherThread received(comm.recv_async(in.data(), count, DType::i32, prev));
          if (round % 2 == 0) {
            comm.send_async(out.data(), count, DType::i32, next).wait();
          } else {
            comm.send(out.data(), count, DType::i32, next);  // holds the role while it drives
          }
          received.join();
          expect_from_prev(in, round);
        }
        {  // polled: each test() takes a round where the role is free
          const std::vector<int32_t> out = message(me, count, 6);
          std::vector<int32_t> in(count, -1);
          Work received = comm.recv_async(in.data(), count, DType::i32, prev);
          Work sent = comm.send_async(out.data(), count, DType::i32, next);
          const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
          while (!(sent.test() && received.test()) && std::chrono::steady_clock::now() < give_up) {
          }
          TPF_CHILD_CHECK(sent.test() && received.test(), "the polled transfers never finished");
          expect_from_prev(in, 6);
        }
        const std::vector<int32_t> out = message(me, count, 7);
        std::vector<int32_t> in(count, -1);
        Work received = comm.recv_async(in.data(), count, DType::i32, prev);
        Work sent = comm.send_async(out.data(), count, DType::i32, next);
        TPF_CHILD_CHECK(wait_until([&] { return sent.completed(); }, std::chrono::seconds(60)),
                        "the unwaited send never finished");
        TPF_CHILD_CHECK(wait_until([&] { return received.completed(); }, std::chrono::seconds(60)),
                        "the unwaited receive never finished");
        sent.wait();  // rethrows a failure
        received.wait();
        expect_from_prev(in, 7);
      },
      run_options()));
}

// A waiter that does not hold the driver role returns as soon as its transfer is done, though
// the holder goes on: here the holder waits for a message that rank 1 sends only after a barrier
// that the other thread of rank 0 joins once its wait returned.
TEST(P2pProgress, AWaiterReturnsOnceItsTransferIsDoneWhileTheRoleHolderGoesOn) {
  expect_all_ok(run_ranks(
      3,
      [](Communicator& comm) {
        const int me = comm.rank();
        int32_t value = 7, got = -1;
        if (me == 0) {
          Work from_1 = comm.recv_async(&got, 1, DType::i32, 1);
          std::atomic<bool> waiting{false};
          std::exception_ptr other_failed;
          std::thread other([&] {
            try {
              waiting.store(true);
              from_1.wait();  // takes the role first, most often, and keeps it until rank 1 sends
            } catch (...) {
              other_failed = std::current_exception();
            }
          });
          while (!waiting.load()) std::this_thread::yield();
          comm.send_async(&value, 1, DType::i32, 2).wait();
          comm.barrier();
          other.join();
          if (other_failed) std::rethrow_exception(other_failed);
          TPF_CHILD_CHECK(got == 8, "from rank 1: " + std::to_string(got));
        } else if (me == 1) {
          comm.barrier();
          value = 8;
          comm.send(&value, 1, DType::i32, 0);
        } else {
          comm.recv(&got, 1, DType::i32, 0);
          TPF_CHILD_CHECK(got == 7, "from rank 0: " + std::to_string(got));
          comm.barrier();
        }
      },
      run_options(milliseconds(20000))));
}

// A wait on a transfer of a communicator destroyed meanwhile ends with Error(aborted), whether it
// held the driver role at that moment or not yet.
TEST(P2pProgress, AWaitOnATransferOfADestroyedCommunicatorEndsAborted) {
  expect_all_ok(run_ranks(
      2, [](Communicator& comm) { expect_destroy_ends_a_pending_wait(comm, 1); }, run_options()));
}

// Work::wait_for ends at its time with the transfer still pending, and moves it meanwhile.
TEST(P2pProgress, TimedWaitsEndAtTheirTimeAndMoveTheTransfer) {
  expect_all_ok(run_ranks(
      3, [](Communicator& comm) { expect_timed_waits_end_at_their_time(comm, 2); }, run_options()));
}

TEST(P2pErrors, ReceiveThatNeverArrivesTimesOutNamingThePeer) {
  SharedBlock shared;
  auto& done = shared.counter(0);
  expect_all_ok(run_ranks(2, [&](Communicator& comm) {
    if (comm.rank() == 1) {  // never sends; leaves once rank 0 has timed out
      TPF_CHILD_CHECK(wait_until([&] { return done.load() == 1; }, milliseconds(60000)),
                      "rank 0 never finished");
      return;
    }
    std::vector<int32_t> in(1000);
    Error e = expect_error("recv from a silent rank", [&] {
      comm.recv(in.data(), in.size(), DType::i32, 1, CallOptions{milliseconds(300)});
    });
    done.store(1);
    const std::string m = e.what();
    TPF_CHILD_CHECK(e.code() == ErrorCode::timeout, "code: " + std::string(m));
    TPF_CHILD_CHECK(contains(m, "recv #0 from rank 1") && contains(m, "has not sent"),
                    "message: " + m);
  }, run_options()));
}

TEST(P2pErrors, MismatchedMessageSizesAreReportedAndLaterCallsKeepTheRootCause) {
  expect_all_ok(run_ranks(2, [](Communicator& comm) {
    std::vector<int32_t> buf(64, 7);
    if (comm.rank() == 0) {
      comm.send(buf.data(), 64, DType::i32, 1);
    } else {
      Error e = expect_error("recv of 32 against a send of 64", [&] {
        comm.recv(buf.data(), 32, DType::i32, 0);
      });
      const std::string m = e.what();
      TPF_CHILD_CHECK(e.code() == ErrorCode::mismatch, "code: " + m);
      TPF_CHILD_CHECK(contains(m, "count=32") && contains(m, "count=64"), "message: " + m);
      // Later operations, collective or not, report the first failure's kind, not "aborted".
      Error later = expect_error("barrier after the mismatch", [&] { comm.barrier(); });
      TPF_CHILD_CHECK(later.code() == ErrorCode::mismatch,
                      "later call: " + std::string(later.what()));
      Error later_p2p = expect_error("send after the mismatch", [&] {
        comm.send(buf.data(), 1, DType::i32, 0);
      });
      TPF_CHILD_CHECK(later_p2p.code() == ErrorCode::mismatch,
                      "later send: " + std::string(later_p2p.what()));
    }
  }, run_options()));
}

TEST(P2pErrors, AbortFailsPendingTransfersAtOnce) {
  expect_all_ok(run_ranks(2, [](Communicator& comm) {
    std::vector<int32_t> in(1 << 20);
    if (comm.rank() == 0) {
      Work w = comm.recv_async(in.data(), in.size(), DType::i32, 1);  // never sent
      comm.abort();
      Error e = expect_error("pending recv after abort", [&] { w.wait(); });
      TPF_CHILD_CHECK(e.code() == ErrorCode::aborted, "code: " + std::string(e.what()));
    } else {
      // The peer sees the abort instead of waiting for its deadline.
      Error e = expect_error("recv from an aborted rank", [&] {
        comm.recv(in.data(), in.size(), DType::i32, 0);
      });
      TPF_CHILD_CHECK(e.code() == ErrorCode::aborted, "peer: " + std::string(e.what()));
    }
  }, run_options()));
}

}  // namespace
}  // namespace tpf::testing
