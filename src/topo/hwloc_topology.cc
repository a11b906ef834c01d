#include "topo/hwloc_topology.h"

#include "tpf/error.h"

namespace tpf::topo {

Topology load_topology(const TopologyRequest& request) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return nullptr;
  Topology topology(raw);
  if (request.with_io) {
    hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    // Not hwloc's libpciaccess component (it leaks at every load, which LeakSanitizer reports;
    // hwloc's Linux backend reads the PCI devices and their locality from sysfs anyway), nor its
    // OpenCL and OpenGL ones (nothing of theirs is a network device).
    for (const char* component : {"pci", "opencl", "gl"})
      hwloc_topology_set_components(raw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, component);
  }
  const std::string& xml = request.xml;
  if (!xml.empty() && hwloc_topology_set_xml(raw, xml.c_str()) != 0) {
    throw Error(ErrorCode::invalid_argument, "'" + xml + "' is not an hwloc XML topology");
  }
  if (hwloc_topology_load(raw) != 0) {
    if (!xml.empty()) {
      throw Error(ErrorCode::invalid_argument,
                  "hwloc could not load the topology in '" + xml + "'");
    }
    return nullptr;
  }
  return topology;
}

}  // namespace tpf::topo
