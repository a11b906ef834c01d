// Random programs of collectives on the world and on sub-communicators mixed with point-to-point
// exchanges (pairs, rings, large messages), with one fault injected per trial: a rank crashes,
// calls a mismatched operation, stalls, aborts, or stops (SIGSTOP, found lost on one host).
// Every result before the fault is checked
// exactly; after it, every surviving rank must stop with an error of the fault's kind (the root
// cause, wherever it is seen), and nobody hangs. Bounded: a fixed set of seeded trials. And crash
// trials whose survivors go on: they shrink the world and run a program on what is left.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/multiproc.h"
#include "support/on_hosts.h"
#include "support/scoped_env.h"
#include "tpf/comm.h"
#include "tpf/error.h"

namespace tpf::testing {
namespace {

using std::chrono::milliseconds;

enum class Fault { none, crash, mismatch, stall, abort, stop };

const char* fault_name(Fault f) {
  switch (f) {
    case Fault::none: return "none";
    case Fault::crash: return "crash";
    case Fault::mismatch: return "mismatch";
    case Fault::stall: return "stall";
    case Fault::abort: return "abort";
    case Fault::stop: return "stop";
  }
  return "?";
}

// The error every survivor must report for a fault.
ErrorCode expected_code(Fault f) {
  switch (f) {
    case Fault::crash: return ErrorCode::peer_died;
    case Fault::mismatch: return ErrorCode::mismatch;
    case Fault::stall: return ErrorCode::timeout;
    case Fault::abort: return ErrorCode::aborted;
    case Fault::stop: return ErrorCode::timeout;  // found lost (TPF_HOST_LOST_S)
    case Fault::none: break;
  }
  return ErrorCode::internal;
}

struct Trial {
  uint64_t seed;
  int ranks;
  Fault fault;
  bool across_hosts = false;
};

constexpr int kSteps = 40;
constexpr int kCrashExit = 3;

// One step of the program, the same on every rank (drawn from the trial's seed).
struct Step {
  int kind;        // 0..5, see run_step
  size_t count;    // elements
  int a = 0, b = 0;  // the pair of a point-to-point exchange
};

Step draw_step(std::mt19937_64& rng, int n) {
  Step s;
  s.kind = static_cast<int>(rng() % 6);
  // Mostly small, sometimes beyond the eager path, the slot and the two-chunk mailbox.
  const size_t sizes[] = {1, 7, 300, 5000, 70000, 200000};
  s.count = sizes[rng() % 6] + rng() % 5;
  s.a = static_cast<int>(rng() % n);
  s.b = (s.a + 1 + static_cast<int>(rng() % (n - 1))) % n;
  return s;
}

// Small integers: sums of them are exact in f32 at any order.
int32_t value(int step, int rank, size_t i) {
  return static_cast<int32_t>((i * 31 + static_cast<size_t>(rank) * 7 + step * 13) % 97);
}

std::vector<int32_t> values(int step, int rank, size_t count) {
  std::vector<int32_t> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = value(step, rank, i);
  return v;
}

struct Comms {
  Communicator* world;
  Communicator* half;  // ranks [0, n/2) and [n/2, n)
  Communicator* pair;  // {0, 1}, {2, 3}, ... (the last alone when n is odd)
};

void expect_equal(const std::vector<int32_t>& got, const std::vector<int32_t>& want,
                  const std::string& what) {
  TPF_CHILD_CHECK(got.size() == want.size(), what + ": size");
  for (size_t i = 0; i < got.size(); ++i) {
    TPF_CHILD_CHECK(got[i] == want[i], what + ": element " + std::to_string(i) + " is " +
                                           std::to_string(got[i]) + ", expected " +
                                           std::to_string(want[i]));
  }
}

// The world rank of `comm`'s rank r, for comms made by the splits above.
int half_base(int n, int me) { return me < n / 2 ? 0 : n / 2; }

// Runs one step; `skew` (the mismatch fault) changes this rank's count.
void run_step(const Comms& c, const Step& s, int step, size_t skew) {
  const int n = c.world->size(), me = c.world->rank();
  const std::string what = "step " + std::to_string(step) + " kind " + std::to_string(s.kind);
  const size_t count = s.count + skew;
  switch (s.kind) {
    case 0: {  // world all_reduce
      std::vector<int32_t> in = values(step, me, count), out(count), want(s.count, 0);
      c.world->all_reduce(in.data(), out.data(), count, DType::i32, ReduceOp::sum);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < s.count; ++i) want[i] += value(step, r, i);
      out.resize(s.count);
      return expect_equal(out, want, what + " all_reduce");
    }
    case 1: {  // all_gather on the halves
      const int size = c.half->size(), base = half_base(n, me);
      std::vector<int32_t> in = values(step, me, count), out(count * size), want;
      c.half->all_gather(in.data(), out.data(), count, DType::i32);
      for (int r = 0; r < size; ++r) {
        std::vector<int32_t> v = values(step, base + r, s.count);
        want.insert(want.end(), v.begin(), v.end());
      }
      return expect_equal(out, want, what + " all_gather");
    }
    case 2: {  // a pair exchanges messages both ways at once
      if (me != s.a && me != s.b) return;
      const int peer = me == s.a ? s.b : s.a;
      std::vector<int32_t> out = values(step, me, count), in(s.count);
      Work recv = c.world->recv_async(in.data(), s.count, DType::i32, peer);
      Work send = c.world->send_async(out.data(), count, DType::i32, peer);
      send.wait();
      recv.wait();
      return expect_equal(in, values(step, peer, s.count), what + " exchange");
    }
    case 3: {  // broadcast in the pairs, rooted at the pair's higher rank
      const int root = c.pair->size() - 1, root_world = me - c.pair->rank() + root;
      std::vector<int32_t> buf = me == root_world ? values(step, me, count) : std::vector<int32_t>(count);
      c.pair->broadcast(buf.data(), buf.data(), count, DType::i32, root);
      buf.resize(s.count);
      return expect_equal(buf, values(step, root_world, s.count), what + " broadcast");
    }
    case 4: {  // a ring of sends in the halves, blocking receive after an asynchronous send
      const int size = c.half->size(), r = c.half->rank(), base = half_base(n, me);
      if (size == 1) return;
      const int next = (r + 1) % size, prev = (r + size - 1) % size;
      std::vector<int32_t> out = values(step, me, count), in(s.count);
      Work send = c.half->send_async(out.data(), count, DType::i32, next);
      c.half->recv(in.data(), s.count, DType::i32, prev);
      send.wait();
      return expect_equal(in, values(step, base + prev, s.count), what + " ring");
    }
    case 5: {  // world reduce_scatter
      std::vector<int32_t> in(count * n), out(count), want(s.count, 0);
      for (int block = 0; block < n; ++block) {
        std::vector<int32_t> v = values(step + block, me, count);
        std::copy(v.begin(), v.end(), in.begin() + static_cast<ptrdiff_t>(block * count));
      }
      c.world->reduce_scatter(in.data(), out.data(), count, DType::i32, ReduceOp::sum);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < s.count; ++i) want[i] += value(step + me, r, i);
      out.resize(s.count);
      return expect_equal(out, want, what + " reduce_scatter");
    }
  }
}

