// The launcher's side of the flight recorder (issue 15): a dump directory for the job, asking the
// ranks for their records (the dump signal) and waiting for them, and the one summary of where
// every rank is. The ranks' side is src/comm/flight_recorder.h.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "cli/process_util.h"

namespace tpf::cli {

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
  // Readable when a dump file changed (inotify), -1 when changes cannot be watched.
  int watch_fd() const { return watch_.get(); }
  void drain_watch();

  // Sends the dump signal to each process of the job that armed it and still belongs to one of
  // `groups` (the running ranks' process groups). Returns how many were asked.
  int request(const std::vector<pid_t>& groups);
  // Every process asked by the last request has finished its dump or is gone.
  bool request_done() const;

  size_t dump_count() const;
  // "communicator 'world' ...", one entry per line; empty if no rank dumped.
  std::vector<std::string> summary() const;
  const std::string& dir() const { return dir_; }

 private:
  std::vector<std::string> files() const;

  std::string job_id_;
  std::string dir_;  // empty: off
  bool owned_ = false;
  Fd watch_;
  std::map<pid_t, size_t> asked_;  // pid -> its finished signal dumps before the request
};

}  // namespace tpf::cli
