// The collectives this rank called lately on a communicator that spans hosts, and the one it is
// in, by their fingerprints (coll/op_desc.h: collective_fingerprint). The heartbeat
// (comm/heartbeat.h) sends the current one with each beat and compares what the ranks it watches
// report with this rank's call at the same sequence number: ranks that wait for messages that a
// disagreeing call will never send (leaders that disagree on a small broadcast's root, whose
// fingerprints are not exchanged) then fail with a mismatch within a few beats instead of at
// their deadline.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>

#include "transport/shm_fabric.h"

namespace tpf::detail {

class RecentCalls {
 public:
  // How many calls are kept: more than a rank can run ahead of the ranks it watches (a small
  // broadcast's or scatter's root and a small reduce's or gather's senders, the only ones that go
  // on without them, run at most kCheckpointEvery + kCheckpointLag - 1 ahead:
  // coll/across_hosts.h; checked in recent_calls.cc).
  static constexpr size_t kKept = 1024;

  // The communicator's thread that runs collectives: one began, or ended (either way).
  void begin(const transport::Fingerprint& call);
  void end();
  // Any thread: the call this rank is in, and its call at `sequence` if it is among the last
  // kKept it began.
  std::optional<transport::Fingerprint> current() const;
  std::optional<transport::Fingerprint> at(uint64_t sequence) const;

 private:
  mutable std::mutex mu_;
  std::array<transport::Fingerprint, kKept> kept_{};  // by sequence % kKept
  std::array<bool, kKept> filled_{};
  std::optional<transport::Fingerprint> current_;
};

}  // namespace tpf::detail
