// A peer process on this host that stays stopped (SIGSTOP, a debugger holding it): PeerProcess
// tells, StoppedPeers counts how long, and a rank waiting on it finds it lost after
// TPF_HOST_LOST_S (the one-host twin of the heartbeat) or, at an earlier deadline, says it is
// stopped. In a communicator of one host; across hosts the heartbeat finds it
// (across_hosts_test.cc), and while a communicator is made, its host-mates or, where none can look,
// the job's store (below). With a shrink after it: shrink_test.cc.

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/forwarding_store.h"
#include "support/expect_error.h"
#include "support/multiproc.h"
#include "support/run_tpf.h"
#include "tpf/comm.h"
#include "tpf/error.h"
#include "tpf/launch_env.h"
#include "transport/peer_process.h"
#include "transport/shm_segment.h"
#include "transport/stopped_peers.h"

namespace tpf {
namespace {

using namespace std::chrono_literals;
using testing::expect_error;
using testing::RankContext;
using testing::SharedBlock;
using transport::PeerProcess;
using transport::StoppedPeers;

// A child of this process that waits to be killed, named `command` (what /proc/<pid>/stat shows
// in parentheses).
class Child {
 public:
  explicit Child(const char* command) {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_NAME, command);
      for (;;) ::pause();
    }
  }
  ~Child() {
    if (pid_ <= 0) return;  // fork failed: never kill(-1)
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }
  // Returns once the child is stopped (waitpid says so: no polling).
  void stop() {
    ASSERT_EQ(::kill(pid_, SIGSTOP), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid_, &status, WUNTRACED), pid_);
    ASSERT_TRUE(WIFSTOPPED(status));
  }
  void resume() {
    ASSERT_EQ(::kill(pid_, SIGCONT), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid_, &status, WCONTINUED), pid_);
    ASSERT_TRUE(WIFCONTINUED(status));
  }

 private:
  pid_t pid_ = -1;
};

TEST(PeerProcess, TellsAStoppedProcessWhateverItsCommandIsCalled) {
  // A command with spaces and parentheses: the state is read after the last ')'.
  Child child("a) (T b");
  ASSERT_GT(child.pid(), 0);
  const PeerProcess process(child.pid());
  EXPECT_FALSE(process.stopped());  // asleep in pause(): 'S'
  child.stop();
  EXPECT_TRUE(process.stopped());
  EXPECT_TRUE(process.alive());
  child.resume();
  EXPECT_FALSE(process.stopped());
  EXPECT_FALSE(PeerProcess().stopped());  // an unknown peer
}

TEST(StoppedPeers, APeerIsLostOnceSeenStoppedForLostAfterCountedFromTheFirstLook) {
  Child child("stopped-peer");
  const PeerProcess process(child.pid());
  const StoppedPeers peers(3, 1000ms);
  ASSERT_EQ(StoppedPeers::look_every(1000ms), 100ms);
  const StoppedPeers::Clock::time_point t0{std::chrono::hours(1)};
  EXPECT_FALSE(peers.lost_for(2, process, t0));  // running
  child.stop();
  EXPECT_FALSE(peers.lost_for(2, process, t0 + 50ms));    // not looked at: before the next look
  EXPECT_FALSE(peers.lost_for(2, process, t0 + 100ms));   // first seen stopped: counts from here
  EXPECT_FALSE(peers.lost_for(2, process, t0 + 1050ms));  // stopped 950 ms
  EXPECT_FALSE(peers.lost_for(2, process, t0 + 1100ms));  // 1000 ms, but not looked at again yet
  const auto lost = peers.lost_for(2, process, t0 + 1150ms);
  ASSERT_TRUE(lost);
  EXPECT_EQ(*lost, 1050ms);
  // Another peer's count is its own.
  EXPECT_FALSE(peers.lost_for(1, process, t0 + 1150ms));
}

