// Shared by the C++ peer benchmarks (MPI, Gloo): the command line, the sizes and the output line.
// Sizes and element counts come from apps/cli/bench_spec.cc, bus-bandwidth factors from
// src/coll/collective_kinds.cc: the very code `tpf bench` uses, so a row means the same thing for
// every implementation.
//
// Output: one JSON object per line on stdout (rank 0 only), e.g.
//   {"impl":"mpi","collective":"all_reduce","nranks":2,"dtype":"f32","bytes":1024,"count":256,
//    "time_us":3.1,"algbw":0.33,"busbw":0.33,"wrong":0}
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "cli/bench_spec.h"

namespace tpf::peers {

using cli::CallShape;
using cli::Collective;

struct PeerArgs {
  std::vector<Collective> collectives;
  size_t min_bytes = 8;
  size_t max_bytes = size_t{32} << 20;
  size_t factor = 2;
  int iters = 20;
  int warmup = 5;
  int nprocs = 0;  // gloo_bench only: how many ranks to fork (0: read RANK/WORLD_SIZE)
};

// The collectives every peer implements (the comparison's common ground).
bool peer_supports(Collective c) noexcept;
// Those and the rooted ones and all_to_all (root 0), which mpi_bench measures too.
bool mpi_supports(Collective c) noexcept;

// Flags: -c all_reduce,all_gather,... (default every collective `supports` takes) -b -e -f -n
// -w as in tpf bench, and -np N. Prints a message and exits with status 2 on bad input (a
// benchmark tool, not a library).
PeerArgs parse_peer_args(int argc, char** argv, const char* program,
                         bool (*supports)(Collective) noexcept = peer_supports);

// Deterministic f32 input: element i of rank r's send buffer.
float peer_fill(int rank, size_t index) noexcept;
// Elements of this rank's output that differ from the expected sum-reduction / gather / copy
// (rooted collectives: root 0; `out_elems` is 0 where a rank has no output).
size_t peer_count_wrong(Collective c, int rank, int nranks, size_t count, const float* out,
                        size_t out_elems);

std::string peer_json_line(const char* impl, Collective c, int nranks, const CallShape& shape,
                           double time_us, size_t wrong);

}  // namespace tpf::peers
