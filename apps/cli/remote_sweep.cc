#include "cli/remote_sweep.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <exception>
#include <map>
#include <set>

#include "cli/process_util.h"
#include "cli/remote_commands.h"
#include "cli/remote_processes.h"

namespace tpf::cli {
namespace {

void report_sweep(const RemoteCommand& s, std::chrono::milliseconds deadline,
                  const std::string& job_id) {
  const std::string where = "/dev/shm on host '" + s.host + "'";
  if (!s.started) {
    report("warning: could not start the sweep of " + where);
  } else if (!s.answered) {
    report("warning: the sweep of " + where + " did not answer within " +
           std::to_string(deadline.count()) + " ms");
  } else if (!WIFEXITED(s.status) || WEXITSTATUS(s.status) != 0) {
    report("warning: the sweep of " + where + " failed (" + remote_exit_description(s.status) +
           ")");
  }
  const long removed = std::count(s.printed.begin(), s.printed.end(), '\n');
  if (removed > 0) {
    report("removed " + std::to_string(removed) + " leftover shared-memory segment(s) of job " +
           job_id + " from " + where);
  }
}

// Kills what the job left running, saying so host by host (leftovers_line).
void kill_leftovers(const std::vector<std::string>& remote_shell, const JobProcesses& left,
                    std::chrono::milliseconds deadline) {
  if (left.processes.empty()) return;
  std::map<std::string, std::vector<JobProcess>> by_host;
  for (const RemoteProcess& p : left.processes) by_host[p.host].push_back({p.pid, p.rank});
  for (const auto& [host, on_host] : by_host) {
    report(leftovers_line("on host '" + host + "'", on_host));
  }
  signal_remote_processes(remote_shell, left.processes, {SIGKILL}, deadline);
}

}  // namespace

void sweep_hosts(const std::vector<std::string>& remote_shell,
                 const std::vector<std::string>& host_of_rank, const std::string& job_id,
                 std::chrono::milliseconds deadline) {
  try {
    // The searches first, the sweeps after them: one batch.
    std::vector<RemoteCommand> commands;
    const std::set<std::string> hosts(host_of_rank.begin(), host_of_rank.end());
    for (const std::string& host : hosts) commands.push_back(job_process_search(host, job_id));
    for (const std::string& host : hosts) {
      RemoteCommand& sweep = commands.emplace_back();
      sweep.host = host;
      sweep.words = {"find",   "/dev/shm", "-maxdepth", "1", "-name", "tpf-*-" + job_id + "-*",
                     "-print", "-delete"};
    }
    run_remote_commands(remote_shell, commands, deadline);
    const auto sweeps = commands.begin() + static_cast<std::ptrdiff_t>(hosts.size());
    kill_leftovers(remote_shell,
                   job_processes_found({commands.begin(), sweeps}, host_of_rank, job_id, deadline),
                   deadline);
    for (auto s = sweeps; s != commands.end(); ++s) report_sweep(*s, deadline, job_id);
  } catch (const std::exception& e) {
    report(std::string("warning: the sweep of the job's hosts failed: ") + e.what());
  }
}

}  // namespace tpf::cli