// Does `me` exchange data with another rank in step s? (The culprit of a fault must, so that its
// fault shows there: a communicator of one rank has nobody to disagree with.)
bool takes_part(const Step& s, int me, int n) {
  const int half_size = me < n / 2 ? n / 2 : n - n / 2;
  const bool alone_in_pair = n % 2 == 1 && me == n - 1;
  switch (s.kind) {
    case 1:
    case 4: return half_size > 1;
    case 2: return me == s.a || me == s.b;
    case 3: return !alone_in_pair;
    default: return true;
  }
}

// Shared between the ranks of one trial (memory of the test, not of the communicator).
enum Slot : size_t { kReported = 0, kPid = 1 };  // kPid + rank: each rank's pid

// A trial's program on `n` ranks, the same on every rank (drawn from its seed), and its fault: a
// step past the start, and a culprit that takes part in it.
struct Program {
  std::vector<Step> steps;
  int fault_step = 0;
  int culprit = 0;
};

Program draw_program(uint64_t seed, int n) {
  Program p;
  std::mt19937_64 rng(seed);
  for (int i = 0; i < kSteps; ++i) p.steps.push_back(draw_step(rng, n));
  p.fault_step = 5 + static_cast<int>(rng() % (kSteps - 10));
  p.culprit = static_cast<int>(rng() % n);
  // The next rank that takes part, or on the next step, where none does (on 2 ranks nobody takes
  // part in a step of the halves: they are of one rank). Until 2026-12-07 this looped for ever
  // there, which a survivors' program on 2 ranks met.
  for (int tried = 1; !takes_part(p.steps[p.fault_step], p.culprit, n); ++tried) {
    if (tried % n == 0) p.fault_step = 5 + (p.fault_step - 4) % (kSteps - 10);
    p.culprit = (p.culprit + 1) % n;
    if (tried > n * kSteps) throw std::logic_error("no step of the program has a rank in it");
  }
  return p;
}

