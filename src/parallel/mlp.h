// The transformer's feed-forward block, Megatron-style: column-parallel expansion (width -> 4
// width, GELU on the local columns, no communication) and row-parallel projection back (one
// all-reduce, or reduce-scatter with sequence parallelism).
#pragma once

#include <string>
#include <utility>
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

  // What forward saved for backward, moved out and back in: a pipeline stage keeps several
  // micro-batches in flight between their forward and backward passes (model/gpt.h).
  struct Saved {
    Tensor pre_activation;
    ColumnParallelLinear::Saved fc, proj;
  };
  Saved take_saved() {
    return {std::exchange(pre_activation_, Tensor()), fc.take_saved(), proj.take_saved()};
  }
  void restore_saved(Saved s) {
    pre_activation_ = std::move(s.pre_activation);
    fc.restore_saved(std::move(s.fc));
    proj.restore_saved(std::move(s.proj));
  }

 private:
  Tensor pre_activation_;
};

}  // namespace tpf
