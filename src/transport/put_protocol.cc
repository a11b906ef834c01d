#include "transport/put_protocol.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "tpf/error.h"

namespace tpf::transport {
namespace {

using SL = SlotLayout;

// What a slot holds besides its payload; written by the sender's put, read after the signal.
struct SlotHeader {
  uint64_t tag = 0;
  uint64_t message_bytes = 0;
  uint64_t offset = 0;  // of this piece in its message
  uint64_t piece_bytes = 0;
  uint64_t sequence = 0;  // of this piece among all pieces from this peer
};
static_assert(sizeof(SlotHeader) <= SL::kHeaderBytes);

uint64_t load_word(const std::byte* at) {
  // Written by a peer's put, which may land at any time: read it once, atomically.
  return std::atomic_ref<const uint64_t>(*reinterpret_cast<const uint64_t*>(at))
      .load(std::memory_order_acquire);
}

bool tags_match(uint64_t wanted, uint64_t any_bits, uint64_t given) {
  return ((wanted ^ given) & ~any_bits) == 0;
}

}  // namespace

struct PutProtocol::Op {
  bool is_send = false;
  int peer = -1;
  uint64_t tag = 0;
  uint64_t any_bits = 0;
  size_t bytes = 0;
  const std::byte* source = nullptr;  // a send
  std::byte* target = nullptr;        // a receive
  // A send: how far it is issued, its payload puts in flight, its pieces not yet signalled.
  size_t issued = 0;
  bool all_issued = false;
  std::vector<void*> payload_puts;
  int unsignalled = 0;
  Status status;  // a receive
};

// One message coming in: into the receive it matched, or held until one matches it.
struct Arrival {
  uint64_t tag = 0;
  size_t bytes = 0;
  size_t arrived = 0;
  PutProtocol::Op* receive = nullptr;
  bool discard = false;         // its receive was cancelled
  std::vector<std::byte> held;  // unexpected: its bytes so far
};

struct PutProtocol::Outgoing {
  std::deque<Op*> queue;    // sends not fully issued, in the order they were started
  std::vector<Op*> active;  // every send not finished
  uint64_t next = 0;        // pieces issued to this peer
  SlotHeader headers[SL::kSlots];
  uint64_t signals[SL::kSlots] = {};
  std::vector<void*> control[SL::kSlots];  // the header and signal puts of the slot's last piece
  struct Unsignalled {
    uint64_t piece;
    void* flush;  // confirms that the piece landed; then its signal is written
    Op* op;       // null once cancelled
  };
  std::deque<Unsignalled> awaiting;
  bool broken = false;  // a send was cancelled half-way: nothing more goes to this peer
};

struct PutProtocol::Incoming {
  uint64_t consumed = 0;     // pieces taken out of the inbox
  uint64_t credit_sent = 0;  // the last credit written to the peer
  uint64_t credit_word = 0;  // its source while the put is in flight
  void* credit_put = nullptr;
  std::deque<Op*> posted;  // receives waiting for a message, in the order they were started
  std::deque<std::shared_ptr<Arrival>> unexpected;
  std::shared_ptr<Arrival> current;  // the message whose pieces are arriving
};

PutProtocol::PutProtocol(std::span<std::byte> region, std::vector<int> peers, RemoteWriter& writer)
    : region_(region),
      peers_(std::move(peers)),
      remote_blocks_(peers_.size(), kUnreached),
      writer_(writer) {
  if (region_.size() < peers_.size() * SL::block_bytes())
    throw Error(ErrorCode::internal, "put protocol: region too small for its peers");
  for (size_t i = 0; i < peers_.size(); ++i) {
    out_.push_back(std::make_unique<Outgoing>());
    in_.push_back(std::make_unique<Incoming>());
  }
}

PutProtocol::~PutProtocol() {
  auto release = [&](void* handle) {
    if (handle != nullptr) writer_.release(handle);
  };
  for (size_t i = 0; i < peers_.size(); ++i) {
    Outgoing& o = *out_[i];
    for (Op* op : o.active)
      for (void* put : op->payload_puts) release(put);
    for (auto& slot : o.control)
      for (void* put : slot) release(put);
    for (auto& waiting : o.awaiting) release(waiting.flush);
    release(in_[i]->credit_put);
  }
  for (Op* op : live_) delete op;
}

size_t PutProtocol::index_of(int peer) const {
  const auto it = std::find(peers_.begin(), peers_.end(), peer);
  if (it == peers_.end())
    throw Error(ErrorCode::internal, "put protocol: rank " + std::to_string(peer) + " is no peer");
  return static_cast<size_t>(it - peers_.begin());
}

void PutProtocol::reach(int peer, uint64_t remote_block) {
  remote_blocks_[index_of(peer)] = remote_block;
}

PutProtocol::Op* PutProtocol::send(int peer, uint64_t tag, const void* data, size_t bytes) {
  const size_t i = index_of(peer);
  if (remote_blocks_[i] == kUnreached)
    throw Error(ErrorCode::internal, "put protocol: rank " + std::to_string(peer) + " not reached");
  Outgoing& o = *out_[i];
  Op* op = *live_.insert(new Op).first;
  op->is_send = true;
  op->peer = peer;
  op->tag = tag;
  op->bytes = bytes;
  op->source = static_cast<const std::byte*>(data);
  o.queue.push_back(op);
  o.active.push_back(op);
  return op;
}

PutProtocol::Op* PutProtocol::recv(int peer, uint64_t tag, void* data, size_t bytes,
                                   uint64_t any_bits) {
  Incoming& in = *in_[index_of(peer)];
  Op* op = *live_.insert(new Op).first;
  op->peer = peer;
  op->tag = tag;
  op->any_bits = any_bits;
  op->bytes = bytes;
  op->target = static_cast<std::byte*>(data);
  // A message that came first, complete or still arriving, is this receive's.
  const auto held = std::find_if(in.unexpected.begin(), in.unexpected.end(),
                                 [&](const auto& a) { return tags_match(tag, any_bits, a->tag); });
  if (held == in.unexpected.end()) {
    in.posted.push_back(op);
    return op;
  }
  std::shared_ptr<Arrival> arrival = *held;
  in.unexpected.erase(held);
  if (arrival->bytes > bytes) {
    op->status.truncated = true;
  } else if (arrival->arrived > 0) {
    std::memcpy(op->target, arrival->held.data(), arrival->arrived);
  }
  arrival->held = {};
  arrival->receive = op;
  if (arrival->arrived == arrival->bytes) {
    op->status.done = true;
    op->status.received_bytes = arrival->bytes;
    op->status.received_tag = arrival->tag;
  }
  return op;
}

void PutProtocol::pump() {
  for (size_t i = 0; i < peers_.size(); ++i) {
    pump_in(i);
    pump_out(i);
  }
}

void PutProtocol::pump_out(size_t i) {
  Outgoing& o = *out_[i];
  const int peer = peers_[i];
  if (o.broken) return;
  const uint64_t remote = remote_blocks_[i];
  for (Op* op : o.active) drop_ended(peer, op->payload_puts);
  auto write_signals = [&] {
    while (!o.awaiting.empty()) {
      std::exception_ptr failure;
      if (!writer_.complete(peer, o.awaiting.front().flush, failure)) break;
      const Outgoing::Unsignalled done = o.awaiting.front();
      o.awaiting.pop_front();
      if (failure) std::rethrow_exception(failure);
      const int slot = static_cast<int>(done.piece % SL::kSlots);
      o.signals[slot] = done.piece + 1;
      if (void* put = writer_.put(peer, remote + SL::signal(slot), &o.signals[slot], 8))
        o.control[slot].push_back(put);
      if (done.op != nullptr) --done.op->unsignalled;
    }
  };
  write_signals();
  // The peer has emptied `credits` pieces, so pieces below credits + kSlots have a free slot.
  const uint64_t credits = load_word(region_.data() + block_offset(i) + SL::credit());
  while (!o.queue.empty() && o.next < credits + SL::kSlots) {
    const int slot = static_cast<int>(o.next % SL::kSlots);
    // The slot's last header and signal landed (the peer read them); their puts are done.
    drop_ended(peer, o.control[slot]);
    if (!o.control[slot].empty()) break;
    Op* op = o.queue.front();
    const size_t piece = std::min(SL::kSlotBytes, op->bytes - op->issued);
    o.headers[slot] = {op->tag, op->bytes, op->issued, piece, o.next};
    if (piece > 0) {
      if (void* put = writer_.put(peer, remote + SL::payload(slot), op->source + op->issued, piece))
        op->payload_puts.push_back(put);
    }
    if (void* put =
            writer_.put(peer, remote + SL::header(slot), &o.headers[slot], sizeof(SlotHeader)))
      o.control[slot].push_back(put);
    o.awaiting.push_back({o.next, writer_.flush(peer), op});
    ++op->unsignalled;
    ++o.next;
    op->issued += piece;
    if (op->issued == op->bytes) {
      op->all_issued = true;
      o.queue.pop_front();
    }
  }
  write_signals();
}

void PutProtocol::pump_in(size_t i) {
  Incoming& in = *in_[i];
  const int peer = peers_[i];
  const std::byte* block = region_.data() + block_offset(i);
  for (;;) {
    const int slot = static_cast<int>(in.consumed % SL::kSlots);
    if (load_word(block + SL::signal(slot)) != in.consumed + 1) break;
    SlotHeader h;
    std::memcpy(&h, block + SL::header(slot), sizeof h);
    const bool starts = h.offset == 0;
    if (h.sequence != in.consumed || h.piece_bytes > SL::kSlotBytes ||
        h.offset + h.piece_bytes > h.message_bytes || starts == (in.current != nullptr)) {
      throw Error(ErrorCode::internal, "put protocol: rank " + std::to_string(peer) +
                                           " wrote a malformed slot (piece " +
                                           std::to_string(in.consumed) + ")");
    }
    if (starts) {
      auto arrival = std::make_shared<Arrival>();
      arrival->tag = h.tag;
      arrival->bytes = h.message_bytes;
      const auto posted = std::find_if(in.posted.begin(), in.posted.end(), [&](const Op* op) {
        return tags_match(op->tag, op->any_bits, h.tag);
      });
      if (posted != in.posted.end()) {
        arrival->receive = *posted;
        if (arrival->bytes > arrival->receive->bytes) arrival->receive->status.truncated = true;
        in.posted.erase(posted);
      } else {
        arrival->held.resize(arrival->bytes);
        in.unexpected.push_back(arrival);
      }
      in.current = arrival;
    }
    Arrival& a = *in.current;
    const std::byte* payload = block + SL::payload(slot);
    if (h.piece_bytes == 0) {  // an empty message: nothing to copy (and maybe nowhere to)
    } else if (a.receive != nullptr && !a.receive->status.truncated) {
      std::memcpy(a.receive->target + h.offset, payload, h.piece_bytes);
    } else if (a.receive == nullptr && !a.discard) {
      std::memcpy(a.held.data() + h.offset, payload, h.piece_bytes);
    }
    a.arrived += h.piece_bytes;
    ++in.consumed;
    if (a.arrived == a.bytes) {
      if (a.receive != nullptr) {
        a.receive->status.done = true;
        a.receive->status.received_bytes = a.bytes;
        a.receive->status.received_tag = a.tag;
      }
      in.current.reset();
    }
  }
  // Hand the emptied slots back: one credit put in flight at a time, the newest count (once the
  // peer is reached: until then it waits for slots, and the pieces wait here).
  if (remote_blocks_[i] == kUnreached) return;
  if (in.credit_put != nullptr) {
    std::exception_ptr failure;
    if (writer_.complete(peer, in.credit_put, failure)) in.credit_put = nullptr;
    if (failure) std::rethrow_exception(failure);
  }
  if (in.credit_put == nullptr && in.credit_sent < in.consumed) {
    in.credit_word = in.consumed;
    in.credit_sent = in.consumed;
    in.credit_put = writer_.put(peer, remote_blocks_[i] + SL::credit(), &in.credit_word, 8);
  }
}

void PutProtocol::drop_ended(int peer, std::vector<void*>& handles) {
  std::exception_ptr failure;
  std::erase_if(handles, [&](void* handle) { return writer_.complete(peer, handle, failure); });
  if (failure) std::rethrow_exception(failure);
}

PutProtocol::Status PutProtocol::status(const Op* op) const {
  if (!op->is_send) return op->status;
  Status s;
  s.done = op->all_issued && op->unsignalled == 0 && op->payload_puts.empty();
  return s;
}

void PutProtocol::finish(Op* op) {
  if (op->is_send) std::erase(out_[index_of(op->peer)]->active, op);
  live_.erase(op);
  delete op;
}

void PutProtocol::cancel(Op* op) {
  const size_t i = index_of(op->peer);
  if (op->is_send) {
    Outgoing& o = *out_[i];
    if (!status(op).done) o.broken = true;  // the peer would see a message cut short
    for (void* put : op->payload_puts) writer_.abandon(op->peer, put);
    std::erase(o.queue, op);
    std::erase(o.active, op);
    for (auto& waiting : o.awaiting)
      if (waiting.op == op) waiting.op = nullptr;
  } else {
    Incoming& in = *in_[i];
    std::erase(in.posted, op);
    if (in.current && in.current->receive == op) {
      in.current->receive = nullptr;
      in.current->discard = true;
    }
  }
  live_.erase(op);
  delete op;
}

}  // namespace tpf::transport
