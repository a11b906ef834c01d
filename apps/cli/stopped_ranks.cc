#include "cli/stopped_ranks.h"

#include <algorithm>

namespace tpf::cli {

StoppedRanks::StoppedRanks(int ranks, std::chrono::milliseconds lost_after)
    : peers_(ranks, lost_after) {}

void StoppedRanks::begin(Clock::time_point now) {
  if (!next_look_) next_look_ = now + transport::StoppedPeers::look_every(peers_.lost_after());
}

bool StoppedRanks::look_due(Clock::time_point now) const {
  return peers_.lost_after().count() > 0 && next_look_ && now >= *next_look_;
}

std::optional<StoppedRanks::Clock::time_point> StoppedRanks::next_look() const {
  if (peers_.lost_after().count() <= 0) return std::nullopt;
  return next_look_;
}

std::vector<StoppedRanks::Found> StoppedRanks::look(const std::vector<Look>& running,
                                                    Clock::time_point now) {
  next_look_ = now + transport::StoppedPeers::look_every(peers_.lost_after());
  std::vector<Found> found;
  // Every look counts, so that the time a rank has been stopped is known once nobody else runs.
  for (const Look& l : running) {
    const std::optional<std::chrono::milliseconds> lost = peers_.seen(l.rank, l.stopped, now);
    if (lost) {
      found.push_back({l.rank, transport::stopped_lost_text("rank " + std::to_string(l.rank), l.pid,
                                                            *lost, peers_.lost_after(), l.host)});
    }
  }
  const bool all_stopped =
      std::all_of(running.begin(), running.end(), [](const Look& l) { return l.stopped; });
  if (!all_stopped) found.clear();
  return found;
}

}  // namespace tpf::cli
