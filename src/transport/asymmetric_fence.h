// Asymmetric fences for the fabric's post-then-check-doorbell pattern.
//
// A rank that posts a signal then checks whether the waiter sleeps, and a waiter that raises its
// "sleeping" flag then re-checks the signal, form Dekker's pattern: each side needs a full fence
// between its store and its load, or both can miss the other and the wake-up is lost. On x86 a full
// fence drains the store buffer, which waits for the peer's copy of the line to be invalidated:
// measured on the 2-core EPYC VM, a 2-rank barrier took 0.56 us with it and 0.35 us without.
//
// Posting happens on every step and sleeping only after ~2 ms of waiting, so the sleeper pays for
// both sides: membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) makes every running thread of every
// registered process execute a full fence before it returns, which turns the poster's compiler
// barrier into a real one. A process must register before any peer relies on it; where the kernel
// refuses (old kernel, seccomp), all ranks fall back to full fences on the posting side.
#pragma once

#include <atomic>

namespace tpf::transport {

// Registers this process for asymmetric fences (once; later calls return the first answer).
// False where membarrier's global expedited command is unavailable, or TPF_ASYMMETRIC_FENCES=0.
bool register_asymmetric_fences() noexcept;

// The poster's side: orders the preceding store before the following load when, and only when,
// the other side uses heavy_fence().
inline void light_fence() noexcept { std::atomic_signal_fence(std::memory_order_seq_cst); }

// The sleeper's side: a full fence on this thread and on every running thread of the registered
// processes. Costs a system call (about 1 us); only for the slow path.
void heavy_fence() noexcept;

}  // namespace tpf::transport
