// The launcher's reading of /proc/PID/stat lines and its search for a job's processes by their
// environment (apps/cli/process_util.h), which it also runs on other hosts through the remote
// shell (apps/cli/remote_processes.h).
#include "cli/process_util.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace tpf::cli {
namespace {

TEST(ProcStat, ReadsStateAndGroupAfterACommandNameWithBlanksAndParentheses) {
  const auto stat = parse_proc_stat("4321 (a) b (c)) T 1 4300 4300 0 -1 4194560 90 0 0 0");
  ASSERT_TRUE(stat.has_value());
  EXPECT_EQ(stat->pid, 4321);
  EXPECT_EQ(stat->state, 'T');
  EXPECT_EQ(stat->group, 4300);
  EXPECT_TRUE(is_stopped_state(stat->state));
}

TEST(ProcStat, RunningSleepingAndTracedStates) {
  EXPECT_FALSE(is_stopped_state(parse_proc_stat("7 (tpf) R 1 7 7")->state));
  EXPECT_FALSE(is_stopped_state(parse_proc_stat("7 (tpf) S 1 7 7")->state));
  EXPECT_FALSE(is_stopped_state(parse_proc_stat("7 (tpf) Z 1 7 7")->state));
  EXPECT_TRUE(is_stopped_state(parse_proc_stat("7 (gdb'd) t 1 7 7")->state));
}

TEST(ProcStat, LinesThatAreNotStatLinesAreRefused) {
  for (const char* bad : {"", "cat: /proc/9/stat: No such file or directory", "12 (x)",
                          "12 (x) T 1", "(x) T 1 2", "0 (x) T 1 2", "-5 (x) T 1 2"}) {
    EXPECT_FALSE(parse_proc_stat(bad).has_value()) << bad;
  }
}

// The same reading of this machine's /proc: a child stopped by SIGSTOP is found.
TEST(ProcStat, AStoppedChildIsAmongTheStoppedProcesses) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::raise(SIGSTOP);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, WUNTRACED), child);  // returns once it has stopped
  ASSERT_TRUE(WIFSTOPPED(status));
  EXPECT_TRUE(is_stopped(child));
  bool listed = false;
  for (const StoppedProcess& p : stopped_processes()) listed = listed || p.pid == child;
  EXPECT_TRUE(listed);
  ::kill(child, SIGKILL);
  ::waitpid(child, &status, 0);
  EXPECT_FALSE(is_stopped(child));
}

// Records as `grep -z -H` prints them, each ended by a NUL.
std::string grep_records(const std::vector<std::string>& records) {
  std::string out;
  for (const std::string& r : records) out += r + '\0';
  return out;
}

TEST(JobEnvironSearch, FindsTheJobsProcessesWithTheirRanks) {
  const std::string printed = grep_records({
      "/proc/40/environ:TPF_RANK=3",
      "/proc/40/environ:TPF_JOB_ID=0123abcd",
      "/proc/41/environ:TPF_JOB_ID=0123abcd",  // a rank's child without a rank of its own
      "/proc/7/environ:TPF_RANK=0",
      "/proc/7/environ:TPF_JOB_ID=0123abcd",
  });
  const std::vector<JobProcess> found = parse_job_environ_search(printed, "0123abcd");
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[0].pid, 7);
  EXPECT_EQ(found[0].rank, 0);
  EXPECT_EQ(found[1].pid, 40);
  EXPECT_EQ(found[1].rank, 3);
  EXPECT_EQ(found[2].pid, 41);
  EXPECT_EQ(found[2].rank, -1);
}

// grep matches substrings: only a whole entry naming this very job counts, and only a process's
// own /proc entry (not /proc/self, the search's own).
TEST(JobEnvironSearch, OtherJobsAndLookAlikesAreNotTheJobs) {
  const std::string printed = grep_records({
      "/proc/50/environ:TPF_JOB_ID=0123abcdef",        // another job whose id starts alike
      "/proc/51/environ:OLD_TPF_JOB_ID=0123abcd",      // not the variable
      "/proc/52/environ:X=TPF_JOB_ID=0123abcd",        // a value holding it
      "/proc/53/environ:TPF_RANK=2",                   // a rank of no job here
      "/proc/self/environ:TPF_JOB_ID=0123abcd",        // the search itself
      "/proc/54/task/54/environ:TPF_JOB_ID=0123abcd",  // not the search's depth
      "/proc/55x/environ:TPF_JOB_ID=0123abcd",
      "/proc/0/environ:TPF_JOB_ID=0123abcd",
      "/proc/56/environ",
      "garbage",
      "",
  });
  EXPECT_TRUE(parse_job_environ_search(printed, "0123abcd").empty());
  // A bad rank is no rank; the process is the job's all the same.
  const std::vector<JobProcess> found = parse_job_environ_search(
      grep_records({"/proc/60/environ:TPF_RANK=x1", "/proc/60/environ:TPF_JOB_ID=0123abcd"}),
      "0123abcd");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rank, -1);
}

// The search itself, run here as a remote shell that executes its words as given would run it
// (no shell between): it finds a child that carries the job's id, with its rank, and nothing
// else of this machine.
TEST(JobEnvironSearch, TheSearchFindsAProcessOfTheJobOnThisMachine) {
  const std::string job = "5e4rch" + std::to_string(::getpid());
  // The child: `cat` reading a pipe this test holds, so it stays until killed; `exec_done` reads
  // EOF once its exec has happened (both ends close on exec).
  int input[2], exec_done[2];
  ASSERT_EQ(::pipe2(input, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(exec_done, O_CLOEXEC), 0);
  const std::string job_entry = "TPF_JOB_ID=" + job;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::dup2(input[0], STDIN_FILENO);  // dup2 clears close-on-exec on the copy
    char* const argv[] = {const_cast<char*>("cat"), nullptr};
    char* const envp[] = {const_cast<char*>(job_entry.c_str()), const_cast<char*>("TPF_RANK=5"),
                          nullptr};
    ::execve("/bin/cat", argv, envp);
    ::_exit(127);
  }
  ::close(input[0]);
  ::close(exec_done[1]);
  char byte;
  ASSERT_EQ(::read(exec_done[0], &byte, 1), 0);
  ::close(exec_done[0]);

  const std::vector<std::string> words = job_environ_search(job);
  int out[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  const pid_t search = ::fork();
  ASSERT_GE(search, 0);
  if (search == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    std::vector<char*> argv;
    for (const std::string& w : words) argv.push_back(const_cast<char*>(w.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  std::string printed;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) printed.append(buf, size_t(n));
  ::close(out[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(search, &status, 0), search);
  ::close(input[1]);  // cat ends
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_LE(WEXITSTATUS(status), 1);  // 1: something ended while it looked, or was unreadable
  const std::vector<JobProcess> found = parse_job_environ_search(printed, job);
  ASSERT_EQ(found.size(), 1u) << printed;
  EXPECT_EQ(found[0].pid, child);
  EXPECT_EQ(found[0].rank, 5);
}

}  // namespace
}  // namespace tpf::cli
