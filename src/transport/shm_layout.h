// The layout of a rank's shared-memory segment, and the wait loop: private to src/transport,
// shared by shm_fabric.cc (setup, steps, point to point, failures) and eager_messages.cc.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tpf/error.h"
#include "transport/shm_fabric.h"
#include "transport/signal.h"

namespace tpf::transport {

inline constexpr uint64_t kMagic = 0x7470666162726963ULL;  // "tpfabric"
// A rank's state (Control::state). Left: it destroyed the communicator (ShmFabric::leave).
inline constexpr uint64_t kStateOk = 0, kStateFailed = 1, kStateAborted = 2, kStateLeft = 3;
inline constexpr size_t kReasonBytes = 2048;  // a root cause's message, whole in practice
inline constexpr std::chrono::microseconds kMaxSleep{2000};
// The longest sleep of a wait with WaitContext::between_polls, which has network transfers to
// move on: between two calls only the socket's buffered bytes keep the link busy.
inline constexpr std::chrono::microseconds kPolledSleep{100};

inline size_t round_up(size_t value, size_t to) { return (value + to - 1) / to * to; }

struct alignas(kCacheLine) FingerprintLine {
  Fingerprint fp;
};

// Per-peer control lines, in the owner's segment.
struct P2pControl {
  Signal sent;      // chunks the owner has posted towards this peer
  Signal consumed;  // chunks the owner has consumed from this peer
  FingerprintLine fp[2];
  Signal line_consumed;  // eager line messages of this peer that the owner has consumed
  Signal tiny_consumed;  // eager tiny messages of this peer that the owner has consumed
};

// The step counter and the fingerprints of both slots, written together by the owner.
struct alignas(kCacheLine) PostLine {
  std::atomic<uint64_t> posted{0};
  Fingerprint fp[2];
};
static_assert(sizeof(PostLine) == kCacheLine, "the post line must be one cache line");

// A FailureRecord in shared memory: its message (cut short beyond kReasonBytes - 1, and
// 0-terminated), code and lost process.
struct RecordArea {
  char text[kReasonBytes];
  int32_t code;
  uint64_t lost_process;
};

struct ShmFabric::Control {
  uint64_t magic;
  int32_t rank;
  int32_t pid;
  PostLine post;
  Doorbell bell;      // rung for collective posts and eager messages
  Doorbell p2p_bell;  // rung for mailbox moves: the point-to-point engine sleeps on it
  Signal state;
  // The root cause of this rank's failure (state == kStateFailed), and the first failure of this
  // process on another communicator (note.value == 1), written before the flag.
  alignas(kCacheLine) RecordArea reason;
  Signal note;
  RecordArea note_reason;
  // Followed by P2pControl[size], one per peer, from the next cache line on.
  P2pControl& p2p(int peer) {
    auto* base = reinterpret_cast<std::byte*>(this) + round_up(sizeof(Control), kCacheLine);
    return reinterpret_cast<P2pControl*>(base)[peer];
  }
};

// One cache line of an eager line message: its payload, then the flag that says which message it
// holds (index + 1), stored last with release semantics. The first line's payload starts with the
// message's fingerprint.
struct alignas(kCacheLine) ShmFabric::EagerLine {
  std::byte payload[56];
  std::atomic<uint64_t> flag;
};
inline constexpr size_t kEagerFirstData = 56 - sizeof(Fingerprint);  // data bytes in line 0
static_assert(ShmFabric::kEagerCapacity == kEagerFirstData + (ShmFabric::kEagerLines - 1) * 56);
static_assert(ShmFabric::kEagerOneLineBytes == kEagerFirstData);

// A tiny message: half a cache line, so a writer that runs ahead fills a line with two messages
// and its readers take one miss for both. The full fingerprint goes to a side table that readers
// consult only to describe a mismatch.
struct alignas(32) ShmFabric::TinySlot {
  std::atomic<uint64_t> flag;  // message index + 1, stored last
  uint64_t fp_hash;
  std::byte data[ShmFabric::kTinyBytes];
};

// Bytes of the eager region: the line ring, the tiny ring and the tiny fingerprints.
inline constexpr size_t kLineRingBytes =
    ShmFabric::kEagerEntries * ShmFabric::kEagerLines * kCacheLine;
inline constexpr size_t kTinyRingBytes = ShmFabric::kTinySlots * kCacheLine / 2;
inline constexpr size_t kTinyFingerprintBytes =
    (ShmFabric::kTinySlots * sizeof(Fingerprint) + kCacheLine - 1) / kCacheLine * kCacheLine;

template <class Arrived, class Elsewhere>
void ShmFabric::wait(Arrived&& arrived, std::span<const int> awaited, const WaitContext& ctx,
                     const Fingerprint& mine, Elsewhere&& elsewhere) {
  auto ready = [&] {
    for (int p : awaited)
      if (!arrived(p)) return false;
    return true;
  };
  if (ready()) return;
  Backoff backoff(oversubscribed());
  Doorbell& bell = control(config_.rank).bell;
  for (;;) {
    Backoff::Stage stage = backoff.next();
    if (ready()) return;
    if (stage == Backoff::Stage::spin) continue;
    if (ctx.between_polls) {
      ctx.between_polls();
      if (ready()) return;
    }
    if (aborted()) {
      throw Error(ErrorCode::aborted,
                  ctx.op_label() + ": the communicator was aborted on this rank");
    }
    check_self(ctx);
    // Dead peers first: a peer that failed because another died should not hide the dead one.
    try {
      for (int p : awaited) check_alive(p, ctx);
      for (int p : awaited) check_peer(p, ctx);
    } catch (const Error&) {
      // A peer may post its last step and exit (or fail later) between the ready() above and
      // these checks; what it posted is still there. Checked after its end was seen, so a peer
      // that really left before posting is still reported.
      if (ready()) return;
      throw;
    }
    // A peer showing a signal of another operation may merely have finished this one and moved
    // on; everything it wrote before that signal is visible once the signal is, so if it has
    // still not arrived here, it is running something else.
    for (int p : awaited) {
      Fingerprint theirs;
      if (elsewhere(p, &theirs) && !arrived(p)) throw_mismatch(p, mine, theirs, ctx);
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= ctx.deadline()) {
      std::vector<int> missing;
      for (int p : awaited)
        if (!arrived(p)) missing.push_back(p);
      throw Error(ErrorCode::timeout, ctx.op_label() + " timed out on " + rank_name(config_.rank) +
                                          ": " + rank_names(missing) + " never arrived" +
                                          stopped_note(missing));
    }
    if (stage == Backoff::Stage::sleep) {
      auto left = std::chrono::duration_cast<std::chrono::microseconds>(ctx.deadline() - now);
      const auto longest = ctx.between_polls ? kPolledSleep : kMaxSleep;
      sleep_on(bell, std::min(left + std::chrono::microseconds(1), longest), light_posts_, ready);
    }
  }
}

template <class Arrived>
void ShmFabric::wait(Arrived&& arrived, std::span<const int> awaited, const WaitContext& ctx) {
  wait(arrived, awaited, ctx, Fingerprint{}, [](int, Fingerprint*) { return false; });
}

}  // namespace tpf::transport
