// The launcher's reading of /proc/PID/stat lines (apps/cli/process_util.h), which it also reads
// from other hosts through the remote shell (apps/cli/remote_processes.h).
#include "cli/process_util.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

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

}  // namespace
}  // namespace tpf::cli
