// `tpf topo`: what tpfabric sees of this machine (the CPUs this process may use).
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "tpf/topology.h"

namespace tpf::cli {

void add_topo_command(CLI::App& tpf) {
  CLI::App& topo = *tpf.add_subcommand("topo", "show this machine's cores, NUMA nodes and caches");
  topo.footer(
      "Prints the sockets, NUMA nodes, cores and L3 cache size that this process may use\n"
      "(hwloc discovery, restricted to the process's CPU set). 'tpf run --bind core' pins\n"
      "local rank r to core r mod <cores>; '--bind numa' to NUMA node r mod <nodes>.");
  set_action(topo, [] {
    std::fputs(discover_topology().describe().c_str(), stdout);
    return kExitOk;
  });
}

}  // namespace tpf::cli
