// The in-memory fabric of one communicator: every rank owns a shared-memory segment that all peers
// map. A segment holds the rank's control lines (step signal, doorbell, state, fingerprints) and
// its staging slots. Ranks write only their own segment and read the peers'.
//
// Collective protocol (one "step" = everyone writes its own slot, posts, waits for all, reads):
// - A step s uses slot s % 2. A rank finishes reading step s-1 before it posts step s, and writes
//   slot s % 2 for step s only after all peers posted s-1; so no slot is overwritten while read.
//   During the read phase of step s a rank may already fill slot (s+1) % 2 (all peers have posted s
//   and so finished reading step s-1 from it): pipelined algorithms use that.
// - Each post carries the operation's fingerprint; peers compare before touching data.
// Point-to-point: every ordered pair has a two-slot mailbox in the sender's segment, with a
// "sent" counter (sender's) and a "consumed" counter (receiver's).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tpf/error.h"
#include "tpf/store.h"
#include "transport/peer_process.h"
#include "transport/shm_segment.h"
#include "transport/signal.h"

namespace tpf::transport {

// What an operation is, as compared between ranks. Plain data; the comm layer gives it meaning.
// Three words, so that a rank's step counter and both slots' fingerprints share one cache line:
// a waiting peer then takes a single cache miss to see the post and check the fingerprint.
struct Fingerprint {
  uint64_t words[3] = {0, 0, 0};
  bool operator==(const Fingerprint&) const = default;
};

// The deadline and the name of the operation being waited on, for error messages. The name is
// built only when an error needs it: operations are too short to format strings every time.
struct WaitContext {
  std::chrono::steady_clock::time_point deadline;
  std::function<std::string()>
      describe_op;  // e.g. "all_reduce (sequence 7) on communicator 'world'"
  std::string op_label() const { return describe_op ? describe_op() : std::string("operation"); }
};

struct FabricConfig {
  int rank = 0;
  int size = 1;
  size_t slot_bytes = 0;         // bytes per collective staging slot (two per rank)
  size_t p2p_chunk_bytes = 0;    // bytes per point-to-point mailbox slot (two per peer)
  std::string segment_prefix;    // from shm_job_prefix() plus the communicator's unique name
  std::string label;             // communicator description for messages
  std::shared_ptr<Store> store;  // keys are private to this communicator
  std::chrono::milliseconds setup_timeout{60000};
  // Turns a fingerprint into words for a mismatch message.
  std::function<std::string(const Fingerprint&)> describe;
};

class ShmFabric {
 public:
  explicit ShmFabric(FabricConfig config);
  ~ShmFabric();
  ShmFabric(const ShmFabric&) = delete;
  ShmFabric& operator=(const ShmFabric&) = delete;

  int rank() const noexcept { return config_.rank; }
  int size() const noexcept { return config_.size; }
  size_t slot_bytes() const noexcept { return config_.slot_bytes; }
  size_t p2p_chunk_bytes() const noexcept { return config_.p2p_chunk_bytes; }
  // More ranks than usable cores: waits yield at once and steps cost scheduler time.
  bool oversubscribed() const noexcept { return oversubscribed_; }

  // Collective steps.
  uint64_t begin_step() noexcept { return ++step_; }
  std::byte* slot(int rank, uint64_t step) const noexcept;
  // Posts `step` with `fp`, waits until every rank posted it, and checks their fingerprints.
  void post_and_wait_all(uint64_t step, const Fingerprint& fp, const WaitContext& ctx);

  // Point to point (chunk k counts the chunks between this ordered pair, from 0).
  uint64_t next_send_chunk(int peer) noexcept { return sent_chunks_[peer]++; }
  uint64_t next_recv_chunk(int peer) noexcept { return received_chunks_[peer]++; }
  // Waits until the mailbox slot for chunk k towards `peer` is free and returns it.
  std::byte* acquire_send_slot(int peer, uint64_t k, const WaitContext& ctx);
  void post_send(int peer, uint64_t k, const Fingerprint& fp);
  // Waits for chunk k from `peer`; returns its data and the sender's fingerprint.
  const std::byte* wait_recv(int peer, uint64_t k, Fingerprint* fp, const WaitContext& ctx);
  void release_recv(int peer, uint64_t k);

  // Marks this rank failed (peers waiting on it fail fast, with `reason`).
  void mark_failed(ErrorCode code, const std::string& reason) noexcept;
  // Marks this rank aborted and wakes everyone, this rank's own waiters included.
  void abort() noexcept;
  bool aborted() const noexcept;

 private:
  struct Control;
  Control& control(int rank) const noexcept;
  std::byte* p2p_slot(int owner, int peer, uint64_t k) const noexcept;
  template <class Ready>
  void wait(Ready&& ready, const std::vector<int>& awaited, const WaitContext& ctx,
            const std::function<std::vector<int>()>& missing);
  // Throw if the peer aborted or failed (check_peer) or if its process is gone (check_alive).
  void check_peer(int peer, const WaitContext& ctx) const;
  void check_alive(int peer, const WaitContext& ctx) const;
  void ring_peers() noexcept;
  void setup();

  FabricConfig config_;
  size_t control_bytes_ = 0;
  size_t segment_bytes_ = 0;
  bool oversubscribed_ = false;
  uint64_t step_ = 0;
  std::vector<uint64_t> sent_chunks_;
  std::vector<uint64_t> received_chunks_;
  ShmSegment own_;
  std::vector<ShmSegment> peers_;  // index = rank (own rank's entry is empty)
  std::vector<std::byte*> bases_;  // mapped base of every rank's segment
  std::vector<PeerProcess> processes_;
  std::vector<int> all_peers_;
};

}  // namespace tpf::transport
