#include "comm/recent_calls.h"

#include "coll/across_hosts.h"

namespace tpf::detail {

static_assert(RecentCalls::kKept > coll::kCheckpointEvery + coll::kCheckpointLag,
              "a watched rank's call must still be kept when its watcher has run ahead");

void RecentCalls::begin(const transport::Fingerprint& call) {
  std::lock_guard lock(mu_);
  const size_t slot = call.words[0] % kKept;  // words[0]: the sequence number
  kept_[slot] = call;
  filled_[slot] = true;
  current_ = call;
}

void RecentCalls::end() {
  std::lock_guard lock(mu_);
  current_.reset();
}

std::optional<transport::Fingerprint> RecentCalls::current() const {
  std::lock_guard lock(mu_);
  return current_;
}

std::optional<transport::Fingerprint> RecentCalls::at(uint64_t sequence) const {
  std::lock_guard lock(mu_);
  const size_t slot = sequence % kKept;
  if (!filled_[slot] || kept_[slot].words[0] != sequence) return std::nullopt;
  return kept_[slot];
}

}  // namespace tpf::detail