TEST(StoppedPeers, APeerSeenRunningStartsTheCountAgain) {
  Child child("resumed-peer");
  const PeerProcess process(child.pid());
  const StoppedPeers peers(2, 1000ms);
  const StoppedPeers::Clock::time_point t0{std::chrono::hours(1)};
  child.stop();
  EXPECT_FALSE(peers.lost_for(1, process, t0));
  child.resume();
  EXPECT_FALSE(peers.lost_for(1, process, t0 + 900ms));
  child.stop();
  EXPECT_FALSE(peers.lost_for(1, process, t0 + 1000ms));  // seen stopped again: a new count
  EXPECT_FALSE(peers.lost_for(1, process, t0 + 1900ms));
  EXPECT_TRUE(peers.lost_for(1, process, t0 + 2000ms));
}

TEST(StoppedPeers, ZeroFindsNoneLost) {
  Child child("never-lost");
  child.stop();
  const PeerProcess process(child.pid());
  const StoppedPeers peers(2, 0ms);
  const StoppedPeers::Clock::time_point t0{std::chrono::hours(1)};
  EXPECT_FALSE(peers.lost_for(1, process, t0));
  EXPECT_FALSE(peers.lost_for(1, process, t0 + std::chrono::hours(24)));
}

// Until `pid` is stopped (a sibling process: no waitpid), within the test's deadline.
void until_stopped(pid_t pid) {
  const PeerProcess process(pid);
  while (!process.stopped()) std::this_thread::yield();
}

testing::RunOptions options(std::chrono::milliseconds timeout) {
  testing::RunOptions run;
  run.deadline = 120s;
  run.comm_options.timeout = timeout;
  return run;
}

// Rank `victim` stops itself after a first barrier, publishing its pid in `shared.counter(1)`;
// never returns there. Elsewhere returns that pid once the victim is stopped.
pid_t stop_rank(Communicator& comm, int victim, SharedBlock& shared) {
  comm.barrier();
  if (comm.rank() == victim) {
    shared.counter(1).store(::getpid());
    ::raise(SIGSTOP);
    ::_exit(3);  // not reached: ended while stopped
  }
  while (shared.counter(1).load() == 0) std::this_thread::yield();
  const auto pid = static_cast<pid_t>(shared.counter(1).load());
  until_stopped(pid);
  return pid;
}

// On `ranks` ranks of one host with TPF_HOST_LOST_S = `lost_s`, rank `victim` stops after a
// first barrier; every other rank's `wait_for_it` must fail with a timeout whose message holds each
// of `fragments` (after "{pid}" is replaced with the victim's pid). The last of them ends it.
void expect_the_stopped_rank_named(int ranks, int victim, const char* lost_s,
                                   const std::function<void(Communicator&)>& wait_for_it,
                                   const std::vector<std::string>& fragments) {
  SharedBlock shared;  // [0]: the others done; [1]: the victim's pid
  const auto outcomes = testing::run_ranks_raw(
      ranks,
      [&](const RankContext& ctx) {
        ::setenv("TPF_HOST_LOST_S", lost_s, 1);
        Communicator world = Communicator::create(ctx.rank, ctx.size, ctx.store_address, ctx.secret,
                                                  ctx.comm_options);
        const pid_t stopped = stop_rank(world, victim, shared);
        const Error e =
            expect_error("a call that waits on a stopped rank", [&] { wait_for_it(world); });
        TPF_CHILD_CHECK(e.code() == ErrorCode::timeout, e.what());
        for (std::string fragment : fragments) {
          if (const size_t at = fragment.find("{pid}"); at != std::string::npos)
            fragment.replace(at, 5, std::to_string(stopped));
          TPF_CHILD_CHECK(std::string(e.what()).find(fragment) != std::string::npos, e.what());
        }
        if (shared.counter(0).fetch_add(1) + 1 == ranks - 1) ::kill(stopped, SIGKILL);
      },
      options(60s));
  testing::expect_only_victims_killed(outcomes, {victim});
}

// Every survivor's collective fails, naming the stopped rank found lost after TPF_HOST_LOST_S
// (far before the operation's 60 s deadline).
TEST(StoppedPeer, ACollectiveWaitingOnAStoppedRankFindsItLost) {
  expect_the_stopped_rank_named(
      3, 2, "1",
      [](Communicator& world) {
        float one = 1.0f, sum = 0.0f;
        world.all_reduce(&one, &sum, 1, DType::f32, ReduceOp::sum);
      },
      {"rank 2 (pid {pid}) has been stopped for ", "found lost (TPF_HOST_LOST_S = 1.0 s)"});
}

