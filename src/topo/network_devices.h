// The network devices of this machine and which cores each sits next to, read with hwloc, so a
// rank can cross the network through the NIC nearest to it (TPF_RAIL_DEVICES=auto, `tpf run
// --rail-devices auto`) instead of the user naming one per local rank. On a GPU server a GPU's
// NIC usually hangs off the GPU's PCIe switch, under the socket whose cores the GPU's rank is
// bound to; a device next to the rank's CPU binding is then on its GPU's side of the machine.
#pragma once

#include <string>
#include <vector>

struct hwloc_topology;  // hwloc.h's, for the loaded forms (topo/hwloc_topology.h)

namespace tpf::topo {

struct NetworkDevice {
  std::string name;            // as UCX_NET_DEVICES names it: "mlx5_0:1" (an RDMA port), "eth0"
  std::string pci_busid;       // "0000:17:00.0"; empty for a device not seen on PCI
  bool rdma = false;           // an InfiniBand / RoCE port (hwloc's OpenFabrics device)
  std::vector<int> near_cpus;  // OS indexes of the cores' PUs next to it; empty: not known
  std::string address;         // a network interface's hardware address, where known
  std::vector<std::string> pci_path;  // its ancestors in hwloc's tree (topo::ancestry); empty:
                                      // not known
  bool down = false;  // an RDMA device none of whose ports hwloc reports active: never a rail
};

// The machine's network devices, in PCI order: hwloc's OpenFabrics ports (the first active port
// of each; port 1 where hwloc gives no state) and the network interfaces on PCI that the
// process's network namespace has (by name and hardware address: a namespace entered without
// remounting /sys shows hwloc the machine's). Where there are none (a container or network
// namespace without the machine's NICs, such as the emulated hosts of scripts/emulated-hosts.sh),
// the namespace's interfaces that are up, other than loopback, in name order, with no locality.
// `hwloc_xml`: read the topology from that hwloc XML export instead of this machine (tests; the
// namespace is then not looked at). Throws Error(invalid_argument) for an XML file hwloc cannot
// load.
std::vector<NetworkDevice> discover_network_devices(const std::string& hwloc_xml = "");
// The same from a topology loaded with I/O (topo::load_topology; null where hwloc could not load
// the machine), so that a caller that reads the GPUs too loads the machine once (~10 ms a load).
// `this_machine`: the topology is this machine's, not an export's (the namespace is looked at).
std::vector<NetworkDevice> network_devices_in(hwloc_topology* io_topology, bool this_machine);

// The CPUs (PU OS indexes) this process is bound to; every allowed one where it is not bound or
// hwloc cannot say.
std::vector<int> process_binding();

// The devices a rank bound to `binding` should choose from, in `devices`' order: only the RDMA
// ports where there are any (a server's Ethernet management port is no rail), none that is down,
// and of those the ones next to a CPU of the binding (or whose locality is not known); all of them
// where none is.
std::vector<std::string> nearest_devices(const std::vector<NetworkDevice>& devices,
                                         const std::vector<int>& binding);

// The devices a rank driving the GPU whose ancestors are `gpu_path` (topo/gpus.h) should choose
// from, in `devices`' order: of the same usable ones (the RDMA ports where there are any), those
// whose PCI path meets the GPU's deepest, NCCL's "PIX before PXB before PHB before SYS": the
// NIC under the GPU's own PCIe switch, else those under its host bridge, else its socket's.
std::vector<std::string> devices_nearest_gpu(const std::vector<NetworkDevice>& devices,
                                             const std::vector<std::string>& gpu_path);

// "mlx5_0:1 (cpus 0-7)" per device, comma-separated: what `tpf topo` prints.
std::string describe_devices(const std::vector<NetworkDevice>& devices);

}  // namespace tpf::topo
