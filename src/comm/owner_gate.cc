#include "comm/owner_gate.h"

#include <chrono>

#include "transport/asymmetric_fence.h"
#include "transport/signal.h"

namespace tpf::detail {

bool OwnerGate::owner_enter() noexcept {
  const std::thread::id me = std::this_thread::get_id();
  std::thread::id owner = owner_.load(std::memory_order_relaxed);
  if (owner != me) {
    // The first thread to ask becomes the owner, once (this locked instruction happens once).
    if (owner != std::thread::id{} || !owner_.compare_exchange_strong(owner, me)) return false;
  }
  if (claims_.load(std::memory_order_relaxed) != 0) return false;
  owner_busy_.store(true, std::memory_order_relaxed);
  if (asymmetric_) {
    transport::light_fence();
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  if (claims_.load(std::memory_order_acquire) == 0) return true;
  owner_busy_.store(false, std::memory_order_release);
  return false;
}

void OwnerGate::wait_owner_out() noexcept {
  if (asymmetric_) transport::heavy_fence();
  transport::Backoff backoff(false);
  while (owner_busy_.load(std::memory_order_acquire)) {
    if (backoff.next() == transport::Backoff::Stage::sleep) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace tpf::detail