// A receive from a stopped rank (the point-to-point engine's wait) finds it lost too.
TEST(StoppedPeer, AReceiveFromAStoppedRankFindsItLost) {
  expect_the_stopped_rank_named(2, 1, "1",
                                [](Communicator& world) {
                                  std::vector<float> in(1024);
                                  world.recv(in.data(), in.size(), DType::f32, 1);
                                },
                                {"rank 1 (pid {pid}) has been stopped for "});
}

// A deadline that comes before TPF_HOST_LOST_S says which of the ranks it names is stopped.
TEST(StoppedPeer, ADeadlineSaysTheRankItWaitedForIsStopped) {
  expect_the_stopped_rank_named(
      2, 1, "600", [](Communicator& world) { world.barrier({std::chrono::milliseconds(200)}); },
      {"rank 1 never arrived; rank 1 (pid {pid}) is stopped (a stop signal"});
}

// A store that stops its own process (SIGSTOP) once it has passed on the set of one key: a rank
// that stops at an exact point of a communicator's setup. Unless `beats` passes them on, it
// keeps the beats of Store::keep_alive from the store, as a store that cannot judge silence
// would: then only the stopped rank's host-mates can find it, which the tests of their look want
// (the store, judging its silence, would name it too, after twice TPF_HOST_LOST_S).
class StoppingStore : public bootstrap::ForwardingStore {
 public:
  enum class Beats { withheld, passed_on };
  // `before`: stops as it is asked to set `key`, which it does not set.
  StoppingStore(std::shared_ptr<Store> inner, std::string key, bool before,
                Beats beats = Beats::withheld)
      : ForwardingStore(std::move(inner)), key_(std::move(key)), before_(before), beats_(beats) {}
  void set(const std::string& key, const std::string& value) override {
    if (key == key_ && before_) ::raise(SIGSTOP);
    ForwardingStore::set(key, value);
    if (key == key_ && !before_) ::raise(SIGSTOP);
  }
  std::shared_ptr<void> keep_alive(std::chrono::milliseconds silence_limit) override {
    if (beats_ == Beats::withheld) return nullptr;
    return ForwardingStore::keep_alive(silence_limit);
  }

 private:
  std::string key_;
  bool before_;
  Beats beats_;
};

// Where a rank stops in a communicator's creation: rank `victim` of `hosts.size()` (each rank's
// host key, or 3 ranks of this host where empty) stops as it sets `key` (before setting it with
// `before`), its beats withheld from the store or passed on.
struct StopInCreation {
  std::vector<std::string> hosts;
  int victim;
  std::string key;
  bool before;
  StoppingStore::Beats beats = StoppingStore::Beats::withheld;
};

// Runs such a creation with TPF_HOST_LOST_S=1 and a 60 s setup deadline: every other rank's
// creation must fail (`lost`), and so must a creation after it (`told`), which `check` looks at
// with the victim's pid. The last of them ends the victim; only it may have been killed, and the
// segment it held (an orphan once it is ended) is removed by the test's sweep, as the next setup's
// would.
void expect_a_creation_stopped(
    const StopInCreation& stop,
    const std::function<void(const Error& lost, const Error& told, pid_t stopped)>& check) {
  const std::string job = testing::unique_job_name();
  const int ranks = stop.hosts.empty() ? 3 : static_cast<int>(stop.hosts.size());
  SharedBlock shared;  // [0]: survivors done; [1]: the victim's pid
  testing::RunOptions run = options(60s);
  run.job_name = job;
  const auto outcomes = testing::run_ranks_raw(
      ranks,
      [&](const RankContext& ctx) {
        ::setenv("TPF_HOST_LOST_S", "1", 1);
        if (!stop.hosts.empty()) ::setenv("TPF_NODE_ID", stop.hosts[ctx.rank].c_str(), 1);
        auto store = testing::connect_to_store(ctx, ctx.rank, 10s);
        if (ctx.rank == stop.victim) {
          shared.counter(1).store(::getpid());
          Communicator::create(
              ctx.rank, ctx.size,
              std::make_shared<StoppingStore>(store, stop.key, stop.before, stop.beats), "world",
              ctx.comm_options);
          ::_exit(3);  // not reached: ended while stopped
        }
        const Error lost = expect_error("a creation with a stopped rank", [&] {
          Communicator::create(ctx.rank, ctx.size, store, "world", ctx.comm_options);
        });
        const Error told = expect_error("a creation after the loss", [&] {
          Communicator::create(ctx.rank, ctx.size, store, "again", ctx.comm_options);
        });
        const auto stopped = static_cast<pid_t>(shared.counter(1).load());
        check(lost, told, stopped);
        if (shared.counter(0).fetch_add(1) + 1 == ranks - 1) ::kill(stopped, SIGKILL);
      },
      run);
  testing::expect_only_victims_killed(outcomes, {stop.victim});
  transport::remove_orphan_segments(transport::shm_job_prefix(job));
  testing::expect_no_segments_of(job);
}

