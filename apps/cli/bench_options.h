// Command line of `tpf bench` (nccl-tests flags). Parsed before any rank talks to another, so a
// bad flag fails the same way on every rank and never leaves peers waiting.
#pragma once

#include <cstddef>
#include <string>

#include "cli/bench_spec.h"
#include "cli/commands.h"  // UsageError
#include "tpf/dtype.h"

namespace tpf::cli {

struct BenchOptions {
  Collective collective = Collective::all_reduce;
  size_t min_bytes = 8;
  size_t max_bytes = size_t{32} << 20;
  size_t factor = 2;
  int iters = 20;
  int warmup = 5;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  bool check = true;
  std::string json_path;  // empty: no JSON file
  bool help = false;
};

// argv starts after the subcommand name. Throws UsageError (main() prints it, exit status 2)
// naming the flag and the bad value.
BenchOptions parse_bench_options(int argc, char** argv);
const char* bench_usage() noexcept;

}  // namespace tpf::cli
