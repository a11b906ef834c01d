// Runs the real `tpf` binary (TPF_BINARY) as a user would and checks what it prints and returns.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/open_files.h"
#include "support/fake_remote_shell.h"
#include "support/run_tpf.h"
#include "support/scratch_dir.h"
#include "tpf/topology.h"

#ifndef TPF_BINARY
#error "TPF_BINARY must name the tpf executable under test"
#endif

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

using tpf::testing::contains;
using tpf::testing::ends_soon;
using tpf::testing::FakeRemoteShell;
using tpf::testing::lines_of;
using tpf::testing::OnStdout;
using tpf::testing::Outcome;
using tpf::testing::run_tpf;
using tpf::testing::ScratchDir;

TEST(Launcher, RanksGetTheirEnvironment) {
  Outcome r = run_tpf({"run", "-n", "3", "--timeout", "7.5", "--", "sh", "-c",
                       "echo rank=$TPF_RANK size=$TPF_WORLD_SIZE local=$TPF_LOCAL_RANK "
                       "lsize=$TPF_LOCAL_WORLD_SIZE store=$TPF_STORE_ADDR "
                       "secret=$TPF_JOB_SECRET job=$TPF_JOB_ID timeout=$TPF_TIMEOUT"});
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::set<int> ranks, local_ranks;
  std::set<std::string> secrets, jobs;
  for (const std::string& line : lines_of(r.out)) {
    std::map<std::string, std::string> fields;
    std::istringstream words(line);
    for (std::string word; words >> word;) {
      size_t eq = word.find('=');
      ASSERT_NE(eq, std::string::npos) << line;
      fields[word.substr(0, eq)] = word.substr(eq + 1);
    }
    ranks.insert(std::stoi(fields["rank"]));
    local_ranks.insert(std::stoi(fields["local"]));
    EXPECT_EQ(fields["size"], "3") << line;
    EXPECT_EQ(fields["lsize"], "3") << line;
    EXPECT_EQ(fields["store"].rfind("127.0.0.1:", 0), 0u) << line;
    EXPECT_GT(std::stoi(fields["store"].substr(10)), 0) << line;
    EXPECT_EQ(fields["secret"].size(), 32u) << "a 128-bit secret in hex: " << line;
    EXPECT_EQ(fields["secret"].find_first_not_of("0123456789abcdef"), std::string::npos) << line;
    EXPECT_FALSE(fields["job"].empty()) << line;
    EXPECT_EQ(fields["timeout"], "7.5") << line;
    secrets.insert(fields["secret"]);
    jobs.insert(fields["job"]);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(local_ranks, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(secrets.size(), 1u) << "all ranks share one secret";
  EXPECT_EQ(jobs.size(), 1u) << "all ranks share one job id";
}

// -n=3, as tpf run has always taken it (CLI11 alone would read the value as "=3").
TEST(Launcher, NprocTakesAnEqualsSign) {
  Outcome r = run_tpf({"run", "-n=3", "--", "sh", "-c", "echo size=$TPF_WORLD_SIZE"});
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines_of(r.out), std::vector<std::string>(3, "size=3")) << r.out;
}

// With --tag-output the launcher holds three descriptors per rank while they start (two output
// pipes and an exec-status pipe) and a store connection per rank: 24 ranks do not fit under a
// soft limit of 16 more than the test holds, so it raises its own (before 2026-12-05 it failed
// with "pipe2 ... Too many open files"; past ~250 ranks the usual 1,024 was too few).
TEST(Launcher, RaisesItsSoftOpenFileLimitForItsRanks) {
  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &before), 0);
  const uint64_t open = tpf::base::open_files().open;
  rlimit lowered = before;
  lowered.rlim_cur = static_cast<rlim_t>(open + 16);
  ASSERT_LT(lowered.rlim_cur, before.rlim_max);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lowered), 0);
  Outcome r = run_tpf({"run", "-n", "24", "--tag-output", "--", "sh", "-c", "echo started"});
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &before), 0);
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines_of(r.out).size(), 24u) << r.out;
}

// --hosts starts every rank through the remote shell as RSH HOST env VARIABLES... PROGRAM.
TEST(Launcher, HostsStartRanksThroughTheRemoteShellWithTheirHostsVariables) {
  FakeRemoteShell rsh;
  ASSERT_TRUE(rsh.ok());
  Outcome r = run_tpf({"run", "--hosts", "alpha:2,beta:1", "--rsh", rsh.path(), "--store-bind",
                       "127.0.0.1", "--timeout", "9", "--", "sh", "-c",
                       "echo rank=$TPF_RANK host=$AGENT_HOST local=$TPF_LOCAL_RANK "
                       "lsize=$TPF_LOCAL_WORLD_SIZE size=$TPF_WORLD_SIZE store=$TPF_STORE_ADDR "
                       "timeout=$TPF_TIMEOUT setting=$TPF_NODE_ID"},
                      {"TPF_NODE_ID=passed-on"});
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<int, std::string> lines;
  for (const std::string& line : lines_of(r.out)) lines[std::stoi(line.substr(5))] = line;
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_TRUE(contains(lines[0], "host=alpha local=0 lsize=2 size=3")) << lines[0];
  EXPECT_TRUE(contains(lines[1], "host=alpha local=1 lsize=2 size=3")) << lines[1];
  EXPECT_TRUE(contains(lines[2], "host=beta local=0 lsize=1 size=3")) << lines[2];
  for (const auto& [rank, line] : lines) {
    EXPECT_TRUE(contains(line, "store=127.0.0.1:")) << line;
    EXPECT_TRUE(contains(line, "timeout=9 setting=passed-on")) << line;
  }
}