// Rank `victim` (of 3 on this host) stops in the creation as it sets `key` (before setting it
// with `before`): the others, waiting for it, find it stopped for TPF_HOST_LOST_S and fail naming
// it (timeout), far before the setup's 60 s deadline (which would say "did not happen within"),
// or hear it from the store, which the first to find it told (peer_died, quoting the finder: seen
// under ASan in CI); and the store names the loss to a creation that follows.
void expect_a_creation_to_find_rank_stopped_at(int victim, const std::string& key, bool before) {
  expect_a_creation_stopped({{}, victim, key, before}, [&](const Error& lost, const Error& told,
                                                           pid_t stopped) {
    TPF_CHILD_CHECK(lost.code() == ErrorCode::timeout || lost.code() == ErrorCode::peer_died,
                    lost.what());
    for (const std::string& naming : {std::string("creating the communicator, waiting for"),
                                      "rank " + std::to_string(victim) + " (pid " +
                                          std::to_string(stopped) + ") has been stopped for "}) {
      TPF_CHILD_CHECK(std::string(lost.what()).find(naming) != std::string::npos, lost.what());
    }
    TPF_CHILD_CHECK(told.code() == ErrorCode::peer_died, told.what());
    TPF_CHILD_CHECK(std::string(told.what()).find("has been stopped for") != std::string::npos,
                    told.what());
  });
}

// Once it has published its segment, the others wait for it to map theirs.
TEST(StoppedPeer, ACreationWaitingOnAStoppedRankFindsItLost) {
  expect_a_creation_to_find_rank_stopped_at(2, "world/0/rank/2", /*before=*/false);
}

// Before it publishes its segment, the others know its pid from its host's entry (FabricConfig::
// pids): until 2026-12-07 they learned it from the segment's entry only, and waited out the
// setup's deadline.
TEST(StoppedPeer, ARankStoppedBeforePublishingItsSegmentIsFoundLostAllTheSame) {
  expect_a_creation_to_find_rank_stopped_at(2, "world/0/rank/2", /*before=*/true);
}

// Rank 0 stops before it publishes the list of every rank's host, which the others wait for
// before anything else: they know its pid from its own entry, which it publishes first, and find
// it lost. Until 2026-12-07 nobody looked at rank 0 then: the others waited out the setup's
// deadline.
TEST(StoppedPeer, ARankWaitingForRank0sListOfHostsFindsItLost) {
  expect_a_creation_to_find_rank_stopped_at(0, "world/0/hosts", /*before=*/true);
}

