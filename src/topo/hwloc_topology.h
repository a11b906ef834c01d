// Loading hwloc topologies: the one place that knows how (which of hwloc's components to leave
// out, how an XML export stands for the machine), for the modules that read the machine
// (tpf/topology.h, topo/network_devices.h, topo/numa_placement.h), and owning handles for what
// they load.
#pragma once

#include <hwloc.h>

#include <memory>
#include <string>

namespace tpf::topo {

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using Topology = std::unique_ptr<hwloc_topology, TopologyDeleter>;

struct BitmapDeleter {
  void operator()(hwloc_bitmap_s* b) const { hwloc_bitmap_free(b); }
};
using Bitmap = std::unique_ptr<hwloc_bitmap_s, BitmapDeleter>;

struct TopologyRequest {
  // The PCI devices and their network and OpenFabrics devices too (I/O discovery: slower).
  bool with_io = false;
  // Read this hwloc XML export instead of the machine (tests); empty: this machine.
  std::string xml;
};

// This machine's topology as this process sees it (hwloc restricts it to the CPUs the process may
// use: cgroup cpuset, taskset), or the XML export's; null where hwloc cannot load the machine's.
// Throws Error(invalid_argument) naming an XML file hwloc cannot load.
Topology load_topology(const TopologyRequest& request = {});

}  // namespace tpf::topo