// The world's halves and pairs (Comms); once made, every rank's pid is in `shared`.
struct SubCommunicators {
  SubCommunicators(SharedBlock& shared, Communicator& world)
      : half(world.split(world.rank() < world.size() / 2 ? 0 : 1, world.rank())),
        pair(world.split(world.rank() / 2, world.rank())) {
    shared.counter(kPid + world.rank()).store(::getpid());
    world.barrier();  // every pid is written
  }
  Communicator half;
  Communicator pair;
};

void rank_body(const Trial& t, SharedBlock& shared, Communicator& world) {
  const int n = world.size(), me = world.rank();
  SubCommunicators sub(shared, world);
  Communicator& half = sub.half;
  Communicator& pair = sub.pair;
  const Comms comms{&world, &half, &pair};
  const Program program = draw_program(t.seed, n);
  const std::vector<Step>& steps = program.steps;
  const int fault_step = program.fault_step, culprit = program.culprit;
  const bool faulty = t.fault != Fault::none && me == culprit;

  int step = 0;
  try {
    for (; step < kSteps; ++step) {
      if (faulty && step == fault_step) {
        switch (t.fault) {
          case Fault::crash: ::_exit(kCrashExit);
          case Fault::stall: {  // away until every other rank has reported its error
            TPF_CHILD_CHECK(wait_until([&] { return shared.counter(kReported).load() == n - 1; },
                                       milliseconds(100000)),
                            "the stalled rank waited in vain for the others' errors");
            return;
          }
          case Fault::abort: {
            Communicator* used[] = {&world, &half, &world, &pair, &half, &world};
            used[steps[step].kind]->abort();
            return;
          }
          case Fault::mismatch: run_step(comms, steps[step], step, 1); continue;
          case Fault::stop: ::raise(SIGSTOP); return;  // ended by the last rank to report
          case Fault::none: break;
        }
      }
      run_step(comms, steps[step], step, 0);
    }
    world.barrier();  // everyone learns of a fault that their own steps did not touch
  } catch (const Error& e) {
    const bool last_to_report = shared.counter(kReported).fetch_add(1) + 1 == n - 1;
    if (t.fault == Fault::stop && last_to_report)
      ::kill(static_cast<pid_t>(shared.counter(kPid + culprit).load()), SIGKILL);
    const std::string m = e.what();
    const std::string where = "rank " + std::to_string(me) + " at step " + std::to_string(step) +
                              " (fault " + fault_name(t.fault) + " by rank " +
                              std::to_string(culprit) + " at step " + std::to_string(fault_step) +
                              "): ";
    TPF_CHILD_CHECK(t.fault != Fault::none, where + "error without a fault: " + m);
    // Across hosts a rank may fail a step before the fault's: the failure's notice can overtake
    // a message the culprit sent before it (on another connection), and the communicator's
    // failure ends every pending call.
    TPF_CHILD_CHECK(step >= fault_step || t.across_hosts, where + "failed before the fault: " + m);
    TPF_CHILD_CHECK(e.code() == expected_code(t.fault),
                    where + "expected Error(" + error_code_name(expected_code(t.fault)) + "), got " +
                        error_code_name(e.code()) + ": " + m);
    if (t.fault == Fault::crash) {
      // By its pid, which its host's ranks see die ("rank 2 (pid 42) died"); a rank alone on its
      // host is named so where its connection failed ("lost rank 2 (pid 42 on host 'b'; ...").
      const std::string pid = "(pid " + std::to_string(shared.counter(kPid + culprit).load());
      const bool named = m.find(pid + ")") != std::string::npos ||
                         (t.across_hosts && m.find(pid + " on host '") != std::string::npos);
      TPF_CHILD_CHECK(named, where + "does not name the dead " + pid + "): " + m);
    }
    if (t.fault == Fault::stop) {  // found lost by a rank waiting on it, not at the deadline
      const std::string lost = "(pid " + std::to_string(shared.counter(kPid + culprit).load()) +
                               ") has been stopped for ";
      TPF_CHILD_CHECK(m.find(lost) != std::string::npos, where + "does not name it " + lost + m);
    }
    return;
  }
  TPF_CHILD_CHECK(t.fault == Fault::none || faulty,
                  "rank " + std::to_string(me) + " finished every step despite fault " +
                      fault_name(t.fault) + " by rank " + std::to_string(culprit) + " at step " +
                      std::to_string(fault_step));
}

