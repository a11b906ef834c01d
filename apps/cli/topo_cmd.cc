// `tpf topo`: what tpfabric sees of this machine (the CPUs this process may use).
#include <cstdio>
#include <cstring>

#include "cli/commands.h"
#include "tpf/topology.h"

namespace tpf::cli {

int cmd_topo(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
      std::printf(
          "usage: tpf topo\n"
          "\n"
          "Prints the sockets, NUMA nodes, cores and L3 cache size that this process may use\n"
          "(hwloc discovery, restricted to the process's CPU set). 'tpf run --bind core' pins\n"
          "local rank r to core r mod <cores>; '--bind numa' to NUMA node r mod <nodes>.\n");
      return kExitOk;
    }
    throw UsageError(std::string("unexpected argument '") + argv[i] + "'");
  }
  std::fputs(discover_topology().describe().c_str(), stdout);
  return kExitOk;
}

}  // namespace tpf::cli
