// Machine discovery and rank pinning through hwloc.
//
// hwloc by default restricts the topology to the CPUs this process may use (cgroup cpuset,
// taskset), so everything here describes the machine *as this job sees it*; binding then never
// asks for a CPU the kernel would refuse.
#include "tpf/topology.h"

#include <hwloc.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "base/byte_size.h"
#include "topo/cpu_sets.h"
#include "topo/gpus.h"
#include "topo/hwloc_topology.h"
#include "tpf/error.h"

namespace tpf {
namespace {

// Owns this machine's loaded hwloc topology (topo/hwloc_topology.h).
class HwlocTopology {
 public:
  HwlocTopology() : topo_(topo::load_topology()) {
    if (!topo_) {
      throw Error(ErrorCode::system,
                  "hwloc could not discover the machine topology "
                  "(hwloc_topology_init or hwloc_topology_load failed)");
    }
  }

  hwloc_topology_t get() const { return topo_.get(); }

  // Cores in logical order. Some virtual machines and containers expose PUs without a core level;
  // then each PU stands in for a core so callers always get at least one.
  std::vector<hwloc_obj_t> cores() const {
    std::vector<hwloc_obj_t> out = objects(HWLOC_OBJ_CORE);
    if (out.empty()) out = objects(HWLOC_OBJ_PU);
    return out;
  }

  std::vector<hwloc_obj_t> objects(hwloc_obj_type_t type) const {
    std::vector<hwloc_obj_t> out;
    int n = hwloc_get_nbobjs_by_type(get(), type);
    for (int i = 0; i < n; ++i) out.push_back(hwloc_get_obj_by_type(get(), type, i));
    return out;
  }