// --rail-devices gives local rank l device l mod the count, in place of the launcher's own
// UCX_NET_DEVICES (one entry in the environment), on this machine and through the remote shell
// (local ranks counted per host); --rail-devices auto gives every rank TPF_RAIL_DEVICES=auto in
// place of the launcher's.
TEST(Launcher, RailDevicesGiveEachLocalRankTheDeviceOfItsRail) {
  FakeRemoteShell rsh;
  ASSERT_TRUE(rsh.ok());
  const std::string print =
      "echo rank=$TPF_RANK devices=$UCX_NET_DEVICES "
      "entries=$(env | grep -c '^UCX_NET_DEVICES=')";
  const std::vector<std::vector<std::string>> runs = {
      {"run", "-n", "3", "--rail-devices", "mlx5_0:1,mlx5_1:1", "--", "sh", "-c", print},
      {"run", "--hosts", "alpha:2,beta:1", "--rsh", rsh.path(), "--store-bind", "127.0.0.1",
       "--rail-devices", "mlx5_0:1,mlx5_1:1", "--", "sh", "-c", print}};
  const std::string want[2][3] = {
      {"devices=mlx5_0:1", "devices=mlx5_1:1", "devices=mlx5_0:1"},   // local ranks 0, 1, 2
      {"devices=mlx5_0:1", "devices=mlx5_1:1", "devices=mlx5_0:1"}};  // alpha 0, 1; beta 0
  for (size_t run = 0; run < runs.size(); ++run) {
    Outcome r = run_tpf(runs[run], {"UCX_NET_DEVICES=launchers-own"});
    ASSERT_FALSE(r.timed_out);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::map<int, std::string> lines;
    for (const std::string& line : lines_of(r.out)) lines[std::stoi(line.substr(5))] = line;
    ASSERT_EQ(lines.size(), 3u) << r.out;
    for (int rank = 0; rank < 3; ++rank) {
      EXPECT_TRUE(contains(lines[rank], want[run][rank] + " entries=1")) << lines[rank];
    }
  }
  // auto: every rank chooses for itself (TPF_RAIL_DEVICES=auto, in place of the launcher's list)
  // and keeps the launcher's UCX_NET_DEVICES, which that setting overrides.
  const std::string print_auto =
      "echo rank=$TPF_RANK rails=$TPF_RAIL_DEVICES entries=$(env | grep -c '^TPF_RAIL_DEVICES=')";
  for (const std::vector<std::string>& run :
       {std::vector<std::string>{"run", "-n", "2", "--rail-devices", "auto", "--", "sh", "-c",
                                 print_auto},
        std::vector<std::string>{"run", "--hosts", "alpha:1,beta:1", "--rsh", rsh.path(),
                                 "--store-bind", "127.0.0.1", "--rail-devices", "auto", "--", "sh",
                                 "-c", print_auto}}) {
    Outcome r = run_tpf(run, {"TPF_RAIL_DEVICES=eth0"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_EQ(lines_of(r.out).size(), 2u) << r.out;
    for (const std::string& line : lines_of(r.out)) {
      EXPECT_TRUE(contains(line, "rails=auto entries=1")) << line;
    }
  }
  // Without the option every rank keeps the launcher's.
  Outcome plain =
      run_tpf({"run", "-n", "2", "--", "sh", "-c", print}, {"UCX_NET_DEVICES=launchers-own"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  for (const std::string& line : lines_of(plain.out)) {
    EXPECT_TRUE(contains(line, "devices=launchers-own entries=1")) << line;
  }
}

// A host the remote shell cannot reach fails its rank with the shell's status; the others are
// stopped after the grace, as for any failed rank.
TEST(Launcher, AnUnreachableHostFailsItsRanks) {
  FakeRemoteShell rsh;
  ASSERT_TRUE(rsh.ok());
  Outcome r = run_tpf({"run", "--hosts", "up:1,down:1", "--rsh", rsh.path(), "--store-bind",
                       "127.0.0.1", "--", "sleep", "30"},
                      {"TPF_RUN_GRACE_S=0.2"});
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "fake-ssh: cannot reach down")) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 1 exited with code 255")) << r.err;
  // Its /dev/shm cannot be swept either, which is said, not hidden.
  EXPECT_TRUE(contains(r.err, "the sweep of /dev/shm on host 'down' failed (exit code 255)"))
      << r.err;
}

// After a job across hosts, the launcher sweeps each host's /dev/shm of the job's segments
// through the remote shell: what a rank left there (named for another uid: the ranks may run as
// another user on their hosts, out of reach of this machine's own sweep) is removed.
TEST(Launcher, HostsAreSweptOfTheJobsSharedMemoryThroughTheRemoteShell) {
  FakeRemoteShell rsh;
  ASSERT_TRUE(rsh.ok());
  Outcome r = run_tpf({"run", "--hosts", "alpha:2", "--rsh", rsh.path(), "--store-bind",
                       "127.0.0.1", "--", "sh", "-c",
                       "touch /dev/shm/tpf-99999-$TPF_JOB_ID-left-by-$TPF_RANK && "
                       "echo job=$TPF_JOB_ID"});
  const std::vector<std::string> lines = lines_of(r.out);
  ASSERT_FALSE(lines.empty()) << r.err;
  const std::string left = "/dev/shm/tpf-99999-" + lines[0].substr(4) + "-left-by-";
  const bool removed =
      ::access((left + "0").c_str(), F_OK) != 0 && ::access((left + "1").c_str(), F_OK) != 0;
  std::remove((left + "0").c_str());
  std::remove((left + "1").c_str());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(removed) << left << "* still there; stderr:\n" << r.err;
  EXPECT_TRUE(contains(r.err, "removed 2 leftover shared-memory segment(s) of job " +
                                  lines[0].substr(4) + " from /dev/shm on host 'alpha'"))
      << r.err;
}

TEST(Launcher, EachJobGetsAFreshSecretAndJobId) {
  std::vector<std::string> cmd = {
      "run", "-n", "1", "--", "sh", "-c", "echo $TPF_JOB_SECRET $TPF_JOB_ID"};
  Outcome a = run_tpf(cmd);
  Outcome b = run_tpf(cmd);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(a.out, b.out);
}

TEST(Launcher, TagOutputPrefixesEveryLineOfStdoutAndStderr) {
  Outcome r = run_tpf({"run", "-n", "2", "--tag-output", "--", "sh", "-c",
                       "echo out$TPF_RANK; echo err$TPF_RANK >&2; printf partial$TPF_RANK"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* want : {"[0] out0\n", "[1] out1\n", "[0] partial0\n", "[1] partial1\n"}) {
    EXPECT_TRUE(contains(r.out, want)) << want << " missing from:\n" << r.out;
  }
  EXPECT_TRUE(contains(r.err, "[0] err0\n")) << r.err;
  EXPECT_TRUE(contains(r.err, "[1] err1\n")) << r.err;
}

TEST(Launcher, TagOutputNeverMixesLines) {
  constexpr int kLines = 300;
  Outcome r = run_tpf({"run", "-n", "2", "--tag-output", "--", "sh", "-c",
                       "i=0; while [ $i -lt " + std::to_string(kLines) +
                           " ]; do echo rank$TPF_RANK-line$i-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; "
                           "i=$((i+1)); done"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<int, int> next_line;
  for (const std::string& line : lines_of(r.out)) {
    int tag = -1, rank = -1, index = -1, tail = 0;
    // A mixed line would not parse, or would carry text after the 30 x's.
    int got = std::sscanf(line.c_str(), "[%d] rank%d-line%d-%*[x]%n", &tag, &rank, &index, &tail);
    ASSERT_EQ(got, 3) << "mixed or untagged line: " << line;
    ASSERT_EQ(static_cast<size_t>(tail), line.size()) << "mixed line: " << line;
    ASSERT_EQ(line.size() - line.find("-x"), 31u) << "mixed line: " << line;
    ASSERT_EQ(tag, rank) << line;
    EXPECT_EQ(index, next_line[rank]++) << "lines of one rank out of order: " << line;
  }
  EXPECT_EQ(next_line[0], kLines);
  EXPECT_EQ(next_line[1], kLines);
}

TEST(Launcher, FailingRankIsNamedWithItsExitCode) {
  Outcome r =
      run_tpf({"run", "-n", "3", "--", "sh", "-c", "if [ $TPF_RANK = 1 ]; then exit 3; fi; exit 0"},
              {"TPF_RUN_GRACE_S=1"});
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "rank 1 exited with code 3")) << r.err;
  EXPECT_FALSE(contains(r.err, "rank 0")) << r.err;
}

TEST(Launcher, KilledRankIsNamedAndTheOthersAreStoppedAfterTheGrace) {
  Outcome r = run_tpf({"run", "-n", "3", "--", "sh", "-c",
                       "if [ $TPF_RANK = 1 ]; then kill -KILL $$; fi; exec sleep 30"},
                      {"TPF_RUN_GRACE_S=1"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "rank 1 was killed by signal SIGKILL (9)")) << r.err;
  EXPECT_TRUE(contains(r.err, "SIGTERM")) << r.err;
  EXPECT_GE(r.seconds, 0.9);  // the grace period was honoured...
  EXPECT_LT(r.seconds, 5.0);  // ...and the sleepers did not run their 30 s
}

TEST(Launcher, RanksThatIgnoreSigtermAreKilled) {
  Outcome r = run_tpf({"run", "-n", "2", "--", "sh", "-c",
                       "if [ $TPF_RANK = 1 ]; then exit 4; fi; trap '' TERM; sleep 30"},
                      {"TPF_RUN_GRACE_S=0.3"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "rank 1 exited with code 4")) << r.err;
  EXPECT_TRUE(contains(r.err, "sending SIGKILL")) << r.err;
  EXPECT_LT(r.seconds, 5.0);
}

// A rank stopped (SIGSTOP here; a debugger alike) once the others have ended would hold the job
// until --job-timeout: nobody waits on it to find it lost (transport/stopped_peers.h). tpf run
// finds it itself after TPF_HOST_LOST_S and ends it (cli/stopped_ranks.h).
TEST(Launcher, AStoppedRankNoRunningRankCouldFindIsFoundLostAndEnded) {
  const Outcome r =
      run_tpf({"run", "--job-timeout", "60", "-n", "3", "--", "sh", "-c",
               "if [ $TPF_RANK = 1 ]; then kill -STOP $$; fi; echo rank $TPF_RANK done"},
              {"TPF_HOST_LOST_S=1"}, {}, 90s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;  // a rank did not finish
  EXPECT_FALSE(contains(r.err, "--job-timeout")) << r.err;
  EXPECT_TRUE(contains(r.out, "rank 0 done")) << r.out;
  EXPECT_TRUE(contains(r.out, "rank 2 done")) << r.out;
  EXPECT_FALSE(contains(r.out, "rank 1 done")) << r.out;
  EXPECT_TRUE(contains(r.err, "tpf run: rank 1 (pid ")) << r.err;
  EXPECT_TRUE(contains(r.err, ") has been stopped for ")) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "(a stop signal, or a debugger holding it): found lost (TPF_HOST_LOST_S = "
                       "1.0 s); no running rank could find it: ending it"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "rank 1 was ended by SIGKILL (9) (found lost)")) << r.err;
}

// While a rank runs, a stopped one is left to it (it finds it lost if it waits on it); once it has
// ended, every stopped rank is found, here two (--keep-going: the first one ended does not stop
// the job before the other is found). Rank 3 ends at once and rank 0 sleeps past
// TPF_HOST_LOST_S: were the stopped ranks found while it ran, that would be said before its exit.
TEST(Launcher, StoppedRanksAreLeftToARankThatRunsAndFoundOnceItHasEnded) {
  const Outcome r =
      run_tpf({"run", "--keep-going", "--job-timeout", "60", "-n", "4", "--", "sh", "-c",
               "case $TPF_RANK in 0) sleep 2; exit 5 ;; 3) exit 0 ;; esac; kill -STOP $$; "
               "echo rank $TPF_RANK done"},
              {"TPF_HOST_LOST_S=1"}, {}, 90s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_FALSE(contains(r.err, "--job-timeout")) << r.err;
  EXPECT_FALSE(contains(r.out, " done")) << r.out;
  const size_t rank_0_exit = r.err.find("rank 0 exited with code 5");
  ASSERT_NE(rank_0_exit, std::string::npos) << r.err;
  for (const int rank : {1, 2}) {
    const std::string who = "rank " + std::to_string(rank);
    const size_t found = r.err.find("tpf run: " + who + " (pid ");
    ASSERT_NE(found, std::string::npos) << r.err;
    EXPECT_GT(found, rank_0_exit) << r.err;
    EXPECT_TRUE(contains(r.err, who + " was ended by SIGKILL (9) (found lost)")) << r.err;
  }
}

// The pid a rank wrote into `dir` as `name` (0 where it wrote none).
pid_t pid_written(const ScratchDir& dir, const std::string& name) {
  pid_t pid = 0;
  std::ifstream(dir / name) >> pid;
  return pid;
}

// Across hosts tpf run's children are the remote shells, and a rank runs on its host in a session
// of its own (as sshd starts it), out of their reach: tpf run looks at the ranks' processes there
// through the remote shell. Rank 1 stops once the others have ended; tpf run finds it lost after
// TPF_HOST_LOST_S, names its host and ends it there. Before, it held the job until --job-timeout.
TEST(Launcher, AcrossHostsAStoppedRankNoRunningRankCouldFindIsFoundLostAndEndedOnItsHost) {
  FakeRemoteShell rsh(FakeRemoteShell::Hosts::named_nodes, "", FakeRemoteShell::Session::own);
  ASSERT_TRUE(rsh.ok());
  ScratchDir pids;
  const Outcome r = run_tpf({"run", "--hosts", "a:1,b:1,c:1", "--rsh", rsh.path(), "--store-bind",
                             "127.0.0.1", "--job-timeout", "60", "--", "sh", "-c",
                             "echo $$ > " + pids.path() +
                                 "/rank$TPF_RANK; if [ $TPF_RANK = 1 ]; then kill -STOP $$; fi; "
                                 "echo rank $TPF_RANK done"},
                            {"TPF_HOST_LOST_S=1"}, {}, 90s);
  const pid_t stopped = pid_written(pids, "rank1");
  ASSERT_GT(stopped, 0) << r.err;
  EXPECT_TRUE(ends_soon(stopped)) << "rank 1 (pid " << stopped << ") outlived the job\n" << r.err;
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_FALSE(contains(r.err, "--job-timeout")) << r.err;
  EXPECT_TRUE(contains(r.out, "rank 0 done")) << r.out;
  EXPECT_TRUE(contains(r.out, "rank 2 done")) << r.out;
  EXPECT_TRUE(contains(r.err, "tpf run: rank 1 (pid " + std::to_string(stopped) +
                                  " on host 'b') has been stopped for "))
      << r.err;
  EXPECT_TRUE(contains(r.err,
                       "(a stop signal, or a debugger holding it): found lost (TPF_HOST_LOST_S = "
                       "1.0 s); no running rank could find it: ending it"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "rank 1 was ended by SIGKILL (9) (found lost)")) << r.err;
  EXPECT_FALSE(contains(r.err, "warning:")) << r.err;
}

// Where the watch cannot read the ranks' states on a host (here `cat` fails on every host), it
// says so once, however often it looks (every 50 ms here), and takes the host's ranks as running:
// the stopped rank 1 is not found lost, and the job runs until --job-timeout, which ends it.
TEST(Launcher, AcrossHostsAWatchThatCannotReadAHostSaysSoOnceAndTakesItsRanksAsRunning) {
  FakeRemoteShell rsh(FakeRemoteShell::Hosts::named_nodes, "", FakeRemoteShell::Session::own);
  ASSERT_TRUE(rsh.ok());
  ScratchDir pids, bin;
  {
    std::ofstream cat(bin / "cat");
    cat << "#!/bin/sh\necho 'cat refused' >&2\nexit 7\n";
  }
  ASSERT_EQ(::chmod((bin / "cat").c_str(), 0755), 0);
  const char* path = std::getenv("PATH");
  const Outcome r = run_tpf(
      {"run", "--hosts", "a:1,b:1,c:1", "--rsh", rsh.path(), "--store-bind", "127.0.0.1",
       "--job-timeout", "5", "--", "sh", "-c",
       "echo $$ > " + pids.path() + "/rank$TPF_RANK; if [ $TPF_RANK = 1 ]; then kill -STOP $$; fi"},
      {"TPF_HOST_LOST_S=0.5", "TPF_RUN_GRACE_S=0.5",
       "PATH=" + bin.path() + ":" + (path != nullptr ? path : "/usr/bin:/bin")},
      {}, 90s);
  const pid_t stopped = pid_written(pids, "rank1");
  ASSERT_GT(stopped, 0) << r.err;
  EXPECT_TRUE(ends_soon(stopped)) << "rank 1 (pid " << stopped << ") outlived the job\n" << r.err;
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 124) << r.err;
  const size_t timeout = r.err.find("the job ran past --job-timeout 5 s");
  ASSERT_NE(timeout, std::string::npos) << r.err;
  const std::string watched = r.err.substr(0, timeout);
  const std::string warning =
      "warning: cannot tell whether rank 1 on host 'b' is stopped (exit code 7)";
  const size_t first = watched.find(warning);
  EXPECT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(watched.find(warning, first + 1), std::string::npos) << r.err;
  EXPECT_FALSE(contains(r.err, "no running rank could find it")) << r.err;
}

// tpf run's commands on other hosts wait on the remote shell (seconds, for a host that cannot be
// reached), off its loop. Here the search for the job's processes that SIGUSR2 starts (before it
// asks the ranks for their flight recorders) is held on its host until the test releases it,
// and meanwhile the rank's output is passed on (--tag-output: through tpf run's loop), so the
// test sees the rank say that the search has begun and releases it. Before, the loop waited for
// the search: that output came only once the search had been ended at its deadline, unreleased.
TEST(Launcher, AcrossHostsTheOutputIsPassedOnWhileACommandWaitsOnAHost) {
  ScratchDir dir;
  ASSERT_EQ(::mkfifo((dir / "searching").c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo((dir / "release").c_str(), 0600), 0);
  const std::string rsh = dir / "rsh";
  {
    // The first `find` on a host (the search) says it has begun and waits to be released. It
    // opens the release fifo (for reading and writing: no wait) before it says so, so that the
    // test's release finds a reader for as long as the search waits.
    const std::string held = dir / "held", release = dir / "release";
    const std::string searching = dir / "searching", released = dir / "released";
    std::ofstream script(rsh);
    script << "#!/bin/sh\nhost=$1\nshift\n"
           << "if [ \"$1\" = find ] && mkdir " + held + " 2>/dev/null; then\n"
           << "  exec 3<> " + release + "\n"
           << "  echo begun > " + searching + "\n"
           << "  read line <&3 && : > " + released + "\n"
           << "  exec 3<&-\n"
           << "fi\nexec env AGENT_HOST=\"$host\" \"$@\"\n";
  }
  ASSERT_EQ(::chmod(rsh.c_str(), 0755), 0);
  bool asked = false;
  int release_error = -1;  // errno of the release, 0 once released
  auto on_stdout = [&](pid_t tpf, const std::string& out) {
    if (!asked && contains(out, "ready")) {
      asked = true;
      ::kill(tpf, SIGUSR2);
    }
    if (release_error < 0 && contains(out, "search begun")) {
      // The search still waits (it reads the fifo) unless tpf run ended it: then there is no
      // reader and the open fails (ENXIO).
      const int fd = ::open((dir / "release").c_str(), O_WRONLY | O_NONBLOCK);
      release_error = fd < 0 ? errno : 0;
      if (fd >= 0) {
        EXPECT_EQ(::write(fd, "go\n", 3), 3);
        ::close(fd);
      }
    }
  };
  const Outcome r = run_tpf(
      {"run", "--hosts", "a:1", "--rsh", rsh, "--store-bind", "127.0.0.1", "--tag-output", "--",
       "sh", "-c", "echo ready; read line < " + (dir / "searching") + "; echo search $line"},
      {}, on_stdout, 90s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(asked) << r.out;
  EXPECT_EQ(release_error, 0) << std::strerror(release_error) << "\n" << r.out << r.err;
  EXPECT_TRUE(std::ifstream(dir / "released").good()) << r.err;
  EXPECT_FALSE(contains(r.err, "warning:")) << r.err;
}

TEST(Launcher, SigtermIsForwardedToEveryRank) {
  bool sent = false;
  auto on_stdout = [&sent](pid_t tpf, const std::string& out) {
    // "ready" comes after the trap and the sleep are in place: once both ranks said it, the
    // signal finds every process it should.
    size_t ready = 0;
    for (size_t at = out.find("ready"); at != std::string::npos; at = out.find("ready", at + 1)) {
      ++ready;
    }
    if (ready == 2 && !sent) {
      sent = true;
      kill(tpf, SIGTERM);
    }
  };
  Outcome r = run_tpf({"run", "-n", "2", "--", "sh", "-c",
                       "trap 'echo got-TERM-$TPF_RANK; exit 0' TERM; sleep 30 & echo ready; wait"},
                      {"TPF_RUN_GRACE_S=2"}, on_stdout);
  ASSERT_TRUE(sent) << r.out << r.err;
  ASSERT_FALSE(r.timed_out);
  EXPECT_TRUE(contains(r.out, "got-TERM-0")) << r.out;
  EXPECT_TRUE(contains(r.out, "got-TERM-1")) << r.out;
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_LT(r.seconds, 5.0);
}

TEST(Launcher, BackgroundChildrenOfARankDoNotOutliveTheJob) {
  // The sleeps inherit the rank's stdout; if they survived, this would wait for them (20 s).
  Outcome plain = run_tpf({"run", "-n", "2", "--", "sh", "-c", "sleep 30 & echo started"});
  ASSERT_FALSE(plain.timed_out);
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_LT(plain.seconds, 5.0);
  Outcome tagged =
      run_tpf({"run", "-n", "2", "--tag-output", "--", "sh", "-c", "sleep 30 & echo started"});
  ASSERT_FALSE(tagged.timed_out);
  EXPECT_EQ(tagged.exit_code, 0) << tagged.err;
  EXPECT_TRUE(contains(tagged.out, "[1] started\n")) << tagged.out;
  EXPECT_LT(tagged.seconds, 5.0);
}

TEST(Launcher, UnknownProgramIsAClearError) {
  Outcome r = run_tpf({"run", "-n", "2", "--", "tpf-no-such-program-xyz"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_TRUE(contains(r.err, "tpf-no-such-program-xyz")) << r.err;
  EXPECT_TRUE(contains(r.err, "cannot find program")) << r.err;

  r = run_tpf({"run", "-n", "2", "--", "/nonexistent-dir/prog"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_TRUE(contains(r.err, "/nonexistent-dir/prog")) << r.err;
}

TEST(Launcher, ProgramThatFailsToExecIsReportedPerRank) {
  char path[] = "/tmp/tpf-launcher-test-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd,
                  "\x7f"
                  "garbage",
                  8),
            8);  // executable bit, but no known format
  close(fd);
  chmod(path, 0755);
  Outcome r = run_tpf({"run", "-n", "2", "--", path});
  unlink(path);
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_TRUE(contains(r.err, "rank 0 could not start program")) << r.err;
  EXPECT_TRUE(contains(r.err, path)) << r.err;
}

TEST(Launcher, BadCommandLinesAreUsageErrors) {
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  const Case cases[] = {
      {{"run", "--", "true"}, "missing -n"},
      {{"run", "-n", "0", "--", "true"}, "-n expects"},
      {{"run", "-n", "two", "--", "true"}, "'two'"},
      {{"run", "-n", "2"}, "missing the program"},
      {{"run", "-n", "2", "--bind", "socket", "true"}, "--bind expects"},
      {{"run", "-n", "2", "--timeout", "soon", "true"}, "--timeout expects"},
      {{"run", "-n", "2", "--frobnicate", "true"}, "unknown option"},
      {{"run", "--hosts", "a:0", "true"}, "HOST:N with N between 1 and"},
      {{"run", "--hosts", "a:2,:1", "true"}, "':1' names no host"},
      {{"run", "--hosts", "a:two", "true"}, "'a:two' should be HOST:N"},
      {{"run", "-n", "3", "--hosts", "a:2", "true"}, "-n 3 disagrees with --hosts"},
      {{"run", "--hosts", "a:1", "--bind", "socket", "true"}, "--bind expects"},
      {{"bind", "--policy", "socket", "--local-rank", "0", "--local-size", "1", "--", "true"},
       "--policy expects core, numa, gpu or none"},
      {{"bind", "--policy", "core", "--local-rank", "2", "--local-size", "2", "--", "true"},
       "--local-rank 2 is not in [0, --local-size 2)"},
      {{"bind", "--policy", "core", "--local-rank", "0", "--local-size", "1"},
       "missing the program"},
      {{"run", "-n", "2", "--rail-devices", "eth0,auto", "true"}, "mixes auto with device names"},
      {{"run", "-n", "2", "--rsh", "ssh", "true"}, "--rsh only applies with --hosts"},
      {{"run", "-n", "2", "--store-bind", "0.0.0.0", "true"}, "--store-bind only applies"},
      {{"run", "--hosts", "a:1", "--rsh", " ", "true"}, "--rsh names no command"},
      {{"run", "-n", "2", "--rail-devices", "eth0,,eth1", "true"},
       "'' in 'eth0,,eth1' is not a device name"},
      {{"frobnicate"}, "unknown command 'frobnicate'"},
      {{"frobnicate", "--help"}, "unknown command 'frobnicate'"},
      {{"--frobnicate"}, "unknown option '--frobnicate'"},
  };
  for (const Case& c : cases) {
    Outcome r = run_tpf(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.message << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, c.message)) << r.err;
  }
}

TEST(Launcher, VersionHelpAndTopo) {
  Outcome version = run_tpf({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out, "tpf " TPF_PROJECT_VERSION "\n");  // CMake's project(VERSION)

  Outcome help = run_tpf({"help"});
  EXPECT_EQ(help.exit_code, 0);
  for (const char* sub : {"run", "bench", "topo", "demo"}) {
    EXPECT_TRUE(contains(help.out, sub)) << help.out;
  }
  Outcome run_help = run_tpf({"run", "--help"});
  EXPECT_EQ(run_help.exit_code, 0);
  EXPECT_TRUE(contains(run_help.out, "--tag-output")) << run_help.out;

  Outcome topo = run_tpf({"topo"});
  EXPECT_EQ(topo.exit_code, 0) << topo.err;
  EXPECT_TRUE(contains(topo.out, "core")) << topo.out;
  // The network devices, and what TPF_RAIL_DEVICES=auto would choose from (this machine's).
  EXPECT_TRUE(contains(topo.out, "\nnetwork devices: ")) << topo.out;
  EXPECT_TRUE(contains(topo.out, "\nnearest to this process: ")) << topo.out;
  EXPECT_TRUE(contains(topo.out, "\nGPUs:")) << topo.out;
  // On a GPU server (an hwloc export, through hwloc's HWLOC_XMLFILE): each GPU with the HCAs on
  // its PCIe path (tests/fabric/gpus_test.cc has the server).
  Outcome gpu_server = run_tpf(
      {"topo"}, {"HWLOC_XMLFILE=" TPF_SOURCE_DIR "/tests/fabric/data/two-sockets-four-gpus.xml"});
  EXPECT_EQ(gpu_server.exit_code, 0) << gpu_server.err;
  EXPECT_TRUE(contains(gpu_server.out,
                       "\nGPUs:\n  0 = 0000:07:00.0 (cpus 0-3): nearest mlx5_0:1\n"
                       "  1 = 0000:12:00.0 (cpus 0-3): nearest mlx5_1:1\n"
                       "  2 = 0000:87:00.0 (cpus 4-7): nearest mlx5_2:1\n"
                       "  3 = 0000:92:00.0 (cpus 4-7): nearest mlx5_2:1, mlx5_3:1\n"))
      << gpu_server.out;
}

TEST(Launcher, LeftoverSharedMemoryOfTheJobIsRemoved) {
  std::string uid = std::to_string(getuid());
  std::string other = "/dev/shm/tpf-" + uid + "-launchertestotherjob-keep";
  int fd = open(other.c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  close(fd);
  // The rank leaves a segment named like the fabric's and dies as if killed during setup.
  Outcome r = run_tpf({"run", "-n", "1", "--", "sh", "-c",
                       "touch /dev/shm/tpf-$(id -u)-$TPF_JOB_ID-seg0; echo $TPF_JOB_ID; "
                       "kill -KILL $$"});
  std::string job = lines_of(r.out).empty() ? "" : lines_of(r.out)[0];
  ASSERT_FALSE(job.empty()) << r.err;
  EXPECT_EQ(r.exit_code, 1);
  struct stat st;
  EXPECT_NE(stat(("/dev/shm/tpf-" + uid + "-" + job + "-seg0").c_str(), &st), 0)
      << "the job's segment survived";
  EXPECT_EQ(stat(other.c_str(), &st), 0) << "another job's segment was removed";
  unlink(other.c_str());
}

// The kernel's list format ("0-1", "0,2") for the PUs of `machine`'s cores [first, first + count).
std::string cpu_list(const tpf::MachineTopology& machine, size_t first, size_t count) {
  std::vector<int> pus;
  for (size_t c = first; c < first + count && c < machine.cores.size(); ++c)
    pus.insert(pus.end(), machine.cores[c].pus.begin(), machine.cores[c].pus.end());
  std::sort(pus.begin(), pus.end());
  std::string list;
  for (size_t i = 0; i < pus.size();) {
    size_t j = i;
    while (j + 1 < pus.size() && pus[j + 1] == pus[j] + 1) ++j;
    if (i > 0) list += ',';
    list += std::to_string(pus[i]);
    if (j > i) {
      list += '-';
      list += std::to_string(pus[j]);
    }
    i = j + 1;
  }
  return list;
}

// With --hosts, --bind pins each host's ranks by their rank among that host's (`tpf bind` run
// through the remote shell): two ranks on alpha take a half of the cores each, beta's one rank
// all of them, as tpf run pins 2 and 1 ranks on one machine.
TEST(Launcher, BindWithHostsPinsEachHostsRanksAmongThatHostsRanks) {
  const tpf::MachineTopology machine = tpf::discover_topology();
  ASSERT_FALSE(machine.cores.empty());
  FakeRemoteShell rsh;
  ASSERT_TRUE(rsh.ok());
  Outcome r = run_tpf({"run", "--hosts", "alpha:2,beta:1", "--rsh", rsh.path(), "--store-bind",
                       "127.0.0.1", "--bind", "core", "--", "sh", "-c",
                       "echo rank=$TPF_RANK $(grep Cpus_allowed_list /proc/self/status)"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  if (contains(r.err, "warning")) GTEST_SKIP() << "binding not permitted here: " << r.err;
  const size_t cores = machine.cores.size(), half = std::max<size_t>(1, cores / 2);
  const std::string want[] = {cpu_list(machine, 0, half), cpu_list(machine, half % cores, half),
                              cpu_list(machine, 0, cores)};
  std::map<int, std::string> lines;
  for (const std::string& line : lines_of(r.out)) lines[std::stoi(line.substr(5))] = line;
  ASSERT_EQ(lines.size(), 3u) << r.out;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(contains(lines[rank], "Cpus_allowed_list: " + want[rank])) << lines[rank];
  }
}

// --bind gpu on a machine without GPUs (this one; tests/fabric/topology_test.cc checks the
// choice on a GPU server's hwloc export): each rank is told why it runs unbound, and runs.
TEST(Launcher, BindGpuWithoutGpusWarnsAndRunsUnbound) {
  Outcome r = run_tpf({"run", "-n", "2", "--bind", "gpu", "--", "true"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* rank : {"0", "1"}) {
    EXPECT_TRUE(contains(r.err, std::string("tpf run: rank ") + rank +
                                    ": warning: no GPU for local rank " + rank +
                                    " (no GPU on PCI); running unbound"))
        << r.err;
  }
  Outcome bound =
      run_tpf({"bind", "--policy", "gpu", "--local-rank", "1", "--local-size", "2", "--", "true"});
  EXPECT_EQ(bound.exit_code, 0) << bound.err;
  EXPECT_TRUE(contains(bound.err, "tpf bind: warning: no GPU for local rank 1")) << bound.err;
}

TEST(Launcher, BindCoreGivesALoneRankEveryCore) {
  tpf::MachineTopology machine = tpf::discover_topology();
  ASSERT_FALSE(machine.cores.empty());
  const std::string expected = cpu_list(machine, 0, machine.cores.size());
  Outcome r = run_tpf({"run", "-n", "1", "--bind", "core", "--", "sh", "-c",
                       "grep Cpus_allowed_list /proc/self/status"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  if (contains(r.err, "warning")) GTEST_SKIP() << "binding not permitted here: " << r.err;
  EXPECT_TRUE(contains(r.out, "Cpus_allowed_list:\t" + expected + "\n")) << r.out;
}

}  // namespace