// A communicator across hosts leaves a stopped rank to its heartbeat, which starts only once it
// is made: until then the stopped rank's host-mates look, as on one host. Rank 2 stops before it
// publishes its segment on host b (local rank 1 there): rank 1, its host-mate, finds it in the
// creation, and rank 0 (host a), whose creation may be done by then (it waits for no segment of
// host b), fails at its first call, hearing it from rank 1 or finding it by its heartbeat. Until
// 2026-12-07 nobody looked during the creation: rank 1 waited out the setup's deadline.
TEST(StoppedPeer, ACreationAcrossHostsFindsAStoppedRankThroughItsHostMate) {
  const std::string job = testing::unique_job_name();
  SharedBlock shared;  // [0]: survivors done; [1]: rank 2's pid
  testing::RunOptions run = options(60s);
  run.job_name = job;
  const std::vector<std::string> hosts = {"host-a", "host-b", "host-b"};
  const auto outcomes = testing::run_ranks_raw(
      3,
      [&](const RankContext& ctx) {
        ::setenv("TPF_HOST_LOST_S", "1", 1);
        ::setenv("TPF_NODE_ID", hosts[ctx.rank].c_str(), 1);
        auto store = testing::connect_to_store(ctx, ctx.rank, 10s);
        if (ctx.rank == 2) {
          shared.counter(1).store(::getpid());
          Communicator::create(
              ctx.rank, ctx.size,
              std::make_shared<StoppingStore>(store, "world/0/host1/rank/1", /*before=*/true),
              "world", ctx.comm_options);
          ::_exit(3);  // not reached: ended while stopped
        }
        const Error lost = expect_error("a creation with a stopped rank, or its first call", [&] {
          Communicator comm =
              Communicator::create(ctx.rank, ctx.size, store, "world", ctx.comm_options);
          comm.barrier();
        });
        const auto stopped = static_cast<pid_t>(shared.counter(1).load());
        const std::string what = lost.what();
        if (ctx.rank == 1) {
          TPF_CHILD_CHECK(lost.code() == ErrorCode::timeout, what);
          for (const std::string& naming :
               {std::string("creating the communicator, waiting for"),
                "rank 2 (pid " + std::to_string(stopped) + ") has been stopped for "}) {
            TPF_CHILD_CHECK(what.find(naming) != std::string::npos, what);
          }
        } else {
          TPF_CHILD_CHECK(what.find("rank 2") != std::string::npos &&
                              (what.find("has been stopped for") != std::string::npos ||
                               what.find("has sent no heartbeat") != std::string::npos),
                          what);
        }
        if (shared.counter(0).fetch_add(1) + 1 == 2) ::kill(stopped, SIGKILL);
      },
      run);
  testing::expect_only_victims_killed(outcomes, {2});
  transport::remove_orphan_segments(transport::shm_job_prefix(job));
  testing::expect_no_segments_of(job);
}

// Across hosts, a rank stopped while the communicator is made, with no host-mate to see it (alone
// on its host, or a host-mate not waiting on it), is found by the job's store: its beats
// (Store::keep_alive) stop, and after twice TPF_HOST_LOST_S of silence the store takes it for lost,
// which ends every wait on it, naming it (peer_died), far before the setup's 60 s deadline
// (which would say "did not ... within"). `hosts`: each rank's host; rank `victim` stops as it
// sets `key` (before setting it with `before`). A creation that follows is told the same. Until
// 2026-12-07 nobody found such a rank before the deadline.
void expect_the_store_to_find_rank_stopped_at(const std::vector<std::string>& hosts, int victim,
                                              const std::string& key, bool before) {
  expect_a_creation_stopped(
      {hosts, victim, key, before, StoppingStore::Beats::passed_on},
      [&](const Error& lost, const Error& told, pid_t stopped) {
        const std::string naming = "job rank " + std::to_string(victim) + " (pid " +
                                   std::to_string(stopped) +
                                   ") was found lost: the store heard no beat from it for 2.0 s "
                                   "while it made a communicator";
        TPF_CHILD_CHECK(lost.code() == ErrorCode::peer_died, lost.what());
        TPF_CHILD_CHECK(std::string(lost.what()).find(naming) != std::string::npos, lost.what());
        TPF_CHILD_CHECK(told.code() == ErrorCode::peer_died, told.what());
        TPF_CHILD_CHECK(std::string(told.what()).find(naming) != std::string::npos, told.what());
      });
}

