#include "coll/rooted_credit.h"

#include <algorithm>

#include "coll/network_cost.h"
#include "transport/shm_fabric.h"

namespace tpf::coll {

namespace {
constexpr size_t kShared = size_t{8} << 20;
constexpr size_t kLeast = size_t{512} << 10;
constexpr size_t kMost = size_t{4} << 20;
// A sender that has waited for every acknowledgement has less than a quantum unacknowledged, so
// the largest message always fits in the window after its waits.
static_assert(kLeast - kLeast / 4 >= kNetworkRootedPackedBytes + sizeof(transport::Fingerprint));
}  // namespace

size_t RootedCredit::window_bytes(int hosts) {
  const size_t senders = hosts > 2 ? static_cast<size_t>(hosts - 1) : 1;
  return std::clamp(kShared / senders, kLeast, kMost);
}

RootedCredit::RootedCredit(int hosts) : window_(window_bytes(hosts)), quantum_(window_ / 4) {}

std::optional<RootedCredit::Awaited> RootedCredit::awaited_before(int peer, size_t bytes) const {
  const auto it = pairs_.find(peer);
  if (it == pairs_.end()) return std::nullopt;
  const Pair& pair = it->second;
  if (pair.awaited.empty() || pair.sent - pair.acknowledged + bytes <= window_) return std::nullopt;
  return pair.awaited.front();
}

void RootedCredit::acknowledged(int peer) {
  Pair& pair = pairs_[peer];
  if (pair.awaited.empty()) return;
  pair.acknowledged = pair.awaited.front().through;
  pair.awaited.pop_front();
}

void RootedCredit::sent(int peer, uint64_t sequence, size_t bytes) {
  Pair& pair = pairs_[peer];
  const uint64_t before = pair.sent;
  pair.sent += bytes;
  if (pair.sent / quantum_ != before / quantum_) pair.awaited.push_back({sequence, pair.sent});
}

std::optional<uint64_t> RootedCredit::received(int peer, size_t bytes) {
  Pair& pair = pairs_[peer];
  const uint64_t before = pair.received;
  pair.received += bytes;
  if (pair.received / quantum_ == before / quantum_) return std::nullopt;
  return pair.received;
}

std::vector<std::pair<int, RootedCredit::Awaited>> RootedCredit::all_awaited() const {
  std::vector<std::pair<int, Awaited>> all;
  for (const auto& [peer, pair] : pairs_)
    for (const Awaited& awaited : pair.awaited) all.emplace_back(peer, awaited);
  return all;
}

}  // namespace tpf::coll
