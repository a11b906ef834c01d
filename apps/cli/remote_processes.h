// The processes of a job's ranks on other hosts (`tpf run --hosts`). The launcher's children
// there are the remote shells (ssh), and a shell's end does not end what it started: a stopped
// rank, or one that ignores its lost output, would outlive the job. So the launcher finds those
// processes through the remote shell by the job's id in their environment (cli/process_util.h:
// a rank that has not made a communicator yet, and what a rank started, too), beside the pids
// their flight recorders gave (cli/flight_dumps.h), and looks at and signals them there.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "cli/remote_commands.h"

namespace tpf::cli {

struct RemoteProcess {
  int rank = -1;
  std::string host;
  pid_t pid = 0;
};

// "rank 2 (pid 1234 on host 'c')".
std::string describe(const RemoteProcess& process);

// What the searches and looks below failed to do is said at once, or, through a RepeatedWarnings
// (for a caller that repeats them: the stopped-rank watch looks every second), each warning once.
class RepeatedWarnings {
 public:
  void say(const std::string& line);

 private:
  std::set<std::string> said_;
};

// The processes of job `job_id` on its hosts, `host_of_rank` naming each rank's: one search
// (job_environ_search) per host, all hosts at once, within `deadline`. A host keeps the processes
// of its own ranks (and what they started), so that hosts sharing one process table (network
// namespaces of one machine, as emulated hosts are) do not each claim all of them; a process
// without a rank is left out. A host whose search fails is said; `unanswered` holds those that
// gave no answer at all (cannot be reached), which the caller spares the commands that would wait
// as long again.
struct JobProcesses {
  std::vector<RemoteProcess> processes;
  std::set<std::string> unanswered;
};
JobProcesses find_job_processes(const std::vector<std::string>& remote_shell,
                                const std::vector<std::string>& host_of_rank,
                                const std::string& job_id, std::chrono::milliseconds deadline,
                                RepeatedWarnings* warnings = nullptr);
// find_job_processes in halves, for a caller that runs the searches beside commands of its own
// (cli/remote_sweep.h): one host's search, and what the searches found once they ran.
RemoteCommand job_process_search(const std::string& host, const std::string& job_id);
JobProcesses job_processes_found(const std::vector<RemoteCommand>& searches,
                                 const std::vector<std::string>& host_of_rank,
                                 const std::string& job_id, std::chrono::milliseconds deadline,
                                 RepeatedWarnings* warnings = nullptr);

// Those of `processes` that are stopped (SIGSTOP, ^Z, a debugger) on their hosts: one `cat
// /proc/PID/stat...` per host, all hosts at once, within `deadline`. A host that does not answer
// is said, and its processes are taken as running.
std::vector<RemoteProcess> stopped_remote_processes(const std::vector<std::string>& remote_shell,
                                                    const std::vector<RemoteProcess>& processes,
                                                    std::chrono::milliseconds deadline,
                                                    RepeatedWarnings* warnings = nullptr);

// Sends each of `signals` to `processes` on their hosts: `kill -s NAME PID...`, one command per
// host and signal, all at once, within `deadline`. A process that has ended already is no
// failure (kill's exit code 1); a host whose command fails otherwise, or does not answer, is said.
void signal_remote_processes(const std::vector<std::string>& remote_shell,
                             const std::vector<RemoteProcess>& processes,
                             const std::vector<int>& signals, std::chrono::milliseconds deadline);

}  // namespace tpf::cli
