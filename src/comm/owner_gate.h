// Lets the thread that owns a communicator (the first to make a blocking call) run operations
// inline without a single locked instruction: on x86 a locked instruction drains the store buffer,
// so a small broadcast's root would wait for its message's cache line to reach its readers before
// returning. Everyone else (other threads, the progress thread) holds a claim while it uses the
// fabric, and the owner stays out while any claim is held.
//
// The owner's plain store of "busy" followed by its load of the claims, against a claimer's
// increment followed by its load of "busy", is Dekker's pattern; the claimer pays for both sides
// with heavy_fence() (transport/asymmetric_fence.h), or both use full fences where membarrier is
// unavailable.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

namespace tpf::detail {

class OwnerGate {
 public:
  explicit OwnerGate(bool asymmetric) : asymmetric_(asymmetric) {}

  // True if the calling thread is the owner (it becomes the owner if there is none yet) and no
  // claim is held; it must then call owner_exit() when its operation is done.
  bool owner_enter() noexcept;
  void owner_exit() noexcept { owner_busy_.store(false, std::memory_order_release); }
  // True on the owner thread (set once, never changed): outside owner_enter/owner_exit it is not
  // in the fabric, so it need not wait for itself.
  bool owned_by_this_thread() const noexcept {
    return owner_.load(std::memory_order_relaxed) == std::this_thread::get_id();
  }

  // Takes a claim (the owner cannot enter from now on) without waiting.
  void add_claim() noexcept { claims_.fetch_add(1, std::memory_order_seq_cst); }
  // After add_claim (on this thread or one it synchronized with): waits until the owner has left.
  // Bounded by the owner's operation, which is bounded by its own deadline.
  void wait_owner_out() noexcept;
  // Drops a claim; true if it was the last one (the owner may enter again).
  bool release_claim() noexcept { return claims_.fetch_sub(1, std::memory_order_acq_rel) == 1; }

 private:
  std::atomic<std::thread::id> owner_{};
  std::atomic<bool> owner_busy_{false};
  std::atomic<uint32_t> claims_{0};
  const bool asymmetric_;
};

}  // namespace tpf::detail
