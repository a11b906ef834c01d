#include "topo/network_devices.h"

#include <hwloc.h>
#include <ifaddrs.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <strings.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "topo/cpu_sets.h"
#include "topo/hwloc_topology.h"

namespace tpf::topo {
namespace {

// UCX names an RDMA device by its port: the first port hwloc says is active (state 4), else 1.
// Down where hwloc gives port states and none is active (a cable out, a storage HCA left unused).
struct RdmaPort {
  std::string name;
  bool down = false;
};
RdmaPort rdma_port(hwloc_obj_t device) {
  bool any_state = false;
  for (unsigned port = 1; port <= 8; ++port) {
    const std::string key = "Port" + std::to_string(port) + "State";
    const char* state = hwloc_obj_get_info_by_name(device, key.c_str());
    if (state == nullptr) continue;
    if (std::string(state) == "4") return {std::string(device->name) + ":" + std::to_string(port)};
    any_state = true;
  }
  return {std::string(device->name) + ":1", any_state};
}

std::string busid_of(hwloc_obj_t device) {
  for (hwloc_obj_t o = device->parent; o != nullptr; o = o->parent) {
    if (o->type == HWLOC_OBJ_PCI_DEVICE) return pci_busid(o->attr->pcidev);
  }
  return "";
}

std::vector<NetworkDevice> hwloc_devices(hwloc_topology_t topology) {
  std::vector<NetworkDevice> devices;
  for (hwloc_obj_t o = hwloc_get_next_osdev(topology, nullptr); o != nullptr;
       o = hwloc_get_next_osdev(topology, o)) {
    const hwloc_obj_osdev_type_t type = o->attr->osdev.type;
    if (o->name == nullptr ||
        (type != HWLOC_OBJ_OSDEV_NETWORK && type != HWLOC_OBJ_OSDEV_OPENFABRICS)) {
      continue;
    }
    NetworkDevice device;
    device.rdma = type == HWLOC_OBJ_OSDEV_OPENFABRICS;
    if (device.rdma) {
      RdmaPort port = rdma_port(o);
      device.name = std::move(port.name);
      device.down = port.down;
    } else {
      device.name = o->name;
    }
    device.pci_busid = busid_of(o);
    if (const char* address = hwloc_obj_get_info_by_name(o, "Address")) device.address = address;
    if (device.pci_busid.empty()) continue;  // hwloc lists only what hangs off PCI
    device.near_cpus = cpus_near(topology, o);
    device.pci_path = ancestry(o);
    devices.push_back(std::move(device));
  }
  std::stable_sort(devices.begin(), devices.end(), [](const auto& a, const auto& b) {
    return a.pci_busid != b.pci_busid ? a.pci_busid < b.pci_busid : a.name < b.name;
  });
  return devices;
}

// The interfaces of this process's network namespace that are up, but loopback, by name in
// order, each with its hardware address ("02:fc:00:00:00:01"; empty where it has none).
// getifaddrs asks the kernel (netlink), which answers for the caller's namespace whether or not
// /sys was mounted for it.
std::map<std::string, std::string> namespace_interfaces() {
  std::map<std::string, std::string> interfaces;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return interfaces;
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if ((a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
    std::string& address = interfaces[a->ifa_name];
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_PACKET) continue;
    const auto* link = reinterpret_cast<const sockaddr_ll*>(a->ifa_addr);
    address.clear();
    for (int i = 0; i < link->sll_halen; ++i) {
      char byte[4];
      std::snprintf(byte, sizeof byte, i ? ":%02x" : "%02x", link->sll_addr[i]);
      address += byte;
    }
  }
  freeifaddrs(list);
  return interfaces;
}

}  // namespace

std::vector<NetworkDevice> discover_network_devices(const std::string& hwloc_xml) {
  const Topology topology = load_topology({.with_io = true, .xml = hwloc_xml});
  return network_devices_in(topology.get(), hwloc_xml.empty());
}

std::vector<NetworkDevice> network_devices_in(hwloc_topology* io_topology, bool this_machine) {
  std::vector<NetworkDevice> devices;
  if (io_topology != nullptr) devices = hwloc_devices(io_topology);
  if (!this_machine) return devices;
  // On this machine: only the interfaces this namespace has (hwloc may list the machine's where
  // /sys was not remounted for the namespace), or, where hwloc found none, all of those.
  const std::map<std::string, std::string> here = namespace_interfaces();
  std::erase_if(devices, [&](const NetworkDevice& d) {
    if (d.rdma) return false;
    const auto it = here.find(d.name);  // the same name and, where both say, the same address
    return it == here.end() || (!d.address.empty() && !it->second.empty() &&
                                strcasecmp(d.address.c_str(), it->second.c_str()) != 0);
  });
  if (devices.empty()) {
    for (const auto& [name, address] : here)
      devices.push_back({name, "", false, {}, address, {}, false});
  }
  return devices;
}

std::vector<int> process_binding() {
  Topology topology = load_topology();
  if (!topology) return {};
  Bitmap set(hwloc_bitmap_alloc());
  if (hwloc_get_cpubind(topology.get(), set.get(), HWLOC_CPUBIND_PROCESS) != 0 ||
      hwloc_bitmap_isincluded(hwloc_topology_get_allowed_cpuset(topology.get()), set.get())) {
    hwloc_bitmap_copy(set.get(), hwloc_topology_get_allowed_cpuset(topology.get()));
  }
  return pu_os_indices(set.get());
}

namespace {

// The devices that can be rails: the RDMA ports where there are any (a server's Ethernet
// management port is no rail), else all; none that is down.
std::vector<const NetworkDevice*> rail_candidates(const std::vector<NetworkDevice>& devices) {
  const bool rdma_only =
      std::any_of(devices.begin(), devices.end(), [](const auto& d) { return d.rdma && !d.down; });
  std::vector<const NetworkDevice*> candidates;
  for (const NetworkDevice& device : devices)
    if (!device.down && (device.rdma || !rdma_only)) candidates.push_back(&device);
  return candidates;
}

}  // namespace

std::vector<std::string> nearest_devices(const std::vector<NetworkDevice>& devices,
                                         const std::vector<int>& binding) {
  std::vector<std::string> usable, near;
  for (const NetworkDevice* candidate : rail_candidates(devices)) {
    const NetworkDevice& device = *candidate;
    usable.push_back(device.name);
    const bool next_to_binding =
        device.near_cpus.empty() || binding.empty() ||
        std::any_of(binding.begin(), binding.end(), [&](int cpu) {
          return std::binary_search(device.near_cpus.begin(), device.near_cpus.end(), cpu);
        });
    if (next_to_binding) near.push_back(device.name);
  }
  return near.empty() ? usable : near;
}

std::vector<std::string> devices_nearest_gpu(const std::vector<NetworkDevice>& devices,
                                             const std::vector<std::string>& gpu_path) {
  std::vector<std::string> nearest;
  size_t deepest = 0;
  for (const NetworkDevice* device : rail_candidates(devices)) {
    const size_t shared = shared_ancestry(device->pci_path, gpu_path);
    if (shared > deepest) {
      nearest.clear();
      deepest = shared;
    }
    if (shared == deepest) nearest.push_back(device->name);
  }
  return nearest;
}

std::string describe_devices(const std::vector<NetworkDevice>& devices) {
  std::string text;
  for (const NetworkDevice& device : devices) {
    if (!text.empty()) text += ", ";
    text += device.name;
    if (!device.near_cpus.empty()) text += " (cpus " + format_ranges(device.near_cpus) + ")";
    if (device.down) text += " (down)";
  }
  return text;
}

}  // namespace tpf::topo
