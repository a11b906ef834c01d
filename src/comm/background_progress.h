// The pace of the point-to-point engines' own threads (P2pEngine, NetP2p), which move only the
// transfers nobody waits for: waiters move their own.
#pragma once

#include <chrono>

namespace tpf::detail {

// The thread looks at the transfers once a tick, and steps back a tick after a new one or a waiter.
inline constexpr auto kBackgroundTick = std::chrono::milliseconds(1);
// Ticks it keeps with nothing pending before it sleeps until woken (submit need not wake it).
inline constexpr int kBackgroundQuietTicks = 100;

}  // namespace tpf::detail
