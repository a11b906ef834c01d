// The synchronization primitives of the in-memory fabric: monotonic 64-bit counters and futex
// doorbells, each on its own cache line in shared memory so ranks never write the same line.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "transport/asymmetric_fence.h"

namespace tpf::transport {

inline constexpr size_t kCacheLine = 64;

// A counter that only grows. Its owner stores; peers load.
struct alignas(kCacheLine) Signal {
  std::atomic<uint64_t> value{0};
};

// A rank's doorbell: peers ring it after posting a signal the rank may be sleeping on. Ringing
// costs a system call only when the owner announced that it sleeps.
struct alignas(kCacheLine) Doorbell {
  std::atomic<uint32_t> word{0};
  std::atomic<uint32_t> sleeping{0};

  // Wakes the owner if it sleeps (or is about to).
  void ring();
  // Forces a wake-up regardless of the sleeping flag (abort, shutdown).
  void ring_always();
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "signals need lock-free 64-bit atomics");
static_assert(sizeof(Signal) == kCacheLine && sizeof(Doorbell) == kCacheLine);

// Sleeps on `bell` until it rings or `timeout` passes, unless `ready()` already holds after the
// sleeping flag is raised (the flag/recheck pair closes the lost-wake-up race with ring()).
// `heavy`: the posters use light fences (asymmetric_fence.h), so this side must use the heavy one.
template <class Ready>
void sleep_on(Doorbell& bell, std::chrono::microseconds timeout, bool heavy, Ready&& ready);

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::microseconds timeout);
void futex_wake_all(std::atomic<uint32_t>& word);

template <class Ready>
void sleep_on(Doorbell& bell, std::chrono::microseconds timeout, bool heavy, Ready&& ready) {
  uint32_t seen = bell.word.load(std::memory_order_seq_cst);
  bell.sleeping.store(1, std::memory_order_seq_cst);
  if (heavy) heavy_fence();
  if (!ready()) futex_wait(bell.word, seen, timeout);
  bell.sleeping.store(0, std::memory_order_relaxed);
}

// Spin-then-sleep policy for a waiting rank. With a core per rank, spinning ~100 us keeps the
// small-message latency at cache-line speed, and yielding up to ~2 ms keeps a rank responsive
// when other work shares its core (a futex wake-up on a busy core can take milliseconds). With
// more ranks than cores, spinning only steals time from the ranks being waited for, so the rank
// yields almost at once. Past that it sleeps on its futex, in short slices so that deadlines,
// aborts and dead peers are still noticed.
class Backoff {
 public:
  explicit Backoff(bool oversubscribed);
  enum class Stage { spin, yield, sleep };
  // Call once per unsuccessful poll; says what to do next (it has already paused or yielded).
  Stage next();

 private:
  std::chrono::steady_clock::time_point start_;
  std::chrono::microseconds spin_for_;
  std::chrono::microseconds yield_until_;
  unsigned polls_ = 0;
  Stage stage_ = Stage::spin;
};

void cpu_relax() noexcept;

}  // namespace tpf::transport
