// `tpf run`'s own watch for a rank of this machine that stays stopped (SIGSTOP, a debugger holding
// it) when no rank is left running to find it lost. The ranks find a stopped peer lost themselves,
// but only while they wait on it (transport/stopped_peers.h); once every other rank has ended, a
// stopped one would hold the job until --job-timeout, or for ever. So while some rank has ended
// and every rank still running is stopped, a rank seen stopped for TPF_HOST_LOST_S is found lost by
// the launcher, by the ranks' rule (the time counts from the first look that saw it stopped; a look
// that sees it run starts it again) and in their words. A job whose ranks are all stopped at once
// and none has ended (a job paused as a whole) is left alone, as are ranks that others still wait
// on: they are the waiting ranks' to find.
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

  // One look at a running rank: whether a process of its group is stopped, and which.
  struct Look {
    int rank = 0;
    bool stopped = false;
    pid_t pid = -1;  // the stopped process (a rank started through a shell may be its child)
  };
  struct Found {
    int rank = 0;
    pid_t pid = -1;
    std::string text;  // "rank 2 (pid 4242) has been stopped for 10.0 s (...): found lost (...)"
  };

  // `ranks`: the job's. `lost_after` zero: never finds one lost.
  StoppedRanks(int ranks, std::chrono::milliseconds lost_after);

  // Whether a look is due at `now` (and when the next will be: look_every after the last).
  bool look_due(Clock::time_point now) const;
  // When the next look is due; nullopt when this never finds one.
  std::optional<Clock::time_point> next_look() const;
  // Takes one look at every running rank (`running`), made at `now`, and returns the ranks found
  // lost: none unless every running rank is stopped. The launcher looks only once some rank of
  // the job has ended (before, the /proc reads would be for nothing).
  std::vector<Found> look(const std::vector<Look>& running, Clock::time_point now);

 private:
  transport::StoppedPeers peers_;
  Clock::time_point next_look_{};
};

}  // namespace tpf::cli
