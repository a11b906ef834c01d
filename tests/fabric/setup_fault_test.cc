// A rank killed in the middle of communicator creation or split(), started the torchrun way (no
// tpf run to clean up): the survivors must fail promptly with Error(peer_died) naming the dead
// rank (bounded by detection, not by the 120 s setup timeout), and /dev/shm must hold nothing of
// the job afterwards.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/forwarding_store.h"
#include "support/multiproc.h"
#include "tpf/comm.h"
#include "tpf/error.h"
#include "tpf/store.h"

namespace tpf {
namespace {

using namespace std::chrono_literals;
using testing::RankContext;

// A store that refuses to set one key (Error(resource), as a full store might): a rank whose
// creation fails at an exact point of the setup, for a reason of its own, and lives on.
class RefusingStore : public bootstrap::ForwardingStore {
 public:
  RefusingStore(std::shared_ptr<Store> inner, std::string refused_key)
      : ForwardingStore(std::move(inner)), refused_key_(std::move(refused_key)) {}
  void set(const std::string& key, const std::string& value) override {
    if (key == refused_key_) throw Error(ErrorCode::resource, "test: no room for " + key);
    ForwardingStore::set(key, value);
  }

 private:
  std::string refused_key_;
};

// A store that kills its own process (SIGKILL: no destructor, no goodbye) when asked to set one
// key, before or after passing the set on: a rank that dies at an exact point of the setup.
class DyingStore : public bootstrap::ForwardingStore {
 public:
  DyingStore(std::shared_ptr<Store> inner, std::string fatal_key, bool after_set)
      : ForwardingStore(std::move(inner)),
        fatal_key_(std::move(fatal_key)),
        after_set_(after_set) {}
  void set(const std::string& key, const std::string& value) override {
    if (key == fatal_key_ && !after_set_) ::raise(SIGKILL);
    ForwardingStore::set(key, value);
    if (key == fatal_key_ && after_set_) ::raise(SIGKILL);
  }

