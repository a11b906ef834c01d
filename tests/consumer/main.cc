// Smallest program against an installed tpfabric: proves the headers, the library and its link
// dependencies (hwloc for the static archive) are found from outside the source tree.
//   consumer           prints the name of bf16
//   consumer --topo    also queries the machine topology (pulls hwloc into a static link)
//   consumer --world   also all-reduces across the ranks of a launcher (e.g. `tpf run -n 2 --`)
#include <cstdio>
#include <cstring>
#include <exception>

#include <tpf/tpf.h>

int main(int argc, char** argv) {
  try {
    std::printf("%s\n", tpf::dtype_name(tpf::DType::bf16));
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--topo") == 0) {
        const tpf::MachineTopology topo = tpf::discover_topology();
        std::printf("cores=%zu\n", topo.cores.size());
      } else if (std::strcmp(argv[i], "--world") == 0) {
        tpf::Communicator world = tpf::Communicator::from_env();
        int value = world.rank() + 1;
        world.all_reduce(&value, &value, 1, tpf::DType::i32, tpf::ReduceOp::sum);
        const int expected = world.size() * (world.size() + 1) / 2;
        std::printf("rank %d/%d: sum=%d (expected %d)\n", world.rank(), world.size(), value,
                    expected);
        if (value != expected) return 1;
      } else {
        std::fprintf(stderr, "consumer: unknown argument '%s' (use --topo or --world)\n", argv[i]);
        return 2;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
  return 0;
}
