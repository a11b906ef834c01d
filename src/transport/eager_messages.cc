// Eager messages of ShmFabric (see shm_fabric.h): two outbox rings per rank, read by every peer.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "transport/asymmetric_fence.h"
#include "transport/shm_fabric.h"
#include "transport/shm_layout.h"

namespace tpf::transport {
namespace {

// Messages fetched ahead of need: a writer that runs ahead has already written them, and fetching
// them early overlaps the misses with this rank's own work until its next call.
constexpr uint64_t kPrefetchMessages = 4;

size_t lines_for(size_t bytes) {
  return bytes <= kEagerFirstData ? 1 : 1 + (bytes - kEagerFirstData + 55) / 56;
}

// Tiny messages carry a hash of the fingerprint; equal fingerprints give equal hashes, and a
// mismatch is missed only if two different calls collide in 64 bits.
uint64_t fingerprint_hash(const Fingerprint& fp) {
  uint64_t h = 0x9e3779b97f4a7c15ULL;
  for (uint64_t word : fp.words) {
    h = (h ^ word) * 0xff51afd7ed558ccdULL;
    h ^= h >> 32;
  }
  return h;
}

}  // namespace

ShmFabric::EagerLine* ShmFabric::line_entry(int owner, uint64_t k) const noexcept {
  static_assert(sizeof(EagerLine) == kCacheLine);
  return reinterpret_cast<EagerLine*>(bases_[owner] + control_bytes_) +
         (k % kEagerEntries) * kEagerLines;
}

ShmFabric::TinySlot* ShmFabric::tiny_slot(int owner, uint64_t k) const noexcept {
  static_assert(sizeof(TinySlot) * 2 == kCacheLine);
  return reinterpret_cast<TinySlot*>(bases_[owner] + control_bytes_ + kLineRingBytes) +
         k % kTinySlots;
}

Fingerprint* ShmFabric::tiny_fingerprint(int owner, uint64_t k) const noexcept {
  return reinterpret_cast<Fingerprint*>(bases_[owner] + control_bytes_ + kLineRingBytes +
                                        kTinyRingBytes) +
         k % kTinySlots;
}

std::atomic<uint64_t>& ShmFabric::consumed_signal(Ring ring, int reader,
                                                  int writer) const noexcept {
  P2pControl& lines = control(reader).p2p(writer);
  return (ring == Ring::tiny ? lines.tiny_consumed : lines.line_consumed).value;
}

void ShmFabric::wait_for_ring_space(Ring ring, uint64_t needed, const WaitContext& ctx) {
  auto consumed = [&](int p) {
    return consumed_signal(ring, p, config_.rank).load(std::memory_order_acquire);
  };
  wait([&](int p) { return consumed(p) >= needed; }, all_peers_, ctx);
  RingState& state = ring_state(ring);
  state.space = UINT64_MAX;
  for (int p : all_peers_) state.space = std::min(state.space, consumed(p));
}

void ShmFabric::eager_post(const Fingerprint& fp, const void* data, size_t bytes,
                           const WaitContext& ctx) {
  const Ring ring = ring_for(bytes);
  RingState& state = ring_state(ring);
  const uint64_t k = state.sent;
  const uint64_t entries = ring == Ring::tiny ? kTinySlots : kEagerEntries;
  // Entry k % entries last held message k - entries: every peer must have read it. Waiting for
  // half the ring rather than one entry lets a writer that runs ahead (a broadcast root in a
  // loop) read the peers' counters once per entries / 2 messages, not once per message.
  if (k >= entries && state.space < k - entries + 1) {
    wait_for_ring_space(ring, k - entries / 2 + 1, ctx);
  }
  const auto* src = static_cast<const std::byte*>(data);
  if (ring == Ring::tiny) {
    *tiny_fingerprint(config_.rank, k) = fp;  // before the flag: readers describe mismatches
    TinySlot& slot = *tiny_slot(config_.rank, k);
    slot.fp_hash = fingerprint_hash(fp);
    if (bytes > 0) std::memcpy(slot.data, src, bytes);
    slot.flag.store(k + 1, std::memory_order_release);
  } else {
    EagerLine* lines = line_entry(config_.rank, k);
    std::memcpy(lines[0].payload, &fp, sizeof fp);
    const size_t first = std::min(bytes, kEagerFirstData);
    if (first > 0) std::memcpy(lines[0].payload + sizeof fp, src, first);
    lines[0].flag.store(k + 1, std::memory_order_release);
    for (size_t line = 1, offset = first; offset < bytes; ++line, offset += 56) {
      std::memcpy(lines[line].payload, src + offset, std::min<size_t>(56, bytes - offset));
      lines[line].flag.store(k + 1, std::memory_order_release);
    }
  }
  state.sent = k + 1;
  fence_after_post();
  ring_peers();
  // Own the next entry before it is needed, so its cache misses overlap this rank's work.
  if (ring == Ring::tiny) {
    __builtin_prefetch(tiny_slot(config_.rank, k + 1), 1);
  } else {
    const EagerLine* next = line_entry(config_.rank, k + 1);
    for (size_t line = 0; line < lines_for(bytes); ++line) __builtin_prefetch(next + line, 1);
  }
}

bool ShmFabric::message_complete(Ring ring, int peer, const Fingerprint& fp,
                                 size_t lines) const noexcept {
  const uint64_t k = ring_state(ring).received[peer];
  if (ring == Ring::tiny) {
    return tiny_slot(peer, k)->flag.load(std::memory_order_acquire) == k + 1;
  }
  const EagerLine* entry = line_entry(peer, k);
  if (entry[0].flag.load(std::memory_order_acquire) != k + 1) return false;
  // A different fingerprint may mean a different size: report it rather than wait for lines
  // that will never be written.
  if (std::memcmp(entry[0].payload, &fp, sizeof fp) != 0) return true;
  for (size_t line = 1; line < lines; ++line)
    if (entry[line].flag.load(std::memory_order_acquire) != k + 1) return false;
  return true;
}

bool ShmFabric::unread_message(Ring ring, int peer, Fingerprint* fp) const noexcept {
  const uint64_t k = ring_state(ring).received[peer];
  if (ring == Ring::tiny) {
    if (tiny_slot(peer, k)->flag.load(std::memory_order_acquire) != k + 1) return false;
    *fp = *tiny_fingerprint(peer, k);
    return true;
  }
  const EagerLine& first = line_entry(peer, k)[0];
  if (first.flag.load(std::memory_order_acquire) != k + 1) return false;
  std::memcpy(fp, first.payload, sizeof *fp);
  return true;
}

void ShmFabric::eager_wait(std::span<const int> from, const Fingerprint& fp, size_t bytes,
                           const WaitContext& ctx) {
  const Ring ring = ring_for(bytes);
  const Ring other = ring == Ring::tiny ? Ring::lines : Ring::tiny;
  const size_t lines = lines_for(bytes);
  auto complete = [&](int p) { return message_complete(ring, p, fp, lines); };
  // A peer that posted a step this rank has not begun, or wrote a message on the other ring
  // (a different size), runs another operation.
  auto elsewhere = [&](int p, Fingerprint* theirs) {
    const PostLine& post = control(p).post;
    const uint64_t posted = post.posted.load(std::memory_order_acquire);
    if (posted > step_) {
      *theirs = post.fp[posted % 2];
      return true;
    }
    return unread_message(other, p, theirs);
  };
  wait(complete, from, ctx, fp, elsewhere);
  waited_ring_ = ring;
  waited_lines_ = lines;
  const uint64_t hash = ring == Ring::tiny ? fingerprint_hash(fp) : 0;
  for (int p : from) {
    const uint64_t k = ring_state(ring).received[p];
    bool same = ring == Ring::tiny ? tiny_slot(p, k)->fp_hash == hash
                                   : std::memcmp(line_entry(p, k)[0].payload, &fp, sizeof fp) == 0;
    if (!same) {
      Fingerprint theirs;
      unread_message(ring, p, &theirs);
      throw_mismatch(p, fp, theirs, ctx);
    }
  }
}

void ShmFabric::eager_read(int peer, size_t offset, size_t len, void* out) const noexcept {
  if (len == 0) return;  // out may be null then (count 0)
  const uint64_t k = ring_state(waited_ring_).received[peer];
  if (waited_ring_ == Ring::tiny) {
    std::memcpy(out, tiny_slot(peer, k)->data + offset, len);
    return;
  }
  const EagerLine* entry = line_entry(peer, k);
  auto* dst = static_cast<std::byte*>(out);
  while (len > 0) {
    size_t line = 0, at = sizeof(Fingerprint) + offset, room = kEagerFirstData - offset;
    if (offset >= kEagerFirstData) {
      line = 1 + (offset - kEagerFirstData) / 56;
      at = (offset - kEagerFirstData) % 56;
      room = 56 - at;
    }
    const size_t n = std::min(len, room);
    std::memcpy(dst, entry[line].payload + at, n);
    dst += n;
    offset += n;
    len -= n;
  }
}

void ShmFabric::eager_release(std::span<const int> from) noexcept {
  RingState& state = ring_state(waited_ring_);
  for (int p : from) {
    const uint64_t next = ++state.received[p];
    publish(consumed_signal(waited_ring_, config_.rank, p), next);
    control(p).bell.ring();  // the writer may be waiting for ring space
    for (uint64_t ahead = 0; ahead < kPrefetchMessages; ++ahead) {
      if (waited_ring_ == Ring::tiny) {
        __builtin_prefetch(tiny_slot(p, next + ahead));
      } else {
        const EagerLine* entry = line_entry(p, next + ahead);
        for (size_t line = 0; line < waited_lines_; ++line) __builtin_prefetch(entry + line);
      }
    }
  }
}

}  // namespace tpf::transport