 private:
  std::string fatal_key_;
  bool after_set_;
};

std::shared_ptr<Store> connect_store(const RankContext& ctx, int job_rank) {
  return testing::connect_to_store(ctx, job_rank, 10s);
}

testing::RunOptions options_for(const std::string& job) {
  testing::RunOptions options;
  options.job_name = job;
  // Far below the setup timeout (120 s unless CommOptions::timeout): only prompt detection passes.
  options.deadline = 30s;
  return options;
}

// Inside a survivor: the creation must throw peer_died naming `who`.
void expect_peer_died(const std::function<void()>& create, const std::string& who) {
  try {
    create();
  } catch (const Error& e) {
    const std::string message = e.what();
    TPF_CHILD_CHECK(e.code() == ErrorCode::peer_died,
                    std::string("code ") + error_code_name(e.code()) + ": " + message);
    TPF_CHILD_CHECK(message.find(who) != std::string::npos, "'" + who + "' not in: " + message);
    return;
  }
  TPF_CHILD_CHECK(false, "the communicator was created although a rank died");
}

// Creation of a 3-rank "world" where rank 2 dies on setting `fatal_key`.
void run_creation_with_death(const std::string& job, const std::string& fatal_key, bool after_set,
                             bool store_knows_ranks, const std::string& who) {
  constexpr int kVictim = 2;
  // Survivors stay until both have their answer: one that exited early could otherwise be taken
  // for dead by the other when the store cannot tell who died (a limit of pid checks).
  testing::SharedBlock finished;
  const auto outcomes = testing::run_ranks_raw(
      3,
      [&](const RankContext& ctx) {
        auto store = connect_store(ctx, store_knows_ranks ? ctx.rank : -1);
        if (ctx.rank == kVictim) {
          auto dying = std::make_shared<DyingStore>(store, fatal_key, after_set);
          Communicator::create(ctx.rank, ctx.size, dying, "world", ctx.comm_options);
          TPF_CHILD_CHECK(false, "the victim survived its fatal set");
        }
        expect_peer_died(
            [&] { Communicator::create(ctx.rank, ctx.size, store, "world", ctx.comm_options); },
            who);
        finished.counter(0).fetch_add(1);
        TPF_CHILD_CHECK(testing::wait_until([&] { return finished.counter(0).load() == 2; }, 20s),
                        "the other survivor did not finish");
      },
      options_for(job));
  testing::expect_only_victims_killed(outcomes, {kVictim});
  testing::expect_no_segments_of(job);
}

TEST(SetupFault, RankKilledBeforePublishingIsPeerDiedNamingIt) {
  // Rank 2 has created its segment but not told anyone: only the store can tell it died.
  run_creation_with_death(testing::unique_job_name(), "world/0/rank/2", /*after_set=*/false,
                          /*store_knows_ranks=*/true, "job rank 2 (pid ");
}

TEST(SetupFault, RankKilledAfterPublishingIsPeerDiedAndLeavesNoSegment) {
  // Rank 2's segment name is published and then orphaned: the survivors remove it.
  run_creation_with_death(testing::unique_job_name(), "world/0/rank/2", /*after_set=*/true,
                          /*store_knows_ranks=*/true, "rank 2 (pid ");
}

TEST(SetupFault, DeadPeerIsNoticedByItsPidWhenTheStoreCannotTell) {
  run_creation_with_death(testing::unique_job_name(), "world/0/rank/2", /*after_set=*/true,
                          /*store_knows_ranks=*/false, "rank 2 (pid ");
}

TEST(SetupFault, RankKilledDuringSplitIsPeerDiedNamingIt) {
  // All three ranks split into one communicator in reverse order; job rank 1 (rank 1 of the new
  // communicator too) dies right after publishing its segment there.
  const std::string job = testing::unique_job_name();
  constexpr int kVictim = 1;
  const auto outcomes = testing::run_ranks_raw(
      3,
      [&](const RankContext& ctx) {
        std::shared_ptr<Store> store = connect_store(ctx, ctx.rank);
        if (ctx.rank == kVictim) {
          store = std::make_shared<DyingStore>(store, "world.s0c0/0/rank/1", /*after_set=*/true);
        }
        Communicator world =
            Communicator::create(ctx.rank, ctx.size, store, "world", ctx.comm_options);
        if (ctx.rank == kVictim) {
          world.split(0, -ctx.rank);
          TPF_CHILD_CHECK(false, "the victim survived its fatal set");
        }
        expect_peer_died([&] { world.split(0, -ctx.rank); }, "rank 1 (pid ");
      },
      options_for(job));
  testing::expect_only_victims_killed(outcomes, {kVictim});
  testing::expect_no_segments_of(job);
}

// A death ends the store's waits for what the dead rank would set, but a split knows its members'
// job ranks and waits only on them: ranks 0 and 1 split off a pair, rank 2 dies, and once the
// store knows it the pair splits again and works. Until 2026-12-07 any death in the job failed
// every communicator made afterwards ("job rank 2 (pid ...) died"), even one without that rank.
TEST(SetupFault, ASplitOfLiveRanksIsMadeAfterAnotherRankOfTheJobDied) {
  const std::string job = testing::unique_job_name();
  constexpr int kVictim = 2;
  const auto outcomes = testing::run_ranks_raw(
      3,
      [&](const RankContext& ctx) {
        // From the store's address: its client declares the rank, which a split then knows the
        // store numbers alike (a store of the user's own may not: its splits wait on any rank).
        Communicator world = Communicator::create(ctx.rank, ctx.size, ctx.store_address, ctx.secret,
                                                  ctx.comm_options);
        Communicator pair = world.split(ctx.rank == kVictim ? 1 : 0, ctx.rank);
        if (ctx.rank == kVictim) ::raise(SIGKILL);
        auto probe = connect_store(ctx, -1);  // no rank's: sees what any wait would
        TPF_CHILD_CHECK(testing::wait_until(
                            [&] {
                              try {
                                probe->get("never set", 0ms);
                              } catch (const Error& e) {
                                return e.code() == ErrorCode::peer_died;
                              }
                              return false;
                            },
                            20s),
                        "the store never heard that rank 2 died");
        Communicator again = pair.split(0, -ctx.rank);
        int32_t mine = ctx.rank + 1, sum = 0;
        again.all_reduce(&mine, &sum, 1, DType::i32, ReduceOp::sum);
        TPF_CHILD_CHECK(sum == 3, "all_reduce gave " + std::to_string(sum));
        TPF_CHILD_CHECK(again.job_rank(0) == 1,
                        "rank 0 is job rank " + std::to_string(again.job_rank(0)));
        // What rank 2 would have set is still waited for in vain, and named.
        expect_peer_died([&] { probe->get("never set", 60s); }, "job rank 2 (pid ");
      },
      options_for(job));
  testing::expect_only_victims_killed(outcomes, {kVictim});
  testing::expect_no_segments_of(job);
}

// Inside a rank whose creation another rank gave up: it must fail with that rank's failure (code
// and cause) as its root, told through the generation's failure board (comm/creation_watch.h),
// not with a timeout of its own.
void expect_told_of_a_given_up_creation(const std::function<void()>& create, ErrorCode code,
                                        const std::string& cause) {
  try {
    create();
  } catch (const Error& e) {
    const std::string what = e.what();
    TPF_CHILD_CHECK(e.code() == code, std::string(error_code_name(e.code())) + ": " + what);
    TPF_CHILD_CHECK(
        what.find("another rank's creation of it failed and gave it up") != std::string::npos &&
            what.find(cause) != std::string::npos,
        what);
    return;
  }
  TPF_CHILD_CHECK(false, "the creation succeeded");
}

// The three ranks try again under the name and meet (in the next generation).
void create_again_and_reduce(const RankContext& ctx, const std::shared_ptr<Store>& store,
                             const std::string& name) {
  CommOptions patient = ctx.comm_options;
  patient.timeout = 20s;  // within the test's deadline, far beyond what a meeting takes
  Communicator comm = Communicator::create(ctx.rank, ctx.size, store, name, patient);
  int32_t mine = ctx.rank + 1, sum = 0;
  comm.all_reduce(&mine, &sum, 1, DType::i32, ReduceOp::sum);
  TPF_CHILD_CHECK(sum == 6, "all_reduce gave " + std::to_string(sum));
}

// Rank 0's creation fails for a reason of its own (the store refuses its segment's key) while
// ranks 1 and 2 wait for that segment: they are told at once, with rank 0's cause, instead of
// waiting out their setup timeout (which the test's 30 s deadline would not see the end of), and
// all three meet when they try again. Until 2026-12-07 they waited out that timeout.
TEST(SetupFault, RanksWaitingOnARankWhoseCreationFailedAreToldItsCause) {
  const std::string job = testing::unique_job_name();
  const auto outcomes = testing::run_ranks_raw(
      3,
      [&](const RankContext& ctx) {
        auto store = connect_store(ctx, ctx.rank);
        CommOptions slow = ctx.comm_options;
        slow.timeout = 100s;  // beyond the test's deadline: only the notice ends their wait
        if (ctx.rank == 0) {
          auto refusing = std::make_shared<RefusingStore>(store, "given_up/0/rank/0");
          try {
            Communicator::create(ctx.rank, ctx.size, refusing, "given_up", slow);
            TPF_CHILD_CHECK(false, "created without its segment's key");
          } catch (const Error& e) {
            TPF_CHILD_CHECK(e.code() == ErrorCode::resource, e.what());
          }
        } else {
          expect_told_of_a_given_up_creation(
              [&] { Communicator::create(ctx.rank, ctx.size, store, "given_up", slow); },
              ErrorCode::resource, "test: no room for given_up/0/rank/0");
        }
        create_again_and_reduce(ctx, store, "given_up");
      },
      options_for(job));
  testing::expect_all_ok(outcomes);
  testing::expect_no_segments_of(job);
}

// The same while the others still learn every rank's host: rank 0 gives up after 1 s (rank 2 has
// not come), and rank 1, waiting for rank 0's list of hosts with a timeout beyond the test's
// deadline, is told that rank 2 did not join, as rank 0 found. Rank 0 starts once rank 1 is in the
// creation (its host entry is there): a rank 1 that came after the creation was given up would
// join the next generation instead.
TEST(SetupFault, ARankWaitingForTheHostListIsToldThatTheCreationWasGivenUp) {
  const std::string job = testing::unique_job_name();
  const auto outcomes = testing::run_ranks_raw(
      3,
      [&](const RankContext& ctx) {
        auto store = connect_store(ctx, ctx.rank);
        if (ctx.rank == 0) {
          store->get("hosts_given_up/0/host/1", 20s);
          CommOptions hasty = ctx.comm_options;
          hasty.timeout = 1s;
          try {
            Communicator::create(ctx.rank, ctx.size, store, "hosts_given_up", hasty);
            TPF_CHILD_CHECK(false, "created without rank 2");
          } catch (const Error& e) {
            TPF_CHILD_CHECK(e.code() == ErrorCode::timeout, e.what());
          }
          store->set("failed/0", "1");
        } else if (ctx.rank == 1) {
          CommOptions slow = ctx.comm_options;
          slow.timeout = 100s;
          expect_told_of_a_given_up_creation(
              [&] { Communicator::create(ctx.rank, ctx.size, store, "hosts_given_up", slow); },
              ErrorCode::timeout, "rank 2 did not join");
          store->set("failed/1", "1");
        } else {
          store->get_many({"failed/0", "failed/1"}, 20s);
        }
        create_again_and_reduce(ctx, store, "hosts_given_up");
      },
      options_for(job));
  testing::expect_all_ok(outcomes);
  testing::expect_no_segments_of(job);
}

// A creation that failed with some of its ranks joined (ranks 0 and 1 timed out waiting for rank
// 2) is tried again under the same name by all three, rank 2 arriving last: they meet and the
// communicator works. Until 2026-12-07 the failed try's joiners stayed counted, so the retry's
// ranks fell into different generations of the name (rank 2 into the failed one, reading what
// ranks 0 and 1 had left there) and each waited out its setup timeout, at every retry after.
TEST(SetupFault, ACreationThatFailedCanBeTriedAgainUnderItsName) {
  const std::string job = testing::unique_job_name();
  const auto outcomes = testing::run_ranks_raw(
      3,
      [&](const RankContext& ctx) {
        auto store = connect_store(ctx, ctx.rank);
        if (ctx.rank < 2) {
          CommOptions hasty = ctx.comm_options;
          hasty.timeout = 1s;  // rank 2 does not come until both have failed: any timeout fails
          try {
            Communicator::create(ctx.rank, ctx.size, store, "again", hasty);
            TPF_CHILD_CHECK(false, "created without rank 2");
          } catch (const Error& e) {
            TPF_CHILD_CHECK(e.code() == ErrorCode::timeout,
                            std::string(error_code_name(e.code())) + ": " + e.what());
          }
          store->set("failed/" + std::to_string(ctx.rank), "1");
        } else {
          store->get_many({"failed/0", "failed/1"}, 20s);
        }
        create_again_and_reduce(ctx, store, "again");
      },
      options_for(job));
  testing::expect_all_ok(outcomes);
  testing::expect_no_segments_of(job);
}

}  // namespace
}  // namespace tpf
