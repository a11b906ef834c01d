// The pace of the communicator's own threads (the point-to-point engines P2pEngine and NetP2p, the
// collectives' OperationQueue), which move only what nobody waits for: waiters move their own.
#pragma once

#include <chrono>

namespace tpf::detail {

// The thread looks at its work once a tick, and leaves new work (or work with a waiter) for a tick.
inline constexpr auto kBackgroundTick = std::chrono::milliseconds(1);
// Ticks it keeps with nothing pending before it sleeps until woken (submit need not wake it).
inline constexpr int kBackgroundQuietTicks = 100;
// OperationQueue's worker doubles its tick up to this while it finds its queue empty: each look
// preempts a rank where the ranks fill the cores (a 1 ms tick cost 10 % of an async all_reduce of
// 4 MiB on 2 cores), and a queue its waiters empty needs none.
inline constexpr auto kBackgroundLongestTick = std::chrono::milliseconds(16);
// OperationQueue: a waiter that comes at least this long after its collective was issued did work
// of its own meanwhile (it overlaps), so the worker is woken to start the next collective at once;
// one that comes sooner would have run it itself, and waking the worker for it would only cost a
// core where the ranks fill them (docs/fabric.md, "Threads").
inline constexpr auto kOverlappingWaiter = std::chrono::microseconds(50);

}  // namespace tpf::detail
