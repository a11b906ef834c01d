// What this machine is (from hwloc): cores, NUMA nodes, sockets, caches; and how to pin a rank.
#pragma once

#include <string>
#include <vector>

#include "tpf/export.h"

namespace TPF_API tpf {

struct CoreInfo {
  int logical_index = 0;  // hwloc logical index of the core
  int numa_node = 0;
  int socket = 0;
  std::vector<int> pus;  // OS indices of the hardware threads of this core
};

struct MachineTopology {
  int sockets = 1;
  int numa_nodes = 1;
  std::vector<CoreInfo> cores;
  size_t l3_bytes = 0;  // per L3 instance, 0 if unknown
  // Human-readable summary (the output of `tpf topo`).
  std::string describe() const;
};

MachineTopology discover_topology();

enum class BindPolicy { none, core, numa, gpu };
// Throws Error(invalid_argument) for an unknown name; accepts "none", "core", "numa", "gpu".
BindPolicy parse_bind_policy(const std::string& name);
// "none", "core", "numa" or "gpu": what parse_bind_policy reads back.
const char* bind_policy_name(BindPolicy policy) noexcept;

// Pins the calling process: core -> the local_rank-th block of max(1, cores / local_world_size)
// consecutive cores (round-robin when ranks outnumber cores), numa -> the cores of NUMA node
// (local_rank mod nodes), gpu -> the cores and memory next to the GPU this local rank drives
// (TPF_GPU, else CUDA device local_rank mod the visible ones: topo/gpus.h). Returns a
// description of where it was bound ("" for none); a binding the machine refuses, or a GPU that
// cannot be told, comes back as a string starting with "warning:". Throws Error(invalid_argument)
// for a local rank outside [0, local_world_size) and, with gpu, a TPF_GPU that names no GPU.
std::string bind_current_process(BindPolicy policy, int local_rank, int local_world_size);

}  // namespace tpf
