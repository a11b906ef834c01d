#include "topo/hwloc_topology.h"

#include <algorithm>
#include <cstdio>

#include "topo/cpu_sets.h"
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

std::string pci_busid(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci) {
  char text[32];
  std::snprintf(text, sizeof text, "%04x:%02x:%02x.%01x", pci.domain, pci.bus, pci.dev, pci.func);
  return text;
}

namespace {

std::string label_of(hwloc_obj_t o) {
  char text[64];
  if (o->type == HWLOC_OBJ_BRIDGE && o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST) {
    const auto& down = o->attr->bridge.downstream.pci;
    std::snprintf(text, sizeof text, "host bridge %04x:[%02x-%02x]", down.domain,
                  down.secondary_bus, down.subordinate_bus);
  } else if (o->type == HWLOC_OBJ_BRIDGE || o->type == HWLOC_OBJ_PCI_DEVICE) {
    // A PCI-to-PCI bridge's upstream side is a PCI device like any other.
    const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci =
        o->type == HWLOC_OBJ_BRIDGE ? o->attr->bridge.upstream.pci : o->attr->pcidev;
    return (o->type == HWLOC_OBJ_BRIDGE ? "PCI bridge " : "PCI ") + pci_busid(pci);
  } else {
    std::snprintf(text, sizeof text, "%s#%u", hwloc_obj_type_string(o->type), o->logical_index);
  }
  return text;
}

}  // namespace

std::vector<std::string> ancestry(hwloc_obj_t object) {
  std::vector<std::string> path;
  for (hwloc_obj_t o = object->parent; o != nullptr; o = o->parent) path.push_back(label_of(o));
  std::reverse(path.begin(), path.end());
  return path;
}

std::vector<int> cpus_near(hwloc_topology_t topology, hwloc_obj_t object) {
  const hwloc_obj_t near = hwloc_get_non_io_ancestor_obj(topology, object);
  return near != nullptr ? pu_os_indices(near->cpuset) : std::vector<int>{};
}

size_t shared_ancestry(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  return static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first -
                             a.begin());
}

}  // namespace tpf::topo
