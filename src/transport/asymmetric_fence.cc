#include "transport/asymmetric_fence.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>


namespace tpf::transport {
namespace {

long membarrier(int command) { return ::syscall(__NR_membarrier, command, 0, 0); }

}  // namespace

bool register_asymmetric_fences() noexcept {
  static const bool registered = [] {
    long supported = membarrier(MEMBARRIER_CMD_QUERY);
    if (supported < 0 || (supported & MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0) return false;
    return membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
  }();
  return registered;
}

void heavy_fence() noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Cannot fail once registered; if it did, the sleeper's bounded sleep still notices the post.
  membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED);
}

}  // namespace tpf::transport
