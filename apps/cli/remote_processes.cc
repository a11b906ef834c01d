#include "cli/remote_processes.h"

#include <signal.h>
#include <string.h>  // sigabbrev_np
#include <sys/wait.h>

#include <map>
#include <optional>
#include <sstream>

#include "cli/process_util.h"
#include "cli/remote_commands.h"

namespace tpf::cli {
namespace {

using ByHost = std::map<std::string, std::vector<const RemoteProcess*>>;

ByHost by_host(const std::vector<RemoteProcess>& processes) {
  ByHost hosts;
  for (const RemoteProcess& p : processes) hosts[p.host].push_back(&p);
  return hosts;
}

// "ranks 0,1": the ranks of `processes`, each once (a rank may have started processes of its
// own).
std::string rank_list(const std::vector<const RemoteProcess*>& processes) {
  std::set<int> ranks;
  for (const RemoteProcess* p : processes) ranks.insert(p->rank);
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (const int rank : ranks) {
    if (out.back() != ' ') out += ",";
    out += std::to_string(rank);
  }
  return out;
}

// "" when `command` (a search for the job's processes, a `cat` or `kill` of their pids) did what
// was asked; otherwise why not. Exit code 1 counts as done: those commands say so when one of the
// processes has just ended, and still do their work for the others.
std::string failure_of(const RemoteCommand& command, std::chrono::milliseconds deadline) {
  if (!command.started) return "the remote shell could not be started";
  if (!command.answered) return "no answer within " + std::to_string(deadline.count()) + " ms";
  if (WIFEXITED(command.status) && WEXITSTATUS(command.status) <= 1) return "";
  return remote_exit_description(command.status);
}

void warn(const std::string& line, RepeatedWarnings* warnings) {
  if (warnings != nullptr) {
    warnings->say(line);
  } else {
    report(line);
  }
}

}  // namespace

void RepeatedWarnings::say(const std::string& line) {
  if (said_.insert(line).second) report(line);
}

std::string describe(const RemoteProcess& process) {
  return "rank " + std::to_string(process.rank) + " (pid " + std::to_string(process.pid) +
         " on host '" + process.host + "')";
}

RemoteCommand job_process_search(const std::string& host, const std::string& job_id) {
  RemoteCommand search;
  search.host = host;
  search.words = job_environ_search(job_id);
  search.discard_stderr = true;  // find names each process that ended while it looked
  return search;
}

JobProcesses job_processes_found(const std::vector<RemoteCommand>& searches,
                                 const std::vector<std::string>& host_of_rank,
                                 const std::string& job_id, std::chrono::milliseconds deadline,
                                 RepeatedWarnings* warnings) {
  JobProcesses found;
  for (const RemoteCommand& search : searches) {
    if (!search.started || !search.answered) found.unanswered.insert(search.host);
    if (const std::string why = failure_of(search, deadline); !why.empty()) {
      warn("warning: cannot look for the job's processes on host '" + search.host + "' (" + why +
               ")",
           warnings);
      continue;
    }
    for (const JobProcess& p : parse_job_environ_search(search.printed, job_id)) {
      const bool its_own = p.rank >= 0 && static_cast<size_t>(p.rank) < host_of_rank.size() &&
                           host_of_rank[static_cast<size_t>(p.rank)] == search.host;
      if (its_own) found.processes.push_back({p.rank, search.host, p.pid});
    }
  }
  return found;
}

JobProcesses find_job_processes(const std::vector<std::string>& remote_shell,
                                const std::vector<std::string>& host_of_rank,
                                const std::string& job_id, std::chrono::milliseconds deadline,
                                RepeatedWarnings* warnings) {
  std::vector<RemoteCommand> searches;
  for (const std::string& host : std::set<std::string>(host_of_rank.begin(), host_of_rank.end())) {
    searches.push_back(job_process_search(host, job_id));
  }
  run_remote_commands(remote_shell, searches, deadline);
  return job_processes_found(searches, host_of_rank, job_id, deadline, warnings);
}

std::vector<RemoteProcess> stopped_remote_processes(const std::vector<std::string>& remote_shell,
                                                    const std::vector<RemoteProcess>& processes,
                                                    std::chrono::milliseconds deadline,
                                                    RepeatedWarnings* warnings) {
  const ByHost hosts = by_host(processes);
  std::vector<RemoteCommand> looks;
  for (const auto& [host, on_host] : hosts) {
    RemoteCommand& look = looks.emplace_back();
    look.host = host;
    look.words = {"cat"};
    for (const RemoteProcess* p : on_host) {
      look.words.push_back("/proc/" + std::to_string(p->pid) + "/stat");
    }
    look.discard_stderr = true;  // cat names each process that has ended
  }
  run_remote_commands(remote_shell, looks, deadline);
  std::vector<RemoteProcess> stopped;
  for (const RemoteCommand& look : looks) {
    const std::vector<const RemoteProcess*>& on_host = hosts.at(look.host);
    if (const std::string why = failure_of(look, deadline); !why.empty()) {
      warn("warning: cannot tell whether " + rank_list(on_host) + " on host '" + look.host +
               (on_host.size() == 1 ? "' is" : "' are") + " stopped (" + why + ")",
           warnings);
    }
    std::istringstream lines(look.printed);
    std::string line;
    while (std::getline(lines, line)) {
      const std::optional<ProcStat> stat = parse_proc_stat(line);
      if (!stat || !is_stopped_state(stat->state)) continue;
      for (const RemoteProcess* p : on_host) {
        if (p->pid == stat->pid) stopped.push_back(*p);
      }
    }
  }
  return stopped;
}

void signal_remote_processes(const std::vector<std::string>& remote_shell,
                             const std::vector<RemoteProcess>& processes,
                             const std::vector<int>& signals, std::chrono::milliseconds deadline) {
  const ByHost hosts = by_host(processes);
  std::vector<RemoteCommand> kills;
  std::vector<int> signal_of;
  for (const int sig : signals) {
    const char* name = ::sigabbrev_np(sig);
    for (const auto& [host, on_host] : hosts) {
      RemoteCommand& kill = kills.emplace_back();
      kill.host = host;
      kill.words = {"kill", "-s", name != nullptr ? name : std::to_string(sig)};
      for (const RemoteProcess* p : on_host) kill.words.push_back(std::to_string(p->pid));
      kill.discard_stderr = true;  // kill names each process that has ended
      signal_of.push_back(sig);
    }
  }
  run_remote_commands(remote_shell, kills, deadline);
  for (size_t i = 0; i < kills.size(); ++i) {
    if (const std::string why = failure_of(kills[i], deadline); !why.empty()) {
      report("warning: sending " + signal_name(signal_of[i]) + " to " +
             rank_list(hosts.at(kills[i].host)) + " on host '" + kills[i].host + "' failed (" +
             why + ")");
    }
  }
}

}  // namespace tpf::cli
