#include "transport/signal.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

namespace tpf::transport {
namespace {

long futex(std::atomic<uint32_t>& word, int op, uint32_t value, const timespec* timeout) {
  // Not FUTEX_PRIVATE: the word lives in memory shared between processes.
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), op, value, timeout, nullptr, 0);
}

}  // namespace

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::microseconds timeout) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000);
  ts.tv_nsec = static_cast<long>((timeout.count() % 1000000) * 1000);
  futex(word, FUTEX_WAIT, expected, &ts);  // EAGAIN/ETIMEDOUT/EINTR all mean: re-check
}

void futex_wake_all(std::atomic<uint32_t>& word) { futex(word, FUTEX_WAKE, INT_MAX, nullptr); }

void Doorbell::ring() {
  if (sleeping.load(std::memory_order_seq_cst) != 0) ring_always();
}

void Doorbell::ring_always() {
  word.fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(word);
}

void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

Backoff::Backoff(bool oversubscribed)
    : start_(std::chrono::steady_clock::now()),
      spin_for_(oversubscribed ? 2 : 100),
      yield_until_(oversubscribed ? 1000 : 2000) {}

Backoff::Stage Backoff::next() {
  ++polls_;
  // Reading the clock costs ~20 ns, so while spinning look at it only every 64 polls.
  if (stage_ == Stage::spin && (polls_ % 64) == 0) {
    if (std::chrono::steady_clock::now() - start_ >= spin_for_) stage_ = Stage::yield;
  } else if (stage_ == Stage::yield) {
    if (std::chrono::steady_clock::now() - start_ >= yield_until_) stage_ = Stage::sleep;
  }
  switch (stage_) {
    case Stage::spin: cpu_relax(); break;
    case Stage::yield: ::sched_yield(); break;
    case Stage::sleep: break;
  }
  return stage_;
}

}  // namespace tpf::transport
