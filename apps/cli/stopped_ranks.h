// `tpf run`'s own watch for a rank that stays stopped (SIGSTOP, a debugger holding it) when no
// rank is left running to find it lost: on this machine, or, with --hosts, on the rank's host
// (looked at through the remote shell). The ranks find a stopped peer lost themselves, but only
// while they wait on it (transport/stopped_peers.h); once every other rank has ended, a stopped one
// would hold the job until --job-timeout, or for ever. So while some rank has ended and every rank
// still running is stopped, a rank seen stopped for TPF_HOST_LOST_S is found lost by the launcher,
// by the ranks' rule (the time counts from the first look that saw it stopped; a look that sees it
// run starts it again) and in their words. A job whose ranks are all stopped at once and none has
// ended (a job paused as a whole) is left alone, as are ranks that others still wait on: they are
// the waiting ranks' to find.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "transport/stopped_peers.h"

namespace tpf::cli {

class StoppedRanks {
 public:
  using Clock = transport::StoppedPeers::Clock;

  // One look at a running rank: whether a process of it is stopped, and which.
  struct Look {
    int rank = 0;
    bool stopped = false;
    pid_t pid = -1;    // the stopped process (a rank started through a shell may be its child)
    std::string host;  // where it runs (tpf run --hosts); empty: on this machine
  };
  struct Found {
    int rank = 0;
    // "rank 2 (pid 4242) has been stopped for 10.0 s (...): found lost (...)", with "on host
    // 'c'" after the pid where the look named a host.
    std::string text;
  };

  // `ranks`: the job's. `lost_after` zero: never finds one lost.
  StoppedRanks(int ranks, std::chrono::milliseconds lost_after);

  // The watch begins at `now` (a rank has ended): its first look is due one look's interval
  // (transport::StoppedPeers::look_every) later, so that ranks ending together, as a job's do
  // when it finishes, are not looked at (across hosts a look is two rounds of remote commands).
  // Later calls change nothing.
  void begin(Clock::time_point now);
  // Whether a look is due at `now` (the next is due look_every after the last); none before
  // begin.
  bool look_due(Clock::time_point now) const;
  // When the next look is due; nullopt before begin, and when this never finds one.
  std::optional<Clock::time_point> next_look() const;
  // Takes one look at every running rank (`running`), made at `now`, and returns the ranks found
  // lost: none unless every running rank is stopped. The launcher looks only once some rank of
  // the job has ended (before, the /proc reads would be for nothing).
  std::vector<Found> look(const std::vector<Look>& running, Clock::time_point now);

 private:
  transport::StoppedPeers peers_;
  std::optional<Clock::time_point> next_look_;  // nullopt: not begun
};

}  // namespace tpf::cli
