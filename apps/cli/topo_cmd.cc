// `tpf topo`: what tpfabric sees of this machine (the CPUs this process may use).
#include <cstdio>

#include "cli/command_line.h"
#include "cli/commands.h"
#include "topo/cpu_sets.h"
#include "topo/gpus.h"
#include "topo/hwloc_topology.h"
#include "topo/network_devices.h"
#include "tpf/topology.h"

namespace tpf::cli {

void add_topo_command(Command& tpf) {
  Command topo = tpf.add_subcommand("topo", "show this machine's cores, NUMA nodes and caches");
  topo.footer(
      "Prints the sockets, NUMA nodes, cores and L3 cache size that this process may use\n"
      "(hwloc discovery, restricted to the process's CPU set). 'tpf run --bind core' pins\n"
      "local rank r to core r mod <cores>; '--bind numa' to NUMA node r mod <nodes>.\n"
      "Then the network devices UCX may use, each with the CPUs next to it, and those\n"
      "nearest to this process's binding; and the GPUs (NVIDIA and AMD, in PCI order), each\n"
      "with the CPUs next to it ('--bind gpu') and the devices on its PCIe path. What\n"
      "TPF_RAIL_DEVICES=auto (tpf run --rail-devices auto) chooses from: a rank that drives\n"
      "a GPU (TPF_GPU), that GPU's devices; a rank that drives none, those nearest its\n"
      "binding.");
  set_action(topo, [] {
    std::fputs(discover_topology().describe().c_str(), stdout);
    auto joined = [](const std::vector<std::string>& names) {
      std::string text;
      for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
      return text;
    };
    const topo::Topology machine = topo::load_topology({.with_io = true, .xml = {}});
    const std::vector<topo::NetworkDevice> devices =
        topo::network_devices_in(machine.get(), /*this_machine=*/true);
    const std::string nearest = joined(topo::nearest_devices(devices, topo::process_binding()));
    std::printf("network devices: %s\nnearest to this process: %s\n",
                devices.empty() ? "none found" : topo::describe_devices(devices).c_str(),
                nearest.empty() ? "none (UCX's default, all)" : nearest.c_str());
    const std::vector<topo::Gpu> gpus = topo::gpus_in(machine.get());
    std::string gpu_lines;
    for (size_t i = 0; i < gpus.size(); ++i) {
      const std::string near_gpu = joined(topo::devices_nearest_gpu(devices, gpus[i].pci_path));
      const std::string cpus =
          gpus[i].near_cpus.empty() ? "" : " (cpus " + topo::format_ranges(gpus[i].near_cpus) + ")";
      gpu_lines += "  " + std::to_string(i) + " = " + gpus[i].pci_busid + cpus + ": nearest " +
                   (near_gpu.empty() ? "none" : near_gpu) + "\n";
    }
    std::printf("GPUs:%s\n%s", gpus.empty() ? " none on PCI" : "", gpu_lines.c_str());
    return kExitOk;
  });
}

}  // namespace tpf::cli
