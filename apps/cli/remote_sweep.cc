#include "cli/remote_sweep.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <set>

#include "cli/process_util.h"

namespace tpf::cli {
namespace {

struct Sweep {
  std::string host;
  pid_t pid = -1;
  Fd output;  // find's -print: one line per removed segment
  std::string printed;
  Fd exited;              // a pidfd: readable once the shell has exited
  bool answered = false;  // the shell exited before the deadline
  int status = 0;
};

// Starts the sweep of one host with its stdout on a pipe; stdin from /dev/null (ssh would
// otherwise read the launcher's), stderr the launcher's (the shell's own errors stay visible).
void start(Sweep& sweep, const std::vector<std::string>& remote_shell, const std::string& job_id) {
  std::vector<std::string> words = remote_shell;
  words.push_back(sweep.host);
  for (const char* word : {"find", "/dev/shm", "-maxdepth", "1", "-name"}) words.push_back(word);
  words.push_back("tpf-*-" + job_id + "-*");
  words.push_back("-print");
  words.push_back("-delete");
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  Pipe pipe = make_pipe("the output of a /dev/shm sweep");
  const pid_t pid = ::fork();
  if (pid < 0) return;
  if (pid == 0) {
    ::dup2(pipe.write.get(), STDOUT_FILENO);
    if (int null = ::open("/dev/null", O_RDONLY); null >= 0) ::dup2(null, STDIN_FILENO);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  sweep.pid = pid;
  sweep.output = std::move(pipe.read);
  sweep.exited = Fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
}

// Reads every sweep's output and reaps each shell as it exits (its pidfd becomes readable),
// until all are done or the deadline passes; the shells still running then are killed.
void collect(std::vector<Sweep>& sweeps, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Sweep*> owners;
    for (Sweep& s : sweeps) {
      for (const Fd* fd : {&s.output, &s.exited}) {
        if (!fd->valid()) continue;
        fds.push_back({fd->get(), POLLIN, 0});
        owners.push_back(&s);
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (fds.empty() || left.count() <= 0) break;
    if (::poll(fds.data(), fds.size(), static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Sweep& s = *owners[i];
      if (fds[i].fd == s.exited.get()) {
        if (::waitpid(s.pid, &s.status, WNOHANG) == s.pid) s.answered = true;
        s.exited.reset();
        continue;
      }
      char buffer[4096];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0) {
        s.printed.append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        s.output.reset();
      }
    }
  }
  for (Sweep& s : sweeps) {
    if (s.pid < 0 || s.answered) continue;
    if (::waitpid(s.pid, &s.status, WNOHANG) == s.pid) {  // exited just now
      s.answered = true;
      continue;
    }
    ::kill(s.pid, SIGKILL);
    ::waitpid(s.pid, &s.status, 0);
  }
}

void report_sweep(const Sweep& s, std::chrono::milliseconds deadline, const std::string& job_id) {
  const std::string where = "/dev/shm on host '" + s.host + "'";
  if (s.pid < 0) {
    report("warning: could not start the sweep of " + where);
  } else if (!s.answered) {
    report("warning: the sweep of " + where + " did not answer within " +
           std::to_string(deadline.count()) + " ms");
  } else if (!WIFEXITED(s.status) || WEXITSTATUS(s.status) != 0) {
    report("warning: the sweep of " + where + " failed (" +
           (WIFEXITED(s.status) ? "exit code " + std::to_string(WEXITSTATUS(s.status))
                                : signal_name(WTERMSIG(s.status))) +
           ")");
  }
  const long removed = std::count(s.printed.begin(), s.printed.end(), '\n');
  if (removed > 0) {
    report("removed " + std::to_string(removed) + " leftover shared-memory segment(s) of job " +
           job_id + " from " + where);
  }
}

}  // namespace

void sweep_remote_shm(const std::vector<std::string>& remote_shell,
                      const std::vector<std::string>& hosts, const std::string& job_id,
                      std::chrono::milliseconds deadline) {
  try {
    std::vector<Sweep> sweeps;
    for (const std::string& host : std::set<std::string>(hosts.begin(), hosts.end())) {
      sweeps.emplace_back();
      sweeps.back().host = host;
    }
    for (Sweep& s : sweeps) start(s, remote_shell, job_id);
    const auto until = std::chrono::steady_clock::now() + deadline;
    collect(sweeps, until);
    for (const Sweep& s : sweeps) report_sweep(s, deadline, job_id);
  } catch (const std::exception& e) {
    report(std::string("warning: the sweep of /dev/shm on the job's hosts failed: ") + e.what());
  }
}

}  // namespace tpf::cli
