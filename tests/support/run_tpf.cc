#include "support/run_tpf.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#ifndef TPF_BINARY
#error "TPF_BINARY must name the tpf executable under test"
#endif

namespace tpf::testing {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

Outcome run_tpf(const std::vector<std::string>& args, const std::vector<std::string>& env,
                OnStdout on_stdout, std::chrono::milliseconds limit) {
  Outcome result;
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return result;
  }
  std::vector<std::string> argv_strings = {TPF_BINARY};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);

  Clock::time_point start = Clock::now();
  Clock::time_point deadline = start + limit;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
    execv(TPF_BINARY, argv.data());
    _exit(126);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  int fds[2] = {out_pipe[0], err_pipe[0]};
  std::string* sinks[2] = {&result.out, &result.err};

  auto remaining_ms = [&] {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return static_cast<int>(std::max<long long>(0, ms.count()));
  };
  while ((fds[0] >= 0 || fds[1] >= 0) && !result.timed_out) {
    pollfd pfds[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
    int rc = poll(pfds, 2, remaining_ms());
    if (rc == 0) {
      result.timed_out = true;
      break;
    }
    for (int k = 0; k < 2; ++k) {
      if (fds[k] < 0 || pfds[k].revents == 0) continue;
      char buf[4096];
      ssize_t n = read(fds[k], buf, sizeof(buf));
      if (n <= 0) {
        close(fds[k]);
        fds[k] = -1;
        continue;
      }
      sinks[k]->append(buf, static_cast<size_t>(n));
      if (k == 0 && on_stdout) on_stdout(pid, result.out);
    }
  }
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }

  // The output is closed; tpf exits right after. Wait for it on a pidfd, still bounded.
  // Through syscall(): glibc 2.36's <sys/pidfd.h> lacks extern "C" for C++ callers.
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0 && !result.timed_out) {
    pollfd pfd = {pidfd, POLLIN, 0};
    if (poll(&pfd, 1, remaining_ms()) == 0) result.timed_out = true;
  }
  if (pidfd >= 0) close(pidfd);
  if (result.timed_out) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

bool ends_soon(pid_t pid) {
  const int exited = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  bool ended = exited < 0 && errno == ESRCH;
  if (exited >= 0) {
    pollfd fd{exited, POLLIN, 0};
    ended = ::poll(&fd, 1, 30000) == 1;
    ::close(exited);
  }
  if (!ended) ::kill(pid, SIGKILL);
  return ended;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace tpf::testing
