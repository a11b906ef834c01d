// How a Communicator behaves beyond the arithmetic: split, threads, async work, determinism across
// ranks, and its failure modes (mismatched calls, deadlines, a dead peer, abort, bad arguments).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "support/async_waits.h"
#include "support/coll_reference.h"
#include "support/expect_error.h"
#include "support/multiproc.h"
#include "transport/shm_segment.h"
#include "tpf/comm.h"
#include "tpf/error.h"

namespace tpf::testing {
namespace {

using std::chrono::milliseconds;

RunOptions run_options(milliseconds comm_timeout = milliseconds(20000)) {
  RunOptions o;
  o.comm_options.timeout = comm_timeout;
  return o;
}

void expect_code(const std::string& what, const Error& e, ErrorCode code) {
  TPF_CHILD_CHECK(e.code() == code, what + ": expected Error(" + error_code_name(code) + "), got Error(" +
                                        error_code_name(e.code()) + "): " + e.what());
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

uint64_t fnv1a(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
  return h;
}

// ---------------------------------------------------------------------------------------------
// split

TEST(CommSplit, ColorAndKeyOrderRanksAndNegativeColorGivesInvalid) {
  expect_all_ok(run_ranks(4, [](Communicator& world) {
    const int r = world.rank();
    // Reverse order by key: in color 0 = {0, 2}, rank 2 (key -2) comes first.
    Communicator rev = world.split(r % 2, -r);
    TPF_CHILD_CHECK(rev.valid() && rev.size() == 2, "reverse split size");
    TPF_CHILD_CHECK(rev.rank() == (r < 2 ? 1 : 0), "reverse split: rank " + std::to_string(rev.rank()));
    // Equal keys: ordered by world rank.
    Communicator pairs = world.split(r / 2, 0);
    TPF_CHILD_CHECK(pairs.size() == 2 && pairs.rank() == r % 2, "equal-key split order");
    // Negative color: invalid on that rank; the others form a group of 3.
    Communicator some = world.split(r == 3 ? -1 : 0, r);
    if (r == 3) {
      TPF_CHILD_CHECK(!some.valid(), "negative color gave a valid communicator");
    } else {
      TPF_CHILD_CHECK(some.valid() && some.size() == 3 && some.rank() == r, "group of 3");
      int32_t v = r + 1, sum = 0;
      some.all_reduce(&v, &sum, 1, DType::i32, ReduceOp::sum);
      TPF_CHILD_CHECK(sum == 1 + 2 + 3, "group of 3 sum " + std::to_string(sum));
    }
    // Both halves run collectives at the same time, then the world still works.
    std::vector<float> data(100000, static_cast<float>(r)), out(data.size());
    rev.all_reduce(data.data(), out.data(), data.size(), DType::f32, ReduceOp::sum);
    const float want = r % 2 == 0 ? 0.0f + 2.0f : 1.0f + 3.0f;
    TPF_CHILD_CHECK(out.front() == want && out.back() == want, "subgroup all_reduce");
    int32_t one = 1, total = 0;
    world.all_reduce(&one, &total, 1, DType::i32, ReduceOp::sum);
    TPF_CHILD_CHECK(total == 4, "world after split");
  }, run_options()));
}

// A split's ranks keep their numbers in the job, through splits of splits, and its messages name
// both: rank 0 (job rank 2) of a reversed half waits for rank 1, job rank 0, which never calls.
TEST(CommSplit, JobRanksFollowTheSplitsDownAndMessagesNameThem) {
  SharedBlock shared;  // [0]: the waiting rank failed
  expect_all_ok(run_ranks(
      4,
      [&](Communicator& world) {
        const int r = world.rank();
        TPF_CHILD_CHECK(world.job_rank(r) == r, "the world is the job");
        Communicator rev = world.split(r % 2, -r);  // {2, 0} and {3, 1}
        for (int i = 0; i < 2; ++i) {
          const int want = (r % 2) + 2 * (1 - i);
          TPF_CHILD_CHECK(rev.job_rank(i) == want, "job rank of rev rank " + std::to_string(i) +
                                                       ": " + std::to_string(rev.job_rank(i)));
        }
        Communicator again = rev.split(0, -rev.rank());  // reversed back: {0, 2} and {1, 3}
        TPF_CHILD_CHECK(again.job_rank(again.rank()) == r && again.job_rank(0) == r % 2,
                        "job ranks through a split of a split");
        const Error e = expect_error("job_rank of no rank", [&] { (void)rev.job_rank(2); });
        TPF_CHILD_CHECK(e.code() == ErrorCode::invalid_argument, e.what());
        if (r == 2) {
          const Error late = expect_error("a barrier rank 0 never joins",
                                          [&] { rev.barrier({milliseconds(300)}); });
          shared.counter(0).store(1);
          TPF_CHILD_CHECK(late.code() == ErrorCode::timeout, late.what());
          TPF_CHILD_CHECK(std::string(late.what()).find("rank 1 (job rank 0) never arrived") !=
                              std::string::npos,
                          late.what());
        } else if (r == 0) {
          TPF_CHILD_CHECK(
              wait_until([&] { return shared.counter(0).load() == 1; }, std::chrono::seconds(60)),
              "rank 2 never failed");
        }
      },
      run_options()));
}

TEST(CommThreads, TwoCommunicatorsUsedConcurrentlyFromTwoThreads) {
  expect_all_ok(run_ranks(3, [](Communicator& world) {
    const int r = world.rank(), n = world.size();
    Communicator a = world.split(0, r), b = world.split(0, r);
    std::string failure_a, failure_b;
    auto worker = [n, r](Communicator& c, int base, std::string& failure) {
      try {
        for (int i = 0; i < 40; ++i) {
          std::vector<int64_t> v(1000 + static_cast<size_t>(i), base + i + r), out(v.size());
          c.all_reduce(v.data(), out.data(), v.size(), DType::i64, ReduceOp::sum);
          const int64_t want = int64_t{n} * (base + i) + n * (n - 1) / 2;
          if (out.front() != want || out.back() != want) {
            failure = "iteration " + std::to_string(i) + ": got " + std::to_string(out.front());
            return;
          }
        }
      } catch (const std::exception& e) {
        failure = e.what();
      }
    };
    std::thread ta(worker, std::ref(a), 100, std::ref(failure_a));
    std::thread tb(worker, std::ref(b), 5000, std::ref(failure_b));
    ta.join();
    tb.join();
    TPF_CHILD_CHECK(failure_a.empty(), "communicator a: " + failure_a);
    TPF_CHILD_CHECK(failure_b.empty(), "communicator b: " + failure_b);
  }, run_options()));
}

// One communicator used by its owner thread (inline, no lock), by a second thread and by queued
// async work, in phases every rank runs in the same order: sequence numbers and results must
// agree whichever path ran each operation.
TEST(CommThreads, OwnerOtherThreadAndAsyncWorkShareOneCommunicator) {
  expect_all_ok(run_ranks(2, [](Communicator& comm) {
    const int n = comm.size();
    int op = 0;
    auto check_sum = [&](Communicator& c, const char* who) {
      int64_t mine = op + c.rank(), sum = 0;
      c.all_reduce(&mine, &sum, 1, DType::i64, ReduceOp::sum);
      if (sum != int64_t{n} * op + n * (n - 1) / 2) {
        std::string what(who);
        what += ": op " + std::to_string(op) + " gave " + std::to_string(sum);
        throw ChildCheckFailure(what);
      }
      ++op;
    };
    for (int i = 0; i < 5; ++i) check_sum(comm, "owner");
    // Async work queued, then a blocking call that must run after it.
    std::vector<int64_t> in(8, 1), out(8);
    Work w = comm.all_reduce_async(in.data(), out.data(), in.size(), DType::i64, ReduceOp::sum);
    const uint64_t before = comm.next_sequence();
    check_sum(comm, "owner behind async");
    w.wait();
    TPF_CHILD_CHECK(out[0] == n && out[7] == n, "async result " + std::to_string(out[0]));
    const uint64_t after = comm.next_sequence();
    TPF_CHILD_CHECK(after == before + 1 || after == before + 2,
                    "sequence did not advance once per operation");
    // Another thread (not the owner) takes the locked path.
    std::string failure;
    std::thread other([&] {
      try {
        for (int i = 0; i < 5; ++i) check_sum(comm, "other thread");
      } catch (const std::exception& e) {
        failure = e.what();
      }
    });
    other.join();
    TPF_CHILD_CHECK(failure.empty(), failure);
    for (int i = 0; i < 5; ++i) check_sum(comm, "owner again");
  }, run_options()));
}

// ---------------------------------------------------------------------------------------------
// async work

TEST(CommAsync, OverlapTestWaitForAndInOrderCompletion) {
  expect_all_ok(run_ranks(2, [](Communicator& comm) {
    const int r = comm.rank();
    TPF_CHILD_CHECK(Work{}.test(), "a default Work is complete");
    Work{}.wait();
    // Overlap: start, compute something, wait.
    std::vector<float> big(1 << 20, static_cast<float>(r + 1)), out(big.size());
    Work w = comm.all_reduce_async(big.data(), out.data(), big.size(), DType::f32, ReduceOp::sum);
    double busy = 0;
    for (int i = 0; i < 100000; ++i) busy += i * 0.5;
    w.wait();
    TPF_CHILD_CHECK(out.front() == 3.0f && out.back() == 3.0f && busy > 0, "overlapped all_reduce");
    // test() polled until done, bounded.
    int32_t v = r, s = -1;
    Work t = comm.all_reduce_async(&v, &s, 1, DType::i32, ReduceOp::sum);
    TPF_CHILD_CHECK(wait_until([&] { return t.test(); }, milliseconds(10000)), "test() never became true");
    TPF_CHILD_CHECK(s == 1, "polled all_reduce result");
    // wait_for with a generous deadline.
    Work f = comm.barrier_async();
    TPF_CHILD_CHECK(f.wait_for(std::chrono::seconds(10)), "wait_for(10 s) on a barrier returned false");
    // Several outstanding: waiting for the last implies the earlier ones are complete.
    constexpr int kOps = 8;
    std::vector<std::vector<int32_t>> ins, outs;
    std::vector<Work> works;
    for (int i = 0; i < kOps; ++i) {
      ins.emplace_back(1000 * (i + 1), i * 10 + r);
      outs.emplace_back(ins.back().size(), -1);
    }
    for (int i = 0; i < kOps; ++i) {
      works.push_back(comm.all_reduce_async(ins[static_cast<size_t>(i)].data(), outs[static_cast<size_t>(i)].data(),
                                            ins[static_cast<size_t>(i)].size(), DType::i32, ReduceOp::sum));
    }
    works.back().wait();
    for (int i = 0; i < kOps; ++i) {
      TPF_CHILD_CHECK(works[static_cast<size_t>(i)].test(), "op " + std::to_string(i) + " not complete after the last one");
      const int32_t want = 2 * i * 10 + 1;
      TPF_CHILD_CHECK(outs[static_cast<size_t>(i)].front() == want && outs[static_cast<size_t>(i)].back() == want,
                      "op " + std::to_string(i) + " result " + std::to_string(outs[static_cast<size_t>(i)].front()));
    }
    // A blocking call after async ones sees them done.
    TPF_CHILD_CHECK(comm.next_sequence() >= static_cast<uint64_t>(kOps + 3), "next_sequence");
  }, run_options()));
}

// Deep queues: 20,000 all_reduces issued before any wait, waited for in issue order (before
// 2026-12-05 each wait scanned the rest of the queue: 100,000 took 56 s on 4 ranks, 2 s now).
TEST(CommAsync, TwentyThousandQueuedAllReducesEachHaveTheirSum) {
  expect_all_ok(run_ranks(
      3,
      [](Communicator& comm) {
        constexpr size_t kOps = 20000;
        std::vector<int64_t> values(kOps);
        std::vector<Work> works;
        works.reserve(kOps);
        for (size_t i = 0; i < kOps; ++i) {
          values[i] = static_cast<int64_t>(i) * 10 + comm.rank();
          works.push_back(
              comm.all_reduce_async(&values[i], &values[i], 1, DType::i64, ReduceOp::sum));
        }
        for (Work& work : works) work.wait();
        for (size_t i = 0; i < kOps; ++i) {
          const int64_t want = static_cast<int64_t>(i) * 30 + 3;  // ranks 0, 1 and 2 added
          TPF_CHILD_CHECK(values[i] == want,
                          "operation " + std::to_string(i) + " has " + std::to_string(values[i]));
        }
      },
      run_options()));
}

TEST(CommAsync, WaitForReturnsFalseWhileAPeerHasNotJoined) {
  SharedBlock shared;
  auto& go = shared.counter(0);
  expect_all_ok(run_ranks(2, [&](Communicator& comm) {
    int32_t v = comm.rank() + 1, s = 0;
    if (comm.rank() == 0) {
      Work w = comm.all_reduce_async(&v, &s, 1, DType::i32, ReduceOp::sum);
      const bool done = w.wait_for(milliseconds(100));
      go.store(1);  // now let rank 1 join
      TPF_CHILD_CHECK(!done, "wait_for returned true although rank 1 had not called all_reduce");
      w.wait();
    } else {
      TPF_CHILD_CHECK(wait_until([&] { return go.load() == 1; }, milliseconds(20000)), "rank 0 never signalled");
      comm.all_reduce(&v, &s, 1, DType::i32, ReduceOp::sum);
    }
    TPF_CHILD_CHECK(s == 3, "sum " + std::to_string(s));
  }, run_options()));
}

// Several threads of each rank wait on queued collectives while another makes a blocking call
// behind them: each waiter runs the queue up to its own operation (comm/operation_queue.h), so the
// collectives move from thread to thread, yet they run once each, in issue order, alike on every
// rank (a collective run out of order would meet its peers' other collective: a mismatch).
TEST(CommAsync, ThreadsWaitingOnQueuedCollectivesRunThemInIssueOrder) {
  expect_all_ok(run_ranks(3, [](Communicator& comm) {
    const int r = comm.rank();
    constexpr int kOps = 6;
    const size_t counts[kOps] = {1, 70001, 3, 1 << 16, 5, 300001};
    std::vector<std::vector<int32_t>> ins, outs;
    std::vector<Work> works;
    const uint64_t first = comm.next_sequence();
    for (int i = 0; i < kOps; ++i) {
      ins.emplace_back(counts[i], i * 10 + r);
      outs.emplace_back(counts[i], -1);
    }
    for (int i = 0; i < kOps; ++i) {
      auto& in = ins[static_cast<size_t>(i)];
      works.push_back(comm.all_reduce_async(in.data(), outs[static_cast<size_t>(i)].data(), in.size(), DType::i32, ReduceOp::sum));
    }
    WaitOnAnotherThread second(works[1]), fifth(works[4]);
    int32_t v = r, s = -1;
    comm.all_reduce(&v, &s, 1, DType::i32, ReduceOp::sum);  // behind all six
    TPF_CHILD_CHECK(s == 3, "blocking all_reduce behind the queue gave " + std::to_string(s));
    for (int i = 0; i < kOps; ++i)
      TPF_CHILD_CHECK(works[static_cast<size_t>(i)].test(), "op " + std::to_string(i) + " not done before the blocking call behind it returned");
    second.join();
    fifth.join();
    for (int i = 0; i < kOps; ++i) {
      const int32_t want = 3 * i * 10 + 3;
      const auto& out = outs[static_cast<size_t>(i)];
      TPF_CHILD_CHECK(std::all_of(out.begin(), out.end(), [&](int32_t x) { return x == want; }),
                      "op " + std::to_string(i) + " result " + std::to_string(out.front()) + ", want " + std::to_string(want));
    }
    TPF_CHILD_CHECK(comm.next_sequence() == first + kOps + 1, "sequence " + std::to_string(comm.next_sequence()) + " after " + std::to_string(first));
  }, run_options()));
}

// ---------------------------------------------------------------------------------------------
// determinism

TEST(CommDeterminism, AllRanksHoldBitIdenticalResults) {
  expect_all_ok(run_ranks(4, [](Communicator& comm) {
    const int n = comm.size();
    const struct { DType dt; ReduceOp op; size_t count; } cases[] = {
        {DType::f32, ReduceOp::sum, 300001}, {DType::bf16, ReduceOp::avg, 200003},
        {DType::f64, ReduceOp::sum, 70001},  {DType::f16, ReduceOp::sum, 99991}};
    uint64_t salt = 42;
    for (const auto& c : cases) {
      auto in = make_input(c.dt, c.op, c.count, comm.rank(), ++salt);
      std::vector<uint8_t> out(in.size());
      comm.all_reduce(in.data(), out.data(), c.count, c.dt, c.op);
      int64_t mine = static_cast<int64_t>(fnv1a(out.data(), out.size()));
      std::vector<int64_t> all(static_cast<size_t>(n));
      comm.all_gather(&mine, all.data(), 1, DType::i64);
      for (int r = 0; r < n; ++r) {
        TPF_CHILD_CHECK(all[static_cast<size_t>(r)] == mine,
                        std::string(dtype_name(c.dt)) + " result on rank " + std::to_string(r) +
                            " differs from this rank's");
      }
    }
  }, run_options()));
}

// ---------------------------------------------------------------------------------------------
// failure modes

TEST(CommErrors, MismatchedCountIsReportedOnBothRanks) {
  expect_all_ok(run_ranks(2, [](Communicator& comm) {
    std::vector<float> a(11, 1.0f), b(11);
    const size_t count = comm.rank() == 0 ? 10 : 11;
    CallOptions call{milliseconds(10000)};
    auto e = expect_error("all_reduce count 10 vs 11", [&] {
      comm.all_reduce(a.data(), b.data(), count, DType::f32, ReduceOp::sum, call);
    });
    expect_code("count mismatch", e, ErrorCode::mismatch);
    const std::string m = e.what();
    TPF_CHILD_CHECK(contains(m, "10") && contains(m, "11") && contains(m, "all_reduce"),
                    "message does not show both calls: " + m);
  }, run_options()));
}

TEST(CommErrors, MismatchedCollectivesAreReportedOnBothRanks) {
  expect_all_ok(run_ranks(2, [](Communicator& comm) {
    std::vector<float> a(16, 1.0f), b(32);
    CallOptions call{milliseconds(10000)};
    auto e = expect_error("all_reduce vs all_gather", [&] {
      if (comm.rank() == 0) {
        comm.all_reduce(a.data(), b.data(), 16, DType::f32, ReduceOp::sum, call);
      } else {
        comm.all_gather(a.data(), b.data(), 16, DType::f32, call);
      }
    });
    expect_code("op mismatch", e, ErrorCode::mismatch);
    const std::string m = e.what();
    TPF_CHILD_CHECK(contains(m, "all_reduce") && contains(m, "all_gather"),
                    "message does not show both calls: " + m);
  }, run_options()));
}

TEST(CommErrors, DeadlineExpiryNamesOpSequenceAndMissingRank) {
  SharedBlock shared;
  auto& done = shared.counter(0);
  expect_all_ok(run_ranks(2, [&](Communicator& comm) {
    for (int i = 0; i < 5; ++i) comm.barrier();  // a sequence number that is not 0
    if (comm.rank() == 1) {  // skips the call, waits for rank 0 to time out, then leaves
      TPF_CHILD_CHECK(wait_until([&] { return done.load() == 1; }, milliseconds(20000)), "rank 0 never finished");
      return;
    }
    const uint64_t seq = comm.next_sequence();
    std::vector<float> a(1000, 1.0f), b(1000);
    const auto start = Clock::now();
    auto e = expect_error("all_reduce with rank 1 absent", [&] {
      comm.all_reduce(a.data(), b.data(), a.size(), DType::f32, ReduceOp::sum, CallOptions{milliseconds(200)});
    });
    const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
    done.store(1);
    expect_code("deadline", e, ErrorCode::timeout);
    const std::string m = e.what();
    // Not before the call's deadline; and the call's, not the communicator's 20 s (a bound on
    // which deadline fired, far from any scheduling delay: CI may run on a loaded machine).
    TPF_CHILD_CHECK(took >= milliseconds(190) && took < milliseconds(15000),
                    "timed out after " + std::to_string(took.count()) + " ms, expected ~200 ms");
    TPF_CHILD_CHECK(contains(m, "all_reduce"), "message does not name the op: " + m);
    TPF_CHILD_CHECK(contains(m, std::to_string(seq)), "message does not name sequence " + std::to_string(seq) + ": " + m);
    TPF_CHILD_CHECK(std::regex_search(m, std::regex("rank[^0-9]{0,24}1")),
                    "message does not name rank 1 as missing: " + m);
  }, run_options()));
}

TEST(CommErrors, KilledPeerIsReportedQuicklyAndShmIsCleanedUp) {
  // Only this job's segments are checked: tests running in parallel create and remove their own.
  RunOptions options = run_options(milliseconds(30000));
  options.job_name = "killedpeer" + std::to_string(::getpid());
  const std::string job_prefix = transport::shm_job_prefix(options.job_name).substr(1);  // no '/' 
  auto outcomes = run_ranks(4, [](Communicator& comm) {
    comm.barrier();
    std::vector<float> a(4 << 20, 1.0f), b(a.size());
    if (comm.rank() == 2) ::raise(SIGKILL);
    auto e = expect_error("all_reduce with rank 2 killed", [&] {
      comm.all_reduce(a.data(), b.data(), a.size(), DType::f32, ReduceOp::sum);
    });
    // Error(peer_died), not Error(timeout): the death was seen, not the 30 s deadline (no
    // wall-clock bound, which a loaded CI machine could break).
    expect_code("killed peer", e, ErrorCode::peer_died);
    const std::string m = e.what();
    TPF_CHILD_CHECK(std::regex_search(m, std::regex("rank[^0-9]{0,24}2")), "message does not name rank 2: " + m);
  }, options);
  ASSERT_EQ(outcomes.size(), 4u);
  EXPECT_EQ(outcomes[2].signal, SIGKILL) << outcomes[2].describe();
  for (int r : {0, 1, 3}) EXPECT_TRUE(outcomes[static_cast<size_t>(r)].ok()) << outcomes[static_cast<size_t>(r)].describe();
  const auto left = list_dev_shm(job_prefix);
  std::string names;
  for (const auto& s : left) names += s + " ";
  EXPECT_TRUE(left.empty()) << "left in /dev/shm: " << names;
}

// Regression: a rank that failed (here: timed out), recorded why, and exited used to be reported
// by the peers as "died", hiding the real cause.
TEST(CommErrors, APeerThatFailedAndExitedIsReportedByItsReasonNotAsDead) {
  SharedBlock shared;
  auto& rank0_pid = shared.counter(0);
  expect_all_ok(run_ranks(2, [&](Communicator& comm) {
    std::vector<float> a(16, 1.0f), b(16);
    if (comm.rank() == 0) {
      rank0_pid.store(::getpid());
      auto e = expect_error("all_reduce without rank 1", [&] {
        comm.all_reduce(a.data(), b.data(), a.size(), DType::f32, ReduceOp::sum,
                        CallOptions{milliseconds(100)});
      });
      expect_code("rank 0 alone", e, ErrorCode::timeout);
      return;  // exits; its failure stays recorded in its segment
    }
    // Rank 1 starts once rank 0 has failed and its process is gone (reaped by the harness).
    TPF_CHILD_CHECK(wait_until([&] {
                      const int64_t pid = rank0_pid.load();
                      return pid != 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
                    }, milliseconds(20000)),
                    "rank 0 did not exit");
    // The first call completes with what rank 0 staged before timing out; the second needs a step
    // rank 0 never posted.
    comm.all_reduce(a.data(), b.data(), a.size(), DType::f32, ReduceOp::sum);
    auto e = expect_error("all_reduce after rank 0 failed and exited", [&] {
      comm.all_reduce(a.data(), b.data(), a.size(), DType::f32, ReduceOp::sum,
                      CallOptions{milliseconds(10000)});
    });
    expect_code("peer that failed and exited", e, ErrorCode::timeout);
    TPF_CHILD_CHECK(contains(e.what(), "rank 0 failed earlier"), e.what());
    TPF_CHILD_CHECK(!contains(e.what(), "died"), e.what());
  }, run_options()));
}

TEST(CommErrors, AbortFailsTheBlockedCallTheLaterOnesAndThePeer) {
  SharedBlock shared;
  auto& aborted = shared.counter(0);
  expect_all_ok(run_ranks(2, [&](Communicator& comm) {
    if (comm.rank() == 1) {
      // Joins only after rank 0 has aborted: its next operation must fail, not hang.
      TPF_CHILD_CHECK(wait_until([&] { return aborted.load() == 1; }, milliseconds(20000)), "rank 0 never aborted");
      auto e = expect_error("barrier after the peer aborted", [&] { comm.barrier(CallOptions{milliseconds(10000)}); });
      TPF_CHILD_CHECK(e.code() == ErrorCode::aborted || e.code() == ErrorCode::peer_died,
                      std::string("peer of an aborted rank got Error(") + error_code_name(e.code()) + "): " + e.what());
      return;
    }
    const uint64_t seq = comm.next_sequence();
    std::string blocked_error;
    std::thread a([&] {
      std::vector<float> x(1000, 1.0f), y(1000);
      try {
        comm.all_reduce(x.data(), y.data(), x.size(), DType::f32, ReduceOp::sum);
        blocked_error = "returned normally";
      } catch (const Error& e) {
        blocked_error = e.code() == ErrorCode::aborted ? "" : std::string("Error(") + error_code_name(e.code()) + "): " + e.what();
      }
    });
    // Abort once thread A's operation has been issued.
    const bool issued = wait_until([&] { return comm.next_sequence() > seq; }, milliseconds(10000));
    comm.abort();
    a.join();
    aborted.store(1);
    TPF_CHILD_CHECK(issued, "thread A's all_reduce never showed up in next_sequence()");
    TPF_CHILD_CHECK(blocked_error.empty(), "blocked all_reduce after abort(): " + blocked_error);
    // Error(aborted) comes from the check before the call waits for anyone (a wait would end in
    // Error(timeout) or peer_died instead).
    auto e = expect_error("all_reduce after abort", [&] {
      int32_t v = 1, s = 0;
      comm.all_reduce(&v, &s, 1, DType::i32, ReduceOp::sum);
    });
    expect_code("call after abort", e, ErrorCode::aborted);
  }, run_options()));
}

TEST(CommErrors, BadArgumentsAreInvalidArgumentWithoutCrashing) {
  expect_all_ok(run_ranks(2, [](Communicator& comm) {
    const int n = comm.size(), me = comm.rank();
    std::vector<float> buf(64, 1.0f), out(64 * 2);
    const auto bad = [&](const std::string& what, auto&& f) {
      auto e = expect_error(what, f);
      expect_code(what, e, ErrorCode::invalid_argument);
    };
    const size_t huge = std::numeric_limits<size_t>::max() / 2;  // count * 4 overflows
    const size_t negative = static_cast<size_t>(-1);
    const auto bad_dtype = static_cast<DType>(99);
    const auto bad_op = static_cast<ReduceOp>(77);
    bad("all_reduce null send", [&] { comm.all_reduce(nullptr, out.data(), 10, DType::f32, ReduceOp::sum); });
    bad("all_reduce null recv", [&] { comm.all_reduce(buf.data(), nullptr, 10, DType::f32, ReduceOp::sum); });
    bad("all_reduce count*size overflows", [&] { comm.all_reduce(buf.data(), out.data(), huge, DType::f32, ReduceOp::sum); });
    bad("all_reduce count SIZE_MAX", [&] { comm.all_reduce(buf.data(), out.data(), negative, DType::u8, ReduceOp::sum); });
    bad("all_reduce dtype 99", [&] { comm.all_reduce(buf.data(), out.data(), 4, bad_dtype, ReduceOp::sum); });
    bad("all_reduce op 77", [&] { comm.all_reduce(buf.data(), out.data(), 4, DType::f32, bad_op); });
    bad("all_reduce_async null send", [&] { comm.all_reduce_async(nullptr, out.data(), 10, DType::f32, ReduceOp::sum).wait(); });
    bad("all_gather count overflow", [&] { comm.all_gather(buf.data(), out.data(), huge, DType::f32); });
    bad("reduce_scatter op 77", [&] { comm.reduce_scatter(buf.data(), out.data(), 4, DType::f32, bad_op); });
    bad("all_to_all null recv", [&] { comm.all_to_all(buf.data(), nullptr, 4, DType::f32); });
    for (int root : {-1, n}) {
      const std::string r = " root " + std::to_string(root);
      bad("reduce" + r, [&] { comm.reduce(buf.data(), out.data(), 4, DType::f32, ReduceOp::sum, root); });
      bad("broadcast" + r, [&] { comm.broadcast(buf.data(), out.data(), 4, DType::f32, root); });
      bad("gather" + r, [&] { comm.gather(buf.data(), out.data(), 4, DType::f32, root); });
      bad("scatter" + r, [&] { comm.scatter(buf.data(), out.data(), 4, DType::f32, root); });
    }
    for (int peer : {-1, n, me}) {
      const std::string p = " peer " + std::to_string(peer);
      bad("send" + p, [&] { comm.send(buf.data(), 4, DType::f32, peer); });
      bad("recv" + p, [&] { comm.recv(out.data(), 4, DType::f32, peer); });
    }
    bad("send null buffer", [&] { comm.send(nullptr, 4, DType::f32, 1 - me); });
    bad("send dtype 99", [&] { comm.send(buf.data(), 4, bad_dtype, 1 - me); });
    // Count 0 with null buffers is valid, and none of the above left the ranks out of step.
    comm.all_reduce(nullptr, nullptr, 0, DType::f32, ReduceOp::sum);
    comm.all_gather(nullptr, nullptr, 0, DType::f32);
    comm.broadcast(nullptr, nullptr, 0, DType::i8, 0);
    comm.reduce_scatter(nullptr, nullptr, 0, DType::bf16, ReduceOp::max);
    int32_t v = me + 1, s = 0;
    comm.all_reduce(&v, &s, 1, DType::i32, ReduceOp::sum);
    TPF_CHILD_CHECK(s == 3, "all_reduce after the bad calls gave " + std::to_string(s));
  }, run_options()));
}

}  // namespace
}  // namespace tpf::testing
