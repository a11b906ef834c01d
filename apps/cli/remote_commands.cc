#include "cli/remote_commands.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <exception>

#include "cli/process_util.h"

namespace tpf::cli {
namespace {

struct Running {
  RemoteCommand* command = nullptr;
  pid_t pid = -1;
  Fd output;
  Fd exited;  // a pidfd: readable once the shell has exited
};

void start(Running& run, const std::vector<std::string>& remote_shell) {
  std::vector<std::string> words = remote_shell;
  words.push_back(run.command->host);
  for (const std::string& word : run.command->words) words.push_back(word);
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  Pipe pipe = make_pipe("the output of a command on another host");
  const pid_t pid = ::fork();
  if (pid < 0) return;
  if (pid == 0) {
    ::dup2(pipe.write.get(), STDOUT_FILENO);
    if (int null = ::open("/dev/null", O_RDWR); null >= 0) {
      ::dup2(null, STDIN_FILENO);
      if (run.command->discard_stderr) ::dup2(null, STDERR_FILENO);
    }
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  run.pid = pid;
  run.command->started = true;
  run.output = std::move(pipe.read);
  run.exited = Fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
}

// Reads every command's output and reaps each shell as it exits (its pidfd becomes readable),
// until all are done or the deadline passes; the shells still running then are killed.
void collect(std::vector<Running>& runs, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Running*> owners;
    for (Running& r : runs) {
      for (const Fd* fd : {&r.output, &r.exited}) {
        if (!fd->valid()) continue;
        fds.push_back({fd->get(), POLLIN, 0});
        owners.push_back(&r);
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (fds.empty() || left.count() <= 0) break;
    if (::poll(fds.data(), fds.size(), static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Running& r = *owners[i];
      if (fds[i].fd == r.exited.get()) {
        if (::waitpid(r.pid, &r.command->status, WNOHANG) == r.pid) r.command->answered = true;
        r.exited.reset();
        continue;
      }
      char buffer[4096];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0) {
        r.command->printed.append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        r.output.reset();
      }
    }
  }
  for (Running& r : runs) {
    if (r.pid < 0 || r.command->answered) continue;
    if (::waitpid(r.pid, &r.command->status, WNOHANG) == r.pid) {  // exited just now
      r.command->answered = true;
      continue;
    }
    ::kill(r.pid, SIGKILL);
    ::waitpid(r.pid, &r.command->status, 0);
  }
}

}  // namespace

void run_remote_commands(const std::vector<std::string>& remote_shell,
                         std::vector<RemoteCommand>& commands,
                         std::chrono::milliseconds deadline) noexcept {
  try {
    std::vector<Running> runs(commands.size());
    for (size_t i = 0; i < commands.size(); ++i) {
      runs[i].command = &commands[i];
      start(runs[i], remote_shell);
    }
    collect(runs, std::chrono::steady_clock::now() + deadline);
  } catch (const std::exception& e) {
    report(std::string("warning: commands on the job's hosts failed: ") + e.what());
  }
}

std::string remote_exit_description(int status) {
  return WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status))
                           : signal_name(WTERMSIG(status));
}

}  // namespace tpf::cli