// Rank 0, alone on its host, stops before it publishes the list of hosts the others wait for:
// they cannot look at its process (it is on another host).
TEST(StoppedPeer, Rank0StoppedOnAnotherHostBeforeItsListOfHostsIsFoundByTheStore) {
  expect_the_store_to_find_rank_stopped_at({"host-a", "host-b", "host-b"}, 0, "world/0/hosts",
                                           /*before=*/true);
}

// Rank 2, alone on its host, stops once it has published its network address, before it sends
// the others their first messages: they wait on the network, not on the store, and ask the store
// what it knows (comm/store_deaths.h).
TEST(StoppedPeer, ARankStoppedBeforeItsFirstMessagesIsFoundByTheStore) {
  expect_the_store_to_find_rank_stopped_at({"host-a", "host-b", "host-c"}, 2, "world/0/net/2",
                                           /*before=*/false);
}

// Rank 2, alone on its host, stops before it says it has made the communicator: rank 0 waits for
// its word, rank 1 for rank 0's.
TEST(StoppedPeer, ARankStoppedAtTheEndOfACreationAcrossHostsIsFoundByTheStore) {
  expect_the_store_to_find_rank_stopped_at({"host-a", "host-b", "host-c"}, 2, "world/0/made/2",
                                           /*before=*/true);
}

// Not a test by itself: the rank program StoppedPeerLauncher starts with tpf run (this binary,
// with --gtest_also_run_disabled_tests). Each rank is a host of its own (TPF_NODE_ID h<rank>), and
// rank 2 stops itself as it is about to say it has made the world (before it sets made/2); the
// others' creation fails (a 30 s setup deadline), and each says why and exits 3.
TEST(StoppedPeerRankProgram, DISABLED_Run) {
  if (std::getenv("TPF_STOP_PROGRAM") == nullptr || !launch_env_present())
    GTEST_SKIP() << "only run under tpf run by StoppedPeerLauncher";
  const LaunchEnv env = detect_launch_env();
  const int rank = env.rank;
  const int size = env.world_size;
  ::setenv("TPF_NODE_ID", ("h" + std::to_string(rank)).c_str(), 1);
  auto store =
      std::make_shared<TcpStoreClient>(env.store_host, env.store_port, env.secret, 10s, rank);
  CommOptions options;
  options.timeout = 30s;
  std::shared_ptr<Store> used = store;
  if (rank == 2) {
    used = std::make_shared<StoppingStore>(store, "world/0/made/2", /*before=*/true,
                                           StoppingStore::Beats::passed_on);
  }
  try {
    Communicator::create(rank, size, used, "world", options);
  } catch (const Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    std::_Exit(3);
  }
  std::_Exit(0);
}

// Under tpf run, which serves the store, the store's finding reaches the launcher too: it says
// which rank the store found lost and why, and ends it (SIGKILL, which a stopped process takes);
// the job fails (exit status 1) long before its setup deadline (30 s) or --job-timeout (60 s).
TEST(StoppedPeerLauncher, TpfRunEndsARankTheStoreFoundLostWhileTheWorldWasMade) {
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  const testing::Outcome r = testing::run_tpf(
      {"run", "-n", "3", "--job-timeout", "60", "--", self, "--gtest_also_run_disabled_tests",
       "--gtest_filter=StoppedPeerRankProgram.DISABLED_Run"},
      {"TPF_STOP_PROGRAM=1", "TPF_HOST_LOST_S=1"}, {}, 90s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const std::string lost =
      "the store heard no beat from it for 2.0 s while it made a communicator (a stopped "
      "process, or its host cut off)";
  EXPECT_TRUE(testing::contains(
      r.err, "rank 2 was found lost by the job's store (" + lost + "); ending it"))
      << r.err;
  for (const char* rank : {"rank 0: ", "rank 1: "}) {
    EXPECT_TRUE(testing::contains(r.err, std::string(rank) + "communicator 'world'")) << r.err;
  }
  EXPECT_TRUE(testing::contains(r.err, "job rank 2 (pid ")) << r.err;
  EXPECT_TRUE(testing::contains(r.err, ") was found lost: " + lost)) << r.err;
}

}  // namespace
}  // namespace tpf
