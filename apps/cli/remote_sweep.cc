#include "cli/remote_sweep.h"

#include <sys/wait.h>

#include <algorithm>
#include <exception>
#include <set>

#include "cli/process_util.h"
#include "cli/remote_commands.h"

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

}  // namespace

void sweep_remote_shm(const std::vector<std::string>& remote_shell,
                      const std::vector<std::string>& hosts, const std::string& job_id,
                      std::chrono::milliseconds deadline) {
  try {
    std::vector<RemoteCommand> sweeps;
    for (const std::string& host : std::set<std::string>(hosts.begin(), hosts.end())) {
      RemoteCommand& sweep = sweeps.emplace_back();
      sweep.host = host;
      sweep.words = {"find",   "/dev/shm", "-maxdepth", "1", "-name", "tpf-*-" + job_id + "-*",
                     "-print", "-delete"};
    }
    run_remote_commands(remote_shell, sweeps, deadline);
    for (const RemoteCommand& s : sweeps) report_sweep(s, deadline, job_id);
  } catch (const std::exception& e) {
    report(std::string("warning: the sweep of /dev/shm on the job's hosts failed: ") + e.what());
  }
}

}  // namespace tpf::cli
