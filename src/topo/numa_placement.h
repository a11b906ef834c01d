// Puts memory on the NUMA node of the calling rank, so a rank's staging buffers are local to the
// core that writes them (peers then read across the interconnect once, instead of the owner
// writing remotely on every step).
#pragma once

#include <cstddef>

namespace tpf::topo {

// Binds [addr, addr + bytes) to the NUMA node(s) the calling thread runs on, before any page is
// allocated. Returns false (and does nothing) on single-node machines or if the kernel refuses.
bool bind_area_to_local_numa(void* addr, size_t bytes) noexcept;

}  // namespace tpf::topo
