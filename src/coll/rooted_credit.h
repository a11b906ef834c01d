// The byte credit between host leaders of the rooted collectives whose senders do not wait for
// their receivers (coll/across_hosts.cc): a small broadcast's or scatter's root and the leaders
// that pass its message on, a small reduce's or gather's senders. Such a sender goes on once its
// message is handed to the network, so a receiver that is late keeps the messages in its network
// queue, unread. The credit bounds them for each pair of leaders: the receiver acknowledges each
// time the bytes it has taken from the sender cross a multiple of the quantum (a quarter of the
// window), and the sender, before a message that would leave more than the window
// unacknowledged, waits for those acknowledgements, oldest first. Both sides count the same
// messages (the pair's, in call order, sizes every leader computes from the call), so they agree
// where the acknowledgements fall without telling each other; an acknowledgement carries the
// receiver's count, which the sender compares with its own. The waits lag a window behind, so a
// sender whose receivers keep up never waits, and the acknowledgements are few (one per quantum:
// every 64th message of 16 KiB on two hosts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tpf::coll {

class RootedCredit {
 public:
  // What a sender waits for: the acknowledgement the receiver sends in call `sequence`, where the
  // bytes it took from this sender reached `through`.
  struct Awaited {
    uint64_t sequence = 0;
    uint64_t through = 0;
    bool operator==(const Awaited&) const = default;
  };

  // The window of each pair of leaders on `hosts` hosts: 8 MiB shared by the H - 1 senders a
  // receiver may have, between 512 KiB and 4 MiB a pair, each well above the largest message
  // (kNetworkRootedPackedBytes and a fingerprint). On two hosts 4 MiB: 68 messages of 60 KiB,
  // 255 of 16 KiB, ahead of the receiver.
  static size_t window_bytes(int hosts);
  explicit RootedCredit(int hosts);

  size_t window() const { return window_; }
  size_t quantum() const { return quantum_; }

  // A sender: the acknowledgement from `peer` it must have before it sends `peer` `bytes` more
  // (the oldest it awaits from `peer`); none where the window has room.
  std::optional<Awaited> awaited_before(int peer, size_t bytes) const;
  // A sender: the acknowledgement awaited_before named arrived.
  void acknowledged(int peer);
  // A sender: it sent `peer` a message of `bytes` in call `sequence`.
  void sent(int peer, uint64_t sequence, size_t bytes);
  // A receiver: it took a message of `bytes` from `peer`; the count to acknowledge in this call,
  // where the message crossed a multiple of the quantum.
  std::optional<uint64_t> received(int peer, size_t bytes);
  // Every acknowledgement still awaited, each peer's oldest first (before the communicator goes).
  std::vector<std::pair<int, Awaited>> all_awaited() const;

 private:
  struct Pair {
    uint64_t sent = 0;          // bytes sent to the peer
    uint64_t acknowledged = 0;  // of those, acknowledged
    uint64_t received = 0;      // bytes taken from the peer
    std::deque<Awaited> awaited;
  };
  size_t window_;
  size_t quantum_;
  std::unordered_map<int, Pair> pairs_;  // by peer rank (a leader talks to the other leaders)
};

}  // namespace tpf::coll
