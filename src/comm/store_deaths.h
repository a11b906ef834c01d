// While a communicator is made across hosts, no heartbeat watches its ranks yet (it starts once
// the communicator is made: comm/heartbeat.h), and a rank stopped then (a stop signal, a debugger,
// its host cut off) would hold the others until the setup's deadline, up to 120 s. So every rank
// keeps the job's store hearing from it while it makes a communicator (Store::keep_alive), and a
// store that can judge silence takes one whose beats stop for lost for good: the waits on the store
// then end naming it. Waits that are not on the store, the network's first exchange of messages,
// ask it through this: a peer the store holds dead or lost, in the store's words.
#pragma once

#include <chrono>
#include <optional>
#include <set>
#include <string>

#include "tpf/store.h"

namespace tpf::detail {

// The silence after which the store takes a rank that makes a communicator for lost: twice
// TPF_HOST_LOST_S (`host_lost_after`), so that a host-mate, which sees the process's state, names
// it first (transport/stopped_peers.h), as before the store judged.
inline std::chrono::milliseconds store_silence_limit(std::chrono::milliseconds host_lost_after) {
  return 2 * host_lost_after;
}

class StoreDeaths {
 public:
  // Asks `store` at most every `look_every` (one call), and once more for a rank it holds dead
  // (its account of the death).
  StoreDeaths(Store& store, std::chrono::milliseconds look_every)
      : store_(store), look_every_(look_every) {}

  // What the store says of job rank `job_rank`'s death or loss, if it holds one.
  std::optional<std::string> dead(int job_rank);

 private:
  using Clock = std::chrono::steady_clock;
  Store& store_;
  std::chrono::milliseconds look_every_;
  Clock::time_point next_look_{};
  std::set<int> dead_;
};

}  // namespace tpf::detail