// The crash trials again, and then the survivors go on: at their first error each aborts the
// communicators it holds (so that a peer blocked with it in another one, the half or the pair,
// fails at once instead of at its deadline: ULFM's revoke), shrinks the world, makes the half and
// the pair again from the shrunk one, and runs the whole program on them, every result checked.
void rank_body_that_goes_on(const Trial& t, SharedBlock& shared, Communicator& world) {
  const int n = world.size(), me = world.rank();
  SubCommunicators sub(shared, world);
  const Program program = draw_program(t.seed, n);
  const int fault_step = program.fault_step, culprit = program.culprit;

  int step = 0;
  try {
    const Comms comms{&world, &sub.half, &sub.pair};
    for (; step < kSteps; ++step) {
      if (me == culprit && step == fault_step) ::_exit(kCrashExit);
      run_step(comms, program.steps[step], step, 0);
    }
    world.barrier();
    TPF_CHILD_CHECK(false, "rank " + std::to_string(me) + " finished despite the crash");
  } catch (const Error& e) {
    const std::string where = "rank " + std::to_string(me) + " at step " + std::to_string(step) +
                              " (rank " + std::to_string(culprit) + " crashed at step " +
                              std::to_string(fault_step) + "): ";
    TPF_CHILD_CHECK(step >= fault_step, where + "failed before the crash: " + e.what());
    TPF_CHILD_CHECK(e.code() == ErrorCode::peer_died || e.code() == ErrorCode::aborted,
                    where + error_code_name(e.code()) + ": " + e.what());
  }
  for (Communicator* held : {&sub.pair, &sub.half, &world}) held->abort();
  Communicator live = world.shrink();
  TPF_CHILD_CHECK(live.size() == n - 1 && live.job_rank(live.rank()) == me,
                  "rank " + std::to_string(live.rank()) + " of " + std::to_string(live.size()));
  const int m = live.size(), r = live.rank();
  Communicator live_half = live.split(r < m / 2 ? 0 : 1, r);
  Communicator live_pair = live.split(r / 2, r);
  const Comms comms{&live, &live_half, &live_pair};
  const Program again = draw_program(t.seed + 1, m);
  for (int i = 0; i < kSteps; ++i) run_step(comms, again.steps[i], i, 0);
  live.barrier();
}

