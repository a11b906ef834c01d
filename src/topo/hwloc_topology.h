// Loading hwloc topologies: the one place that knows how (which of hwloc's components to leave
// out, how an XML export stands for the machine), for the modules that read the machine
// (tpf/topology.h, topo/network_devices.h, topo/gpus.h, topo/numa_placement.h), owning handles
// for what they load, and where an object sits in what they load.
#pragma once

#include <hwloc.h>

#include <memory>
#include <string>
#include <vector>

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

// "0000:17:00.0": a PCI device's bus id as lspci and UCX print it.
std::string pci_busid(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci);

// Where `object` sits: a label for each of its ancestors, from the machine down to its parent
// ("Package#0", "host bridge 0000:[80-ff]", "PCI bridge 0000:85:00.0", "PCI 0000:17:00.0").
// The labels come from logical indexes and PCI addresses, so two loads of one machine give the
// same path; the longer the prefix two paths share, the nearer their objects (the same PCIe
// switch before the same host bridge before the same socket).
std::vector<std::string> ancestry(hwloc_obj_t object);

// The CPUs (PU OS indexes) of `object`'s nearest non-I/O ancestor: the socket or NUMA node the
// PCIe root it hangs off belongs to. Empty where it has none.
std::vector<int> cpus_near(hwloc_topology_t topology, hwloc_obj_t object);

// The length of the prefix `a` and `b` share.
size_t shared_ancestry(const std::vector<std::string>& a, const std::vector<std::string>& b);

}  // namespace tpf::topo
