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

Backoff::Stage Backoff::next() {
  ++polls_;
  if (polls_ < spin_limit_) {
    cpu_relax();
    return Stage::spin;
  }
  if (polls_ < spin_limit_ + 8) {
    ::sched_yield();
    return Stage::yield;
  }
  return Stage::sleep;
}

}  // namespace tpf::transport
