#include "transport/stopped_peers.h"

#include <algorithm>

namespace tpf::transport {

StoppedPeers::StoppedPeers(int ranks, std::chrono::milliseconds lost_after)
    : lost_after_(lost_after),
      look_every_(look_every(lost_after)),
      watches_(std::make_unique<Watch[]>(static_cast<size_t>(std::max(ranks, 0)))) {}

std::chrono::milliseconds StoppedPeers::look_every(std::chrono::milliseconds lost_after) {
  return std::clamp(lost_after / 10, std::chrono::milliseconds(10),
                    std::chrono::milliseconds(1000));
}

std::optional<std::chrono::milliseconds> StoppedPeers::lost_for(int peer,
                                                                const PeerProcess& process,
                                                                Clock::time_point now) const {
  if (lost_after_.count() <= 0) return std::nullopt;
  Watch& watch = watches_[static_cast<size_t>(peer)];
  const int64_t ticks = now.time_since_epoch().count();
  if (ticks < watch.next_look.load(std::memory_order_relaxed)) return std::nullopt;
  watch.next_look.store(ticks + Clock::duration(look_every_).count(), std::memory_order_relaxed);
  if (!process.stopped()) {
    watch.stopped_since.store(0, std::memory_order_relaxed);
    return std::nullopt;
  }
  int64_t since = watch.stopped_since.load(std::memory_order_relaxed);
  if (since == 0) {
    // First seen stopped now (a tick count of 0 is taken as "not seen": step past it).
    since = ticks == 0 ? 1 : ticks;
    watch.stopped_since.store(since, std::memory_order_relaxed);
  }
  const auto stopped =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::duration(ticks - since));
  if (stopped < lost_after_) return std::nullopt;
  return stopped;
}

}  // namespace tpf::transport
