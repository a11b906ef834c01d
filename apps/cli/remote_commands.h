// Runs one command on each of several hosts through the remote shell that started the job's
// ranks there (`tpf run --hosts`), all at once and bounded: the /dev/shm sweep after a job
// (cli/remote_sweep.h), asking remote ranks for their flight recorders (cli/flight_dumps.h), and
// looking at and signalling their processes (cli/remote_processes.h).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace tpf::cli {

struct RemoteCommand {
  std::string host;
  std::vector<std::string> words;  // the command run there
  // Its stderr to /dev/null instead of the launcher's: for a command whose complaints are
  // expected (`kill` of a process that has just ended) and whose caller says what matters.
  bool discard_stderr = false;
  // Filled in by run_remote_commands:
  bool started = false;
  bool answered = false;  // the shell exited before the deadline
  int status = 0;         // waitpid's status, when answered
  std::string printed;    // its stdout
};

// Starts `REMOTE_SHELL... HOST WORDS...` for every command (stdin /dev/null, so that ssh does
// not read the launcher's; stderr the launcher's unless discarded, so the shell's own errors stay
// visible),
// collects their output and reaps them as they exit, and kills the ones still running at
// `deadline`. Never throws.
void run_remote_commands(const std::vector<std::string>& remote_shell,
                         std::vector<RemoteCommand>& commands,
                         std::chrono::milliseconds deadline) noexcept;

// "exit code N" or the signal's name, for a status run_remote_commands filled in.
std::string remote_exit_description(int status);

}  // namespace tpf::cli
