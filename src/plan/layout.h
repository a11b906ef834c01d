// A parallel layout: TP x PP x DP degrees, batch split, schedule and memory options, and the rank
// order that maps it onto GPUs. Written on the command line as "tp=8,pp=4,dp=16,mb=1,...".
#pragma once

#include <array>
#include <string>

#include "plan/collective_planner.h"

namespace tpf::plan {

enum class Recompute { none, selective, full };
const char* to_string(Recompute recompute);

// Which dimension varies fastest over consecutive GPUs (Megatron's default: tp, then dp, then pp).
enum class ParallelDim { tp, dp, pp };

struct Layout {
  int tp = 1, pp = 1, dp = 1;
  int micro_batch = 1;
  int global_batch = 0;  // 0 = the model's
  bool sequence_parallel = false;
  int virtual_stages = 1;  // interleaved 1F1B: model chunks per pipeline rank
  Recompute recompute = Recompute::none;
  bool distributed_optimizer = false;  // optimizer state sharded over DP (ZeRO-1)
  std::array<ParallelDim, 3> order = {ParallelDim::tp, ParallelDim::dp, ParallelDim::pp};

  long long gpus() const { return static_cast<long long>(tp) * pp * dp; }
  // The GroupShape of each dimension's groups under `order`.
  GroupShape group_of(ParallelDim dim) const;
  // "tp=8,pp=4,dp=16,mb=1,gb=1536,sp=1,vp=1,recompute=selective,order=tp-dp-pp,zero1=0"
  std::string to_string() const;
};

// Parses "key=value,..." (keys: tp pp dp mb gb sp vp recompute order zero1). Throws
// Error(invalid_argument) naming the key for unknown keys and bad values.
Layout parse_layout(const std::string& text);

}  // namespace tpf::plan
