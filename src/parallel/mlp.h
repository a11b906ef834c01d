// The transformer's feed-forward block, Megatron-style: column-parallel expansion (width -> 4
// width, GELU on the local columns, no communication) and row-parallel projection back (one
// all-reduce, or reduce-scatter with sequence parallelism).
#pragma once

#include <string>
#include <vector>

#include "parallel/linear.h"

namespace tpf {

class ParallelMlp {
 public:
  ParallelMlp(const std::string& prefix, int64_t width, int64_t hidden, float init_std,
              float proj_std);
  ParallelTensor forward(TpGroup& tp, const ParallelTensor& x);
  ParallelTensor backward(TpGroup& tp, const ParallelTensor& dy);
  void collect(std::vector<Parameter*>& out) {
    fc.collect(out);
    proj.collect(out);
  }

  ColumnParallelLinear fc;
  RowParallelLinear proj;

 private:
  Tensor pre_activation_;
};

}  // namespace tpf
