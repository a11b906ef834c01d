// Put + signal: the network twin of shared memory's "post a step". A sender writes each piece of a
// message straight into a slot the receiver registered for it, then a signal word; the receiver
// sees the signal in its own memory, copies the piece out and hands the slot back with a credit
// written the same way. This is what RDMA serves best: no receive has to be posted before the
// data moves and no rendezvous round trip per message. Over TCP, UCX carries the puts as messages.
//
// Layout: every rank registers one region with a block per put peer (the partners of the
// collectives' bulk transfers: NetworkConfig::put_peers), written only by that peer:
//   an inbox of kSlots slots (a header and up to kSlotBytes of payload each) with one signal word
//   per slot, and a credit word: how many pieces of this rank's messages the peer has emptied.
// Piece i from a peer lands in slot i % kSlots of its inbox; signal word = i + 1 says it is
// there. The signal is written only after a flush has confirmed that payload and header landed
// (a flush, not a fence: UCX may stripe a put over several lanes, and a flush's promise holds
// whatever the lanes).
//
// Order and matching: a peer's messages travel in the order they were sent, each piece after the
// one before; a receive matches the first message from its peer whose tag agrees (outside
// `any_bits`), as UCX's tag matching does. Pieces of a message no receive has matched yet are
// copied into an unexpected message (heap), so a sender never waits for the receiver's order of
// receives: the slots drain whatever is posted.
//
// This file names no UCX type: the writes go through RemoteWriter, which the network implements.
// Not thread-safe: the network calls it under its lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <span>
#include <unordered_set>
#include <vector>

namespace tpf::transport {

// Writes into peers' registered regions; implemented over UCX by the network.
class RemoteWriter {
 public:
  virtual ~RemoteWriter() = default;
  // Starts writing `bytes` from `source` at `offset` of `peer`'s region (this rank's block there
  // is at an offset the caller adds). Returns a handle while it is in flight, null if done; throws
  // if the write cannot start.
  virtual void* put(int peer, uint64_t offset, const void* source, size_t bytes) = 0;
  // Starts confirming that every write issued to `peer` so far has landed there.
  virtual void* flush(int peer) = 0;
  // True once the operation ended, its handle released then: for a put, its source may be
  // reused. One that failed ended too: `failure` gets its error (unless it holds one already),
  // for the caller to raise once it no longer holds the handle (a handle kept past a throw from
  // here would be released again when its transfer is cancelled: a double free inside UCX).
  virtual bool complete(int peer, void* handle, std::exception_ptr& failure) = 0;
  // Stops caring about an operation (the transfer it belonged to was cancelled): bounded, and its
  // source is not read any more when this returns.
  virtual void abandon(int peer, void* handle) = 0;
  // Forgets an operation that may go on by itself (its source outlives it).
  virtual void release(void* handle) = 0;
};

// Where things are inside one peer's block of a region.
struct SlotLayout {
  static constexpr int kSlots = 4;
  static constexpr size_t kSlotBytes = size_t{256} << 10;
  static constexpr size_t kHeaderBytes = 64;  // one cache line, written by one put
  static constexpr size_t header(int slot) { return slot * (kHeaderBytes + kSlotBytes); }
  static constexpr size_t payload(int slot) { return header(slot) + kHeaderBytes; }
  static constexpr size_t signal(int slot) { return header(kSlots) + slot * 64; }
  static constexpr size_t credit() { return signal(kSlots); }
  static constexpr size_t block_bytes() { return credit() + 64; }
};

class PutProtocol {
 public:
  struct Op;  // a send or a receive, from start to finish()
  struct Status {
    bool done = false;
    bool truncated = false;     // the message was longer than the receive's buffer
    size_t received_bytes = 0;  // a receive: the message's length
    uint64_t received_tag = 0;  // a receive: the sender's tag
  };

  // `region`: this rank's registered region, a zeroed block per peer at `block_offset(i)` for
  // peers[i]. No peer is reached yet (reach()).
  PutProtocol(std::span<std::byte> region, std::vector<int> peers, RemoteWriter& writer);
  // Lets what is in flight go on (the network flushes it as it closes); forgets every op.
  ~PutProtocol();
  PutProtocol(const PutProtocol&) = delete;
  PutProtocol& operator=(const PutProtocol&) = delete;

  // Where peer `peer`'s block sits in this rank's region (peers in the order given).
  static uint64_t block_offset(size_t peer_index) { return peer_index * SlotLayout::block_bytes(); }

  // This rank may now write into `peer`'s region: its own block there is at `remote_block`.
  // Connections are made on first use (UcxNetwork), so a peer may write here before this rank
  // reached it: its pieces are taken and held as usual, and the credits that hand the slots back
  // wait until it is reached.
  void reach(int peer, uint64_t remote_block);

  // `data` stays valid until the op is finished or cancelled; sends only to a peer reached.
  Op* send(int peer, uint64_t tag, const void* data, size_t bytes);
  Op* recv(int peer, uint64_t tag, void* data, size_t bytes, uint64_t any_bits);
  // Moves what can move: pieces out (as credits allow), signals after flushes, pieces in,
  // credits back. Throws (from the writer) if a write fails; the ops stay to be cancelled.
  void pump();
  Status status(const Op* op) const;
  void finish(Op* op);  // a done op: forget it
  void cancel(Op* op);  // an op in flight: stop it (bounded) and forget it

 private:
  struct Outgoing;
  struct Incoming;
  size_t index_of(int peer) const;
  void pump_out(size_t i);
  void pump_in(size_t i);
  // Drops from `handles` the operations that ended, then raises the first failure among them.
  void drop_ended(int peer, std::vector<void*>& handles);
  std::span<std::byte> region_;
  std::vector<int> peers_;
  static constexpr uint64_t kUnreached = ~uint64_t{0};
  std::vector<uint64_t> remote_blocks_;  // by peer index; kUnreached until reach()
  RemoteWriter& writer_;
  std::vector<std::unique_ptr<Outgoing>> out_;  // by peer index
  std::vector<std::unique_ptr<Incoming>> in_;   // by peer index
  std::unordered_set<Op*> live_;                // every op not yet finished or cancelled
};

}  // namespace tpf::transport
