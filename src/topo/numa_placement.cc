#include "topo/numa_placement.h"

#include <dirent.h>
#include <hwloc.h>

#include <cctype>
#include <cstring>

#include "topo/hwloc_topology.h"

namespace tpf::topo {
namespace {

// hwloc discovery costs milliseconds, so one topology serves the whole process (kept to the end).
hwloc_topology_t process_topology() {
  static hwloc_topology_t topology = load_topology().release();
  return topology;
}

// Counts /sys/devices/system/node/nodeN: cheap, so single-node machines never load hwloc here.
int sysfs_numa_nodes() {
  static const int count = [] {
    int nodes = 0;
    if (DIR* dir = opendir("/sys/devices/system/node")) {
      while (dirent* entry = readdir(dir)) {
        if (std::strncmp(entry->d_name, "node", 4) == 0 && std::isdigit(entry->d_name[4])) ++nodes;
      }
      closedir(dir);
    }
    return nodes;
  }();
  return count;
}

}  // namespace

bool bind_area_to_local_numa(void* addr, size_t bytes) noexcept {
  if (sysfs_numa_nodes() <= 1) return false;
  hwloc_topology_t topo = process_topology();
  if (topo == nullptr || hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE) <= 1) return false;
  const Bitmap cpus(hwloc_bitmap_alloc());
  const Bitmap nodes(hwloc_bitmap_alloc());
  // A bound rank (tpf run --bind) gets its binding's nodes; an unbound one the node it runs on.
  if (hwloc_get_cpubind(topo, cpus.get(), HWLOC_CPUBIND_THREAD) != 0 ||
      hwloc_bitmap_isincluded(hwloc_topology_get_allowed_cpuset(topo), cpus.get())) {
    hwloc_get_last_cpu_location(topo, cpus.get(), HWLOC_CPUBIND_THREAD);
  }
  hwloc_cpuset_to_nodeset(topo, cpus.get(), nodes.get());
  const bool bound = !hwloc_bitmap_iszero(nodes.get()) &&
                     hwloc_set_area_membind(topo, addr, bytes, nodes.get(), HWLOC_MEMBIND_BIND,
                                            HWLOC_MEMBIND_BYNODESET) == 0;
  return bound;
}

}  // namespace tpf::topo
