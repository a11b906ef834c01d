// The ranks the job's store was told are lost (a rank found them stopped or cut off the network
// and reported them, Store::report_lost) or found lost itself (their beats stopped while they made
// a communicator, Store::keep_alive), for `tpf run` to end: the ranks that found them have
// given them up (with --keep-going they go on without them: Communicator::shrink leaves them
// out), and a stopped one would otherwise hold the job until --job-timeout. The store's server
// tells of each on its own thread; the launcher's poll loop wakes on fd() and takes them.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "cli/process_util.h"
#include "tpf/store.h"

namespace tpf::cli {

class LostRanks {
 public:
  struct Report {
    int rank;      // the lost rank's job rank
    int found_by;  // the job rank whose heartbeat found it; -1: the store, from its silence
    std::string reason;
  };

  LostRanks();
  LostRanks(const LostRanks&) = delete;
  LostRanks& operator=(const LostRanks&) = delete;

  // For TcpStoreServer::on_rank_lost; this object must outlive the server.
  TcpStoreServer::LostRankHandler handler();
  // Readable while reports wait to be taken.
  int fd() const { return event_.get(); }
  // The reports since the last call, in their order.
  std::vector<Report> take();

 private:
  Fd event_;  // an eventfd
  std::mutex mu_;
  std::vector<Report> reports_;
};

}  // namespace tpf::cli