// gtest: one rank crashed (exit kCrashExit), every other one succeeded.
void expect_one_crash_and_the_rest_ok(const std::vector<RankOutcome>& outcomes) {
  int crashes = 0;
  for (const RankOutcome& o : outcomes) {
    const bool crashed = o.exited && o.exit_code == kCrashExit;
    crashes += crashed;
    EXPECT_TRUE(o.ok() || crashed) << o.describe();
  }
  EXPECT_EQ(crashes, 1) << "the crash did not happen exactly once";
}

std::vector<Trial> trials() {
  const Fault kinds[] = {Fault::none, Fault::crash, Fault::mismatch, Fault::abort, Fault::stall};
  std::vector<Trial> out;
#if defined(__SANITIZE_ADDRESS__)
  const int count = 5;  // each kind once
#else
  const int count = 15;
#endif
  for (int i = 0; i < count; ++i) {
    out.push_back(Trial{0x5eed0000u + static_cast<uint64_t>(i), 3 + i % 3, kinds[i % 5]});
  }
  // A stopped rank, found lost by those waiting on it (seeds of their own: the trials above
  // stay as they were).
  for (int i = 0; i < (count + 4) / 5; ++i)
    out.push_back(Trial{0x5eed0100u + static_cast<uint64_t>(i), 3 + i % 3, Fault::stop});
  return out;
}

// Every program's fault falls on a step its culprit takes part in, on any number of ranks: on 2
// (a survivors' program after a crash of 3) nobody takes part in a step of the halves, where the
// choice once looped for ever (seed 0x50a30005, say).
TEST(RandomFaults, EveryProgramsFaultFallsOnAStepItsCulpritTakesPartIn) {
  for (int n = 2; n <= 6; ++n) {
    for (uint64_t seed = 0x50a30000u; seed < 0x50a30000u + 200; ++seed) {
      const Program p = draw_program(seed, n);
      ASSERT_TRUE(takes_part(p.steps[p.fault_step], p.culprit, n)) << seed << ", " << n;
      ASSERT_GE(p.fault_step, 5);
      ASSERT_LT(p.fault_step, kSteps - 5);
    }
  }
}

TEST(RandomFaults, CollectivesAndPointToPointOnSubCommunicatorsStopWithTheFaultsCause) {
  for (const Trial& t : trials()) {
    SCOPED_TRACE("seed " + std::to_string(t.seed) + ", " + std::to_string(t.ranks) +
                 " ranks, fault " + fault_name(t.fault));
    SharedBlock shared;
    RunOptions options;
    options.deadline = milliseconds(100000);
    // The stall is found by the deadline; everything else by a signal from the peer, or (stop)
    // by a rank waiting on the stopped one.
    options.comm_options.timeout = milliseconds(t.fault == Fault::stall ? 4000 : 60000);
    const ScopedEnv lost_after("TPF_HOST_LOST_S", "1");
    const auto outcomes = run_ranks(t.ranks, [&](Communicator& world) { rank_body(t, shared, world); }, options);
    for (const RankOutcome& o : outcomes) {
      const bool crashed = t.fault == Fault::crash && o.exited && o.exit_code == kCrashExit;
      const bool ended = t.fault == Fault::stop && o.signal == SIGKILL;  // stopped, then killed
      EXPECT_TRUE(o.ok() || crashed || ended) << o.describe();
    }
    if (t.fault == Fault::stop) {
      int ended = 0;
      for (const RankOutcome& o : outcomes) ended += o.signal == SIGKILL;
      EXPECT_EQ(ended, 1) << "the stopped rank was not the one ended";
    }
    if (t.fault == Fault::crash) {
      int crashes = 0;
      for (const RankOutcome& o : outcomes) crashes += o.exited && o.exit_code == kCrashExit;
      EXPECT_EQ(crashes, 1) << "the crash fault did not happen exactly once";
    }
  }
}

