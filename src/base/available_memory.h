// How much memory this machine can still give: what a job about to reserve shared memory (tmpfs
// pages, which nothing can reclaim without swap) compares its need with, so that it fails with a
// message rather than wake the OOM killer, which picks the largest process it sees, not the
// pages' owner (for 512 ranks on one host it killed their launcher).
#pragma once

#include <cstddef>
#include <optional>

namespace tpf::base {

// MemAvailable (/proc/meminfo), lowered to what this process's memory cgroup has left where it
// has a limit (v2: memory.max - memory.current; v1: memory.limit_in_bytes - usage_in_bytes).
// nullopt where /proc/meminfo cannot be read.
std::optional<size_t> available_memory_bytes();

}  // namespace tpf::base