 private:
  topo::Topology topo_;
};

using topo::format_ranges;
using topo::pu_os_indices;

const char* plural(size_t n, const char* one, const char* many) { return n == 1 ? one : many; }

}  // namespace

MachineTopology discover_topology() {
  HwlocTopology topo;
  MachineTopology machine;

  std::vector<hwloc_obj_t> packages = topo.objects(HWLOC_OBJ_PACKAGE);
  std::vector<hwloc_obj_t> numa = topo.objects(HWLOC_OBJ_NUMANODE);
  machine.sockets = packages.empty() ? 1 : static_cast<int>(packages.size());
  machine.numa_nodes = numa.empty() ? 1 : static_cast<int>(numa.size());

  for (hwloc_obj_t core : topo.cores()) {
    CoreInfo info;
    info.logical_index = static_cast<int>(core->logical_index);
    // NUMA nodes hang off the memory side of the tree in hwloc 2, so match by cpuset instead of
    // walking ancestors.
    for (hwloc_obj_t node : numa) {
      if (hwloc_bitmap_intersects(core->cpuset, node->cpuset)) {
        info.numa_node = static_cast<int>(node->logical_index);
        break;
      }
    }
    if (hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(topo.get(), HWLOC_OBJ_PACKAGE, core)) {
      info.socket = static_cast<int>(pkg->logical_index);
    }
    info.pus = pu_os_indices(core->cpuset);
    machine.cores.push_back(std::move(info));
  }

  std::vector<hwloc_obj_t> l3 = topo.objects(HWLOC_OBJ_L3CACHE);
  if (!l3.empty() && l3.front()->attr != nullptr) {
    machine.l3_bytes = static_cast<size_t>(l3.front()->attr->cache.size);
  }
  return machine;
}

std::string MachineTopology::describe() const {
  size_t pus = 0;
  for (const CoreInfo& core : cores) pus += core.pus.size();

  std::ostringstream out;
  out << "machine: " << sockets << ' ' << plural(sockets, "socket", "sockets") << ", " << numa_nodes
      << ' ' << plural(numa_nodes, "NUMA node", "NUMA nodes") << ", " << cores.size() << ' '
      << plural(cores.size(), "core", "cores") << ", " << pus << ' '
      << plural(pus, "hardware thread", "hardware threads") << '\n';
  out << "L3 cache: "
      << (l3_bytes == 0 ? std::string("unknown")
                        : base::format_exact_bytes(l3_bytes) + " per instance")
      << '\n';
  // One line per (socket, NUMA node) pair, in order of first appearance.
  std::vector<std::pair<int, int>> groups;
  for (const CoreInfo& core : cores) {
    std::pair<int, int> key{core.socket, core.numa_node};
    bool seen = false;
    for (const auto& g : groups) seen = seen || g == key;
    if (!seen) groups.push_back(key);
  }
  for (const auto& [socket, node] : groups) {
    std::vector<int> core_ids;
    std::vector<int> pu_ids;
    for (const CoreInfo& core : cores) {
      if (core.socket != socket || core.numa_node != node) continue;
      core_ids.push_back(core.logical_index);
      pu_ids.insert(pu_ids.end(), core.pus.begin(), core.pus.end());
    }
    std::sort(pu_ids.begin(), pu_ids.end());
    out << "socket " << socket << ", NUMA node " << node << ": cores " << format_ranges(core_ids)
        << " (CPUs " << format_ranges(pu_ids) << ")\n";
  }
  return out.str();
}

const char* bind_policy_name(BindPolicy policy) noexcept {
  switch (policy) {
    case BindPolicy::core: return "core";
    case BindPolicy::numa: return "numa";
    case BindPolicy::gpu: return "gpu";
    case BindPolicy::none: break;
  }
  return "none";
}

BindPolicy parse_bind_policy(const std::string& name) {
  if (name == "none") return BindPolicy::none;
  if (name == "core") return BindPolicy::core;
  if (name == "numa") return BindPolicy::numa;
  if (name == "gpu") return BindPolicy::gpu;
  throw Error(ErrorCode::invalid_argument, "parse_bind_policy: unknown binding '" + name +
                                               "'; use one of core, numa, gpu, none");
}

namespace {

// Pins this process to `cpus` and its memory to `nodes`, described as `where`; a refusal is a
// warning (below).
std::string bind_cpus_and_memory(const HwlocTopology& topo, hwloc_const_cpuset_t cpus,
                                 hwloc_const_nodeset_t nodes, const std::string& where,
                                 int local_rank) {
  if (hwloc_bitmap_iszero(cpus)) {
    return "warning: " + where + " has no CPUs; local rank " + std::to_string(local_rank) +
           " runs unbound";
  }
  if (hwloc_set_cpubind(topo.get(), cpus, HWLOC_CPUBIND_PROCESS) != 0) {
    return "warning: could not bind local rank " + std::to_string(local_rank) + " to " + where +
           ": " + std::strerror(errno) + "; running unbound";
  }
  const hwloc_topology_support* support = hwloc_topology_get_support(topo.get());
  bool can_membind = support != nullptr && support->membind != nullptr &&
                     support->membind->set_thisproc_membind && support->membind->bind_membind;
  if (!can_membind) return where + ", memory not bound (unsupported)";
  if (hwloc_bitmap_iszero(nodes)) return where + ", memory not bound (no NUMA node known)";
  if (hwloc_set_membind(topo.get(), nodes, HWLOC_MEMBIND_BIND,
                        HWLOC_MEMBIND_PROCESS | HWLOC_MEMBIND_BYNODESET) != 0) {
    return "warning: bound local rank " + std::to_string(local_rank) + " to " + where +
           " but not its memory: " + std::strerror(errno);
  }
  return where + ", memory bound";
}

// gpu: the CPUs and memory of the GPU's nearest non-I/O ancestor (its socket or NUMA node).
std::string bind_next_to_gpu(const HwlocTopology& topo, int local_rank) {
  const std::vector<topo::Gpu> gpus = topo::discover_gpus();
  const topo::GpuChoice choice =
      topo::choose_gpu(gpus, topo::gpu_hints_from_environment(local_rank));
  if (!choice.gpu) {
    return "warning: no GPU for local rank " + std::to_string(local_rank) + " (" + choice.why +
           "); running unbound";
  }
  const topo::Gpu& gpu = gpus[*choice.gpu];
  if (gpu.near_cpus.empty()) {
    return "warning: hwloc does not say which CPUs GPU " + gpu.pci_busid +
           " is next to; local rank " + std::to_string(local_rank) + " runs unbound";
  }
  topo::Bitmap cpus(hwloc_bitmap_alloc()), nodes(hwloc_bitmap_alloc());
  for (int cpu : gpu.near_cpus) hwloc_bitmap_set(cpus.get(), static_cast<unsigned>(cpu));
  for (int node : gpu.near_numa_nodes) hwloc_bitmap_set(nodes.get(), static_cast<unsigned>(node));
  const std::string where =
      "GPU " + gpu.pci_busid + "'s CPUs " + format_ranges(gpu.near_cpus) + " (" + choice.why + ")";
  return bind_cpus_and_memory(topo, cpus.get(), nodes.get(), where, local_rank);
}

}  // namespace

// A failure to bind (seccomp, restricted containers, a cpuset that changed under us) must not stop
// a job that would otherwise run fine, only slower: it comes back as a string that starts with
// "warning:" for the caller to print, instead of an exception.
std::string bind_current_process(BindPolicy policy, int local_rank, int local_world_size) {
  if (local_world_size < 1 || local_rank < 0 || local_rank >= local_world_size) {
    throw Error(ErrorCode::invalid_argument,
                "bind_current_process: local_rank " + std::to_string(local_rank) +
                    " is not in [0, local_world_size=" + std::to_string(local_world_size) + ")");
  }
  if (policy == BindPolicy::none) return "";

  HwlocTopology topo;
  if (policy == BindPolicy::core) {
    // Each rank gets its share of the cores, cores / ranks consecutive ones (at least one), so
    // one rank alone keeps every core for its threads and N ranks on N cores get one each.
    std::vector<hwloc_obj_t> cores = topo.cores();
    const size_t share = std::max<size_t>(1, cores.size() / static_cast<size_t>(local_world_size));
    const size_t first = static_cast<size_t>(local_rank) * share % cores.size();
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    for (size_t i = first; i < first + share && i < cores.size(); ++i) {
      hwloc_bitmap_or(set, set, cores[i]->cpuset);
    }
    const std::string which =
        share == 1
            ? "core " + std::to_string(cores[first]->logical_index)
            : "cores " + std::to_string(cores[first]->logical_index) + "-" +
                  std::to_string(cores[std::min(first + share, cores.size()) - 1]->logical_index);
    const std::string where = which + " (CPUs " + format_ranges(pu_os_indices(set)) + ")";
    const int rc = hwloc_set_cpubind(topo.get(), set, HWLOC_CPUBIND_PROCESS);
    const int err = errno;
    hwloc_bitmap_free(set);
    if (rc != 0) {
      return "warning: could not bind local rank " + std::to_string(local_rank) + " to " + where +
             ": " + std::strerror(err) + "; running unbound";
    }
    return where;
  }

  if (policy == BindPolicy::gpu) return bind_next_to_gpu(topo, local_rank);

  // numa: CPUs of the node, and memory from it where the kernel lets us.
  std::vector<hwloc_obj_t> nodes = topo.objects(HWLOC_OBJ_NUMANODE);
  if (nodes.empty()) {
    return "warning: no NUMA node found; local rank " + std::to_string(local_rank) +
           " runs unbound";
  }
  hwloc_obj_t node = nodes[static_cast<size_t>(local_rank) % nodes.size()];
  std::string where = "NUMA node " + std::to_string(node->logical_index) + " (CPUs " +
                      format_ranges(pu_os_indices(node->cpuset)) + ")";
  return bind_cpus_and_memory(topo, node->cpuset, node->nodeset, where, local_rank);
}

}  // namespace tpf
