// The launcher's side of the flight recorder (issue 15): a dump directory for the job, asking the
// ranks for their records (the dump signal) and waiting for them, and the one summary of where
// every rank is. The ranks' side is src/comm/flight_recorder.h.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli/process_util.h"
#include "cli/remote_processes.h"

namespace tpf {
class Store;
}

namespace tpf::cli {

// Where the ranks of a job across hosts run, for asking them for their flight recorders.
struct RemoteRanks {
  std::vector<std::string> remote_shell;  // tpf run's --rsh words
  std::vector<std::string> host_of_rank;  // the host each rank was started on
};

class FlightDumps {
 public:
  // Uses TPF_FLIGHT_RECORDER_DIR if the user set it (and leaves it alone); otherwise makes a
  // private directory for the job, which the ranks get through their environment and which is
  // removed at the end unless a rank dumped into it. A directory that cannot be made turns the
  // feature off with a warning: the job still runs.
  explicit FlightDumps(std::string job_id);
  ~FlightDumps();
  FlightDumps(const FlightDumps&) = delete;
  FlightDumps& operator=(const FlightDumps&) = delete;

  // "TPF_FLIGHT_RECORDER_DIR=..." for the ranks' environment, or "" when they inherit the user's.
  std::string env_entry() const;
  // Ranks on other hosts (tpf run --hosts), whose machines do not have this directory, put their
  // dumps into the job's store (comm/flight_store.h), which `store` reads (any of the job's
  // `world_size` ranks may); every call below first copies what they stored into files of this
  // directory, so the summary and the files left for the user cover every host. Dump requests
  // reach them through the remote shell (`kill -SIGNAL PID...` on their host; `remote` is empty
  // for a job on this machine).
  void read_store(std::unique_ptr<Store> store, int world_size, RemoteRanks remote);
  bool reads_store() const { return store_ != nullptr; }
  // "TPF_FLIGHT_RECORDER_STORE=1" for remote ranks' environment, or "" when dumps are off.
  std::string remote_env_entry() const;
  // Readable when a dump file changed (inotify), -1 when changes cannot be watched.
  int watch_fd() const { return watch_.get(); }
  void drain_watch();

  // The processes on other hosts that armed their flight recorders, of the ranks in
  // `running_ranks` (empty for a job on this machine): the only pids the launcher learns there.
  std::vector<RemoteProcess> remote_processes(const std::vector<int>& running_ranks);
  // The dump signal for processes on other hosts: one `kill -SIGNAL PID...` per host and
  // signal, which wait on the remote shell, so the launcher sends them off its loop
  // (cli/remote_worker.h) and hands them back to remote_requests_sent.
  struct RemoteRequests {
    std::vector<std::string> remote_shell;
    std::vector<RemoteCommand> kills;
    int generation = 0;  // which request they belong to
    void send();
  };
  // Sends the dump signal to each process of the job that armed it and still belongs to one of
  // `groups` (the running ranks' process groups); on other hosts, to each whose rank is in
  // `running_ranks` and which is not in `stopped_remote`, through `remote` (empty when there
  // are none). Returns how many were asked.
  int request(const std::vector<pid_t>& groups, const std::vector<int>& running_ranks,
              const std::vector<RemoteProcess>& stopped_remote, RemoteRequests& remote);
  // Says which hosts `sent` could not ask, and stops waiting for their processes' dumps.
  void remote_requests_sent(const RemoteRequests& sent);
  // Every process asked by the last request has finished its dump or is gone (on other hosts:
  // its rank's remote shell has exited, which the launcher says in `running_ranks`).
  bool request_done(const std::vector<int>& running_ranks);

  size_t dump_count();
  // "communicator 'world' ...", one entry per line; empty if no rank dumped. `ended_lost`: the
  // ranks the launcher found lost and ended (detail::summarize_flight_dumps).
  std::vector<std::string> summary(const std::set<int>& ended_lost);
  const std::string& dir() const { return dir_; }

 private:
  // One process that was asked for a dump: its dumps' file, and how many signal dumps it had
  // finished before.
  struct Asked {
    std::string file;
    pid_t pid = 0;
    int remote_rank = -1;  // -1: a process on this machine
    size_t finished_before = 0;
  };
  std::vector<std::string> files() const;
  size_t dumps_in_files() const;  // without copying from the store first
  std::string store_copy_file(int rank) const;
  void copy_from_store();

  std::string job_id_;
  std::string dir_;  // empty: off
  bool owned_ = false;
  Fd watch_;
  std::vector<Asked> asked_;
  int generation_ = 0;  // of the last request
  // Dumps through the store (read_store):
  std::unique_ptr<Store> store_;
  int world_size_ = 0;
  RemoteRanks remote_;
  std::vector<int64_t> copied_;            // per rank, its texts copied so far
  std::map<std::string, int> copy_files_;  // the files they were copied into -> their rank
  int64_t seen_total_ = 0;                 // the store's count of texts at the last copy
};

}  // namespace tpf::cli
