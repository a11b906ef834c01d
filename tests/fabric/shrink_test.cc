// Communicator::shrink: after ranks of a communicator die or are found lost, the ranks that go on
// make a communicator of themselves, without the failed one's collectives, and it works.

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "support/expect_error.h"
#include "support/multiproc.h"
#include "support/on_hosts.h"
#include "tpf/comm.h"
#include "tpf/error.h"
#include "tpf/store.h"
#include "tpf/tpf_c.h"

namespace tpf {
namespace {

using namespace std::chrono_literals;
using testing::expect_error;
using testing::RankContext;
using testing::SharedBlock;

testing::RunOptions options_for(const std::string& job) {
  testing::RunOptions options;
  options.job_name = job;
  options.deadline = 90s;
  // Far beyond what a death takes to reach everyone: a wait that ends at it failed the test.
  options.comm_options.timeout = 60s;
  return options;
}

// The job's world through the store's address: its client declares the rank, so the store can
// tell which ranks died (what shrink needs).
Communicator make_world(const RankContext& ctx) {
  return Communicator::create(ctx.rank, ctx.size, ctx.store_address, ctx.secret, ctx.comm_options);
}

std::vector<int> job_ranks_of(const Communicator& comm) {
  std::vector<int> ranks;
  for (int r = 0; r < comm.size(); ++r) ranks.push_back(comm.job_rank(r));
  return ranks;
}

std::string joined(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : " ") + std::to_string(r);
  return out;
}

// `live` is made of job ranks `expected`, in that order, and its collectives give every rank the
// serial result: a sum of the job ranks + 1 and an all_gather of them.
void expect_it_works(Communicator& live, const std::vector<int>& expected) {
  TPF_CHILD_CHECK(job_ranks_of(live) == expected, "the shrunk communicator holds job ranks " +
                                                      joined(job_ranks_of(live)) + ", not " +
                                                      joined(expected));
  int64_t mine = live.job_rank(live.rank()) + 1, sum = 0, want = 0;
  for (int r : expected) want += r + 1;
  live.all_reduce(&mine, &sum, 1, DType::i64, ReduceOp::sum);
  TPF_CHILD_CHECK(sum == want,
                  "all_reduce gave " + std::to_string(sum) + ", not " + std::to_string(want));
  std::vector<int64_t> all(expected.size());
  live.all_gather(&mine, all.data(), 1, DType::i64);
  for (size_t i = 0; i < expected.size(); ++i) {
    TPF_CHILD_CHECK(all[i] == expected[i] + 1,
                    "all_gather's block " + std::to_string(i) + " is " + std::to_string(all[i]));
  }
  live.barrier();
}

// A call on `world` fails with peer_died once a rank of it died.
void expect_the_death_reaches(Communicator& world) {
  const Error e = expect_error("a barrier after a death", [&] { world.barrier(); });
  TPF_CHILD_CHECK(e.code() == ErrorCode::peer_died,
                  std::string(error_code_name(e.code())) + ": " + e.what());
}

// The job's world once the ranks `victim` tells have died in it (SIGKILL, after a first barrier)
// and their death has failed a call of this rank's. Never returns on a victim.
template <class IsVictim>
Communicator world_after_deaths(const RankContext& ctx, IsVictim victim) {
  Communicator world = make_world(ctx);
  world.barrier();
  if (victim(ctx.rank)) ::raise(SIGKILL);
  expect_the_death_reaches(world);
  return world;
}
Communicator world_after_death_of(const RankContext& ctx, int victim) {
  return world_after_deaths(ctx, [victim](int r) { return r == victim; });
}

// Rank 2 of 4 dies; the others' calls fail naming it, they shrink, and the three go on in their
// order, named after the ranks that make them.
TEST(Shrink, TheRanksThatGoOnWorkWithoutTheDeadOne) {
  const std::string job = testing::unique_job_name();
  const auto outcomes = testing::run_ranks_raw(
      4,
      [&](const RankContext& ctx) {
        Communicator world = world_after_death_of(ctx, 2);
        Communicator live = world.shrink();
        TPF_CHILD_CHECK(
            live.size() == 3 && live.rank() == (ctx.rank < 2 ? ctx.rank : 2),
            "rank " + std::to_string(live.rank()) + " of " + std::to_string(live.size()));
        TPF_CHILD_CHECK(live.name() == "world.live(0-1,3)", live.name());
        expect_it_works(live, {0, 1, 3});
        // The failed one stays failed.
        const Error after = expect_error("the old world", [&] { world.barrier(); });
        TPF_CHILD_CHECK(after.code() == ErrorCode::peer_died, after.what());
      },
      options_for(job));
  testing::expect_only_victims_killed(outcomes, {2});
  testing::expect_no_segments_of(job);
}

// Two ranks die together: whichever the survivors' calls name, the store knows both, and a
// survivor that shrinks before it knows the second is sent on without it.
TEST(Shrink, TwoDeathsAreBothLeftOut) {
  const std::string job = testing::unique_job_name();
  const auto outcomes = testing::run_ranks_raw(
      5,
      [&](const RankContext& ctx) {
        Communicator world = world_after_deaths(ctx, [](int r) { return r == 1 || r == 3; });
        Communicator live = world.shrink();
        expect_it_works(live, {0, 2, 4});
      },
      options_for(job));
  testing::expect_only_victims_killed(outcomes, {1, 3});
  testing::expect_no_segments_of(job);
}

// Rank 3 dies; ranks 0 and 1 start making the communicator of 0, 1 and 2, and rank 2 dies once
// both have joined it (it watches the store's count of joiners). They go again without it, and
// the two make a communicator of themselves.
TEST(Shrink, ARankThatDiesWhileTheOthersShrinkIsLeftOutInTurn) {
  const std::string job = testing::unique_job_name();
  const auto outcomes = testing::run_ranks_raw(
      4,
      [&](const RankContext& ctx) {
        Communicator world = make_world(ctx);
        world.barrier();
        if (ctx.rank == 3) ::raise(SIGKILL);
        if (ctx.rank == 2) {
          auto probe = testing::connect_to_store(ctx, -1);  // no rank's: its close is no death
          TPF_CHILD_CHECK(testing::wait_until(
                              [&] { return probe->add("world.live(0-2)/joined", 0) == 2; }, 60s),
                          "ranks 0 and 1 never began the communicator of ranks 0-2");
          ::raise(SIGKILL);
        }
        expect_the_death_reaches(world);
        Communicator live = world.shrink();
        TPF_CHILD_CHECK(live.name() == "world.live(0-1)", live.name());
        expect_it_works(live, {0, 1});
      },
      options_for(job));
  testing::expect_only_victims_killed(outcomes, {2, 3});
  testing::expect_no_segments_of(job);
}

// A shrunk communicator shrinks again, and a split of one shrinks too: its job ranks name the
// dead ranks in the store.
TEST(Shrink, AShrunkCommunicatorAndASplitOfOneShrinkAgain) {
  const std::string job = testing::unique_job_name();
  const auto outcomes = testing::run_ranks_raw(
      5,
      [&](const RankContext& ctx) {
        Communicator world = world_after_death_of(ctx, 0);
        Communicator live = world.shrink();  // job ranks 1-4
        expect_it_works(live, {1, 2, 3, 4});
        Communicator odd_even = live.split(ctx.rank % 2, ctx.rank);  // {1, 3}, {2, 4}
        if (ctx.rank == 4) ::raise(SIGKILL);
        if (ctx.rank == 2) {
          expect_the_death_reaches(odd_even);
          Communicator alone = odd_even.shrink();
          expect_it_works(alone, {2});
        }
        expect_the_death_reaches(live);
        Communicator rest = live.shrink();
        TPF_CHILD_CHECK(rest.name() == "world.live(1-3)", rest.name());
        expect_it_works(rest, {1, 2, 3});
      },
      options_for(job));
  testing::expect_only_victims_killed(outcomes, {0, 4});
  testing::expect_no_segments_of(job);
}

// Rank 3 dies, the others shrink; then rank 2 dies. Rank 0 shrinks the shrunk communicator, rank
// 1 the world it came from (as a rank that missed the first shrink would): both leave out ranks 2
// and 3 and meet in one communicator.
TEST(Shrink, RanksShrinkingDifferentCommunicatorsOfALineMeet) {
  const std::string job = testing::unique_job_name();
  const auto outcomes = testing::run_ranks_raw(
      4,
      [&](const RankContext& ctx) {
        Communicator world = world_after_death_of(ctx, 3);
        Communicator live = world.shrink();
        expect_it_works(live, {0, 1, 2});
        if (ctx.rank == 2) ::raise(SIGKILL);
        expect_the_death_reaches(live);
        Communicator rest = ctx.rank == 0 ? live.shrink() : world.shrink();
        TPF_CHILD_CHECK(rest.name() == "world.live(0-1)", rest.name());
        expect_it_works(rest, {0, 1});
      },
      options_for(job));
  testing::expect_only_victims_killed(outcomes, {2, 3});
  testing::expect_no_segments_of(job);
}

// A shrink that failed can be called again: rank 3 dies, ranks 0 and 1 shrink with a short
// setup timeout and time out (rank 2 does not come until both have failed); then all three shrink
// and meet. Until 2026-12-07 the failed try's joiners stayed counted under the new communicator's
// name, which every try shares, so the second try's ranks fell into different generations of it
// and waited out their setup timeouts.
TEST(Shrink, AShrinkThatTimedOutCanBeCalledAgain) {
  const std::string job = testing::unique_job_name();
  const auto outcomes = testing::run_ranks_raw(
      4,
      [&](const RankContext& ctx) {
        Communicator world = world_after_death_of(ctx, 3);
        auto probe = testing::connect_to_store(ctx, -1);  // no rank's: its close is no death
        if (ctx.rank < 2) {
          // The store knows the death first, so the short timeout can only end the wait for rank 2.
          TPF_CHILD_CHECK(testing::wait_until([&] { return !probe->dead_ranks().empty(); }, 20s),
                          "the store never heard that rank 3 died");
          CommOptions hasty;
          hasty.timeout = 1s;
          const Error e = expect_error("a shrink without rank 2", [&] { world.shrink(hasty); });
          TPF_CHILD_CHECK(e.code() == ErrorCode::timeout,
                          std::string(error_code_name(e.code())) + ": " + e.what());
          probe->set("failed/" + std::to_string(ctx.rank), "1");
        } else {
          probe->get_many_from({0, 1}, {"failed/0", "failed/1"}, 30s);  // not ended by rank 3
        }
        Communicator live = world.shrink();
        TPF_CHILD_CHECK(live.name() == "world.live(0-2)", live.name());
        expect_it_works(live, {0, 1, 2});
      },
      options_for(job));
  testing::expect_only_victims_killed(outcomes, {3});
  testing::expect_no_segments_of(job);
}

// Across hosts (forced host ids: shared memory inside a host, UCX between): rank 2, on host b,
// dies; the three left span both hosts, and a large all_reduce crosses the network too.
TEST(Shrink, AcrossHostsTheRanksLeftOnEitherHostGoOn) {
  const testing::HostKeys keys = {"host-a", "host-a", "host-b", "host-b"};
  const auto outcomes = testing::run_on_hosts(keys, [&](Communicator& world) {
    world.barrier();
    if (world.rank() == 2) ::raise(SIGKILL);
    expect_the_death_reaches(world);
    Communicator live = world.shrink();
    TPF_CHILD_CHECK(live.host_count() == 2, "hosts: " + std::to_string(live.host_count()));
    expect_it_works(live, {0, 1, 3});
    std::vector<float> mine(size_t{1} << 18, static_cast<float>(live.rank() + 1)), sum(mine.size());
    live.all_reduce(mine.data(), sum.data(), mine.size(), DType::f32, ReduceOp::sum);
    for (float s : sum) TPF_CHILD_CHECK(s == 6.0f, "a large all_reduce gave " + std::to_string(s));
  });
  testing::expect_only_victims_killed(outcomes, {2});
}

// Rank 3 of 4 stops (SIGSTOP) after a first barrier, its pid in `shared.counter(1)`; the others'
// next barrier fails with a timeout whose message holds what `naming` says for that pid, they
// shrink and go on without it, and the last of them ends it.
void expect_rank_3_found_lost_and_left_out(Communicator& world, SharedBlock& shared,
                                           const std::function<std::string(pid_t)>& naming) {
  world.barrier();
  if (world.rank() == 3) {
    shared.counter(1).store(::getpid());
    ::raise(SIGSTOP);
    ::_exit(3);  // not reached: killed while stopped
  }
  const Error lost = expect_error("a barrier with a stopped rank", [&] { world.barrier(); });
  const auto stopped = static_cast<pid_t>(shared.counter(1).load());
  TPF_CHILD_CHECK(lost.code() == ErrorCode::timeout, lost.what());
  TPF_CHILD_CHECK(std::string(lost.what()).find(naming(stopped)) != std::string::npos, lost.what());
  Communicator live = world.shrink();
  expect_it_works(live, {0, 1, 2});
  if (shared.counter(0).fetch_add(1) + 1 == 3) ::kill(stopped, SIGKILL);
}

// A rank on another host stops (its connections stay open, so only its watcher's heartbeat finds
// it, and reports it to the store); the others' calls fail naming it, and they go on without it.
TEST(Shrink, AcrossHostsARankFoundLostIsLeftOut) {
  const testing::HostKeys keys = {"host-a", "host-a", "host-b", "host-b"};
  SharedBlock shared;  // [0]: the survivors done; [1]: rank 3's pid
  const auto outcomes = testing::run_on_hosts(
      keys,
      [&](Communicator& world) {
        expect_rank_3_found_lost_and_left_out(world, shared, [](pid_t) {
          return std::string("rank 3 (host 'host-b') has sent no heartbeat");
        });
      },
      transport::NetProtocol::automatic, [](int) { ::setenv("TPF_HOST_LOST_S", "3", 1); });
  testing::expect_only_victims_killed(outcomes, {3});
}

// The same on one host, where no heartbeat runs: a rank waiting on the stopped one finds it lost
// once it has been stopped for TPF_HOST_LOST_S (transport/stopped_peers.h) and reports it to the
// store, and the others leave it out.
TEST(Shrink, AStoppedRankOfThisHostIsFoundLostAndLeftOut) {
  const std::string job = testing::unique_job_name();
  SharedBlock shared;  // [0]: the survivors done; [1]: rank 3's pid
  const auto outcomes = testing::run_ranks_raw(
      4,
      [&](const RankContext& ctx) {
        ::setenv("TPF_HOST_LOST_S", "1", 1);
        Communicator world = make_world(ctx);
        expect_rank_3_found_lost_and_left_out(world, shared, [](pid_t pid) {
          return "rank 3 (pid " + std::to_string(pid) + ") has been stopped for";
        });
      },
      options_for(job));
  testing::expect_only_victims_killed(outcomes, {3});
  testing::expect_no_segments_of(job);
}

// A rank found lost while stopped that then resumes (a debugger let go of it): the others went on
// without it, and its own shrink refuses, naming why, instead of waiting for them.
TEST(Shrink, AcrossHostsARankFoundLostThatResumesCannotJoin) {
  const testing::HostKeys keys = {"host-a", "host-b"};
  SharedBlock shared;  // [1]: rank 1's pid
  const auto outcomes = testing::run_on_hosts(
      keys,
      [&](Communicator& world) {
        world.barrier();
        if (world.rank() == 1) {
          shared.counter(1).store(::getpid());
          ::raise(SIGSTOP);
          const Error e = expect_error("the shrink of a rank found lost", [&] { world.shrink(); });
          TPF_CHILD_CHECK(e.code() == ErrorCode::peer_died, e.what());
          TPF_CHILD_CHECK(std::string(e.what()).find("cannot join") != std::string::npos, e.what());
          return;
        }
        expect_error("a barrier with a stopped rank", [&] { world.barrier(); });
        Communicator live = world.shrink();
        expect_it_works(live, {0});
        ::kill(static_cast<pid_t>(shared.counter(1).load()), SIGCONT);
      },
      transport::NetProtocol::automatic, [](int) { ::setenv("TPF_HOST_LOST_S", "3", 1); });
  testing::expect_only_victims_killed(outcomes, {});
}

// Ranks that called different collectives all live: a shrink after that mismatch refuses at once,
// naming the failure, instead of waiting for a death that will not come.
TEST(Shrink, RefusesAtOnceAfterAFailureNoDeathExplains) {
  const std::string job = testing::unique_job_name();
  const auto outcomes = testing::run_ranks_raw(
      2,
      [&](const RankContext& ctx) {
        Communicator world = make_world(ctx);
        int32_t mine = 1, out[2] = {};
        const Error e = expect_error("different collectives", [&] {
          if (ctx.rank == 0)
            world.all_reduce(&mine, out, 1, DType::i32, ReduceOp::sum);
          else
            world.all_gather(&mine, out, 1, DType::i32);
        });
        TPF_CHILD_CHECK(e.code() == ErrorCode::mismatch, e.what());
        const Error refused = expect_error("a shrink after a mismatch", [&] { world.shrink(); });
        TPF_CHILD_CHECK(refused.code() == ErrorCode::invalid_argument, refused.what());
        for (const char* naming : {"it failed on mismatched collectives, which no death or loss",
                                   "ranks called different collectives"}) {
          TPF_CHILD_CHECK(std::string(refused.what()).find(naming) != std::string::npos,
                          refused.what());
        }
      },
      options_for(job));
  testing::expect_only_victims_killed(outcomes, {});
}

// The same through the C API: rank 1 of 3 dies, and the others' shrunk handle works.
TEST(Shrink, ThroughTheCApi) {
  const std::string job = testing::unique_job_name();
  const auto outcomes = testing::run_ranks_raw(
      3,
      [&](const RankContext& ctx) {
        tpf_comm_t world = nullptr;
        TPF_CHILD_CHECK(tpf_comm_create(ctx.rank, ctx.size, ctx.store_address.c_str(),
                                        ctx.secret.c_str(), &world) == TPF_OK,
                        tpf_last_error());
        TPF_CHILD_CHECK(tpf_barrier(world) == TPF_OK, tpf_last_error());
        if (ctx.rank == 1) ::raise(SIGKILL);
        TPF_CHILD_CHECK(tpf_barrier(world) == TPF_ERR_PEER_DIED, tpf_last_error());
        tpf_comm_t live = nullptr;
        TPF_CHILD_CHECK(tpf_comm_shrink(world, &live) == TPF_OK, tpf_last_error());
        int size = 0, rank = -1;
        TPF_CHILD_CHECK(tpf_comm_size(live, &size) == TPF_OK && size == 2, "size");
        TPF_CHILD_CHECK(tpf_comm_rank(live, &rank) == TPF_OK && rank == ctx.rank / 2, "rank");
        int32_t mine = ctx.rank + 1, sum = 0;
        TPF_CHILD_CHECK(tpf_all_reduce(live, &mine, &sum, 1, TPF_I32, TPF_SUM) == TPF_OK,
                        tpf_last_error());
        TPF_CHILD_CHECK(sum == 4, "all_reduce gave " + std::to_string(sum));
        TPF_CHILD_CHECK(tpf_comm_destroy(live) == TPF_OK, tpf_last_error());
        TPF_CHILD_CHECK(tpf_comm_destroy(world) == TPF_OK, tpf_last_error());
      },
      options_for(job));
  testing::expect_only_victims_killed(outcomes, {1});
  testing::expect_no_segments_of(job);
}

// Shrink refuses where it cannot help, naming why.
TEST(Shrink, RefusesWhereNoRankIsDeadOrTheStoreCannotTell) {
  const std::string job = testing::unique_job_name();
  const auto outcomes = testing::run_ranks_raw(
      2,
      [&](const RankContext& ctx) {
        Communicator world = make_world(ctx);
        world.barrier();
        const Error none = expect_error("a shrink with every rank alive", [&] { world.shrink(); });
        TPF_CHILD_CHECK(none.code() == ErrorCode::invalid_argument, none.what());
        TPF_CHILD_CHECK(std::string(none.what()).find("nothing to leave out") != std::string::npos,
                        none.what());
        world.barrier();  // and the communicator is untouched
        Communicator own = Communicator::create(
            ctx.rank, ctx.size, testing::connect_to_store(ctx, ctx.rank), "own", ctx.comm_options);
        const Error cannot =
            expect_error("a shrink over the caller's store", [&] { own.shrink(); });
        TPF_CHILD_CHECK(cannot.code() == ErrorCode::invalid_argument, cannot.what());
        TPF_CHILD_CHECK(
            std::string(cannot.what()).find("store to know its ranks") != std::string::npos,
            cannot.what());
        own.barrier();
      },
      options_for(job));
  testing::expect_only_victims_killed(outcomes, {});
}

}  // namespace
}  // namespace tpf
