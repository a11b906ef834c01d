#include "transport/stopped_peers.h"

#include <algorithm>

#include "base/duration_text.h"

namespace tpf::transport {

StoppedPeers::StoppedPeers(int ranks, std::chrono::milliseconds lost_after)
    : lost_after_(lost_after),
      look_every_(look_every(lost_after)),
      watches_(std::make_unique<Watch[]>(static_cast<size_t>(std::max(ranks, 0)))) {}

std::chrono::milliseconds StoppedPeers::look_every(std::chrono::milliseconds lost_after) {
  return std::clamp(lost_after / 10, std::chrono::milliseconds(10),
                    std::chrono::milliseconds(1000));
}

bool StoppedPeers::look_due(int peer, Clock::time_point now) const {
  if (lost_after_.count() <= 0) return false;
  Watch& watch = watches_[static_cast<size_t>(peer)];
  const int64_t ticks = now.time_since_epoch().count();
  if (ticks < watch.next_look.load(std::memory_order_relaxed)) return false;
  watch.next_look.store(ticks + Clock::duration(look_every_).count(), std::memory_order_relaxed);
  return true;
}

std::optional<std::chrono::milliseconds> StoppedPeers::seen(int peer, bool stopped,
                                                            Clock::time_point now) const {
  if (lost_after_.count() <= 0) return std::nullopt;
  Watch& watch = watches_[static_cast<size_t>(peer)];
  const int64_t ticks = now.time_since_epoch().count();
  if (!stopped) {
    watch.stopped_since.store(0, std::memory_order_relaxed);
    return std::nullopt;
  }
  int64_t since = watch.stopped_since.load(std::memory_order_relaxed);
  if (since == 0) {
    // First seen stopped now (a tick count of 0 is taken as "not seen": step past it).
    since = ticks == 0 ? 1 : ticks;
    watch.stopped_since.store(since, std::memory_order_relaxed);
  }
  const auto stopped_for =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::duration(ticks - since));
  if (stopped_for < lost_after_) return std::nullopt;
  return stopped_for;
}

std::string stopped_lost_text(const std::string& who, int64_t pid,
                              std::chrono::milliseconds stopped_for,
                              std::chrono::milliseconds lost_after, const std::string& host) {
  const std::string where = host.empty() ? "" : " on host '" + host + "'";
  return who + " (pid " + std::to_string(pid) + where + ") has been stopped for " +
         base::format_seconds(stopped_for) + " (" + kStoppedHow +
         "): found lost (TPF_HOST_LOST_S = " + base::format_seconds(lost_after) + ")";
}

std::string died_while_creating_text(const std::string& who, int64_t pid,
                                     const std::string& context) {
  return who + " (pid " + std::to_string(pid) +
         ") died (its process exited or was killed) while creating the communicator (" + context +
         ")";
}

}  // namespace tpf::transport