// The same across forced hosts (shared memory inside a host, UCX between): a crash, a mismatch or
// an abort; every survivor fails with its code (a crash named), nobody hangs, and every result
// before the failure is exact.
TEST(RandomFaults, AcrossHostsCollectivesAndPointToPointStopWithTheFaultsCause) {
  const std::vector<HostKeys> layouts = {{"host-a", "host-a", "host-b", "host-b"},
                                         {"host-a", "host-b", "host-b", "host-c", "host-c"},
                                         {"host-a", "host-b", "host-c"},
                                         {"host-a", "host-a", "host-a", "host-b"}};
  const Fault kinds[] = {Fault::crash, Fault::mismatch, Fault::abort};
  for (int i = 0; i < 9; ++i) {
    const HostKeys& keys = layouts[i % layouts.size()];
    const Trial t{0x5eed3000u + static_cast<uint64_t>(i), static_cast<int>(keys.size()),
                  kinds[i % 3], /*across_hosts=*/true};
    SCOPED_TRACE("seed " + std::to_string(t.seed) + ", " + std::to_string(t.ranks) +
                 " ranks, fault " + fault_name(t.fault));
    SharedBlock shared;
    const auto outcomes =
        run_on_hosts(keys, [&](Communicator& world) { rank_body(t, shared, world); });
    for (const RankOutcome& o : outcomes) {
      const bool crashed = t.fault == Fault::crash && o.exited && o.exit_code == kCrashExit;
      EXPECT_TRUE(o.ok() || crashed) << o.describe();
    }
  }
}

TEST(RandomFaults, SurvivorsOfACrashShrinkTheWorldAndRunTheProgramOnIt) {
#if defined(__SANITIZE_ADDRESS__)
  const int count = 2;
#else
  const int count = 6;
#endif
  for (int i = 0; i < count; ++i) {
    const Trial t{0x5eed1000u + static_cast<uint64_t>(i), 3 + i % 4, Fault::crash};
    SCOPED_TRACE("seed " + std::to_string(t.seed) + ", " + std::to_string(t.ranks) + " ranks");
    SharedBlock shared;
    RunOptions options;
    options.deadline = milliseconds(100000);
    options.comm_options.timeout = milliseconds(60000);
    const auto outcomes = run_ranks(
        t.ranks, [&](Communicator& world) { rank_body_that_goes_on(t, shared, world); }, options);
    expect_one_crash_and_the_rest_ok(outcomes);
  }
}

// The same across forced hosts (shared memory inside a host, UCX between): the crash reaches the
// other host over the network, the aborts too, and the shrunk world spans what is left.
TEST(RandomFaults, SurvivorsOfACrashAcrossHostsShrinkTheWorldAndRunTheProgramOnIt) {
  const std::vector<HostKeys> layouts = {{"host-a", "host-a", "host-b", "host-b"},
                                         {"host-a", "host-b", "host-b", "host-c", "host-c"}};
  for (size_t i = 0; i < layouts.size(); ++i) {
    const HostKeys& keys = layouts[i];
    const Trial t{0x5eed2000u + i, static_cast<int>(keys.size()), Fault::crash};
    SCOPED_TRACE("seed " + std::to_string(t.seed) + ", " + std::to_string(t.ranks) + " ranks");
    SharedBlock shared;
    const auto outcomes =
        run_on_hosts(keys, [&](Communicator& world) { rank_body_that_goes_on(t, shared, world); });
    expect_one_crash_and_the_rest_ok(outcomes);
  }
}

}  // namespace
}  // namespace tpf::testing
