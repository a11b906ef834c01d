// LayerNorm in the parallel layer: parameters replicated, input replicated (or row-sharded with
// sequence parallelism). A partial sum is refused: normalizing each rank's addend is not
// normalizing the sum.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "parallel/parameter.h"
#include "parallel/placement.h"
#include "parallel/tp_group.h"

namespace tpf {

class ReplicatedLayerNorm {
 public:
  ReplicatedLayerNorm(const std::string& name, int64_t width, float eps = 1e-5f);
  ParallelTensor forward(TpGroup& tp, const ParallelTensor& x);
  ParallelTensor backward(TpGroup& tp, const ParallelTensor& dy);
  void collect(std::vector<Parameter*>& out) {
    out.push_back(&weight);
    out.push_back(&bias);
  }

  Parameter weight;
  Parameter bias;
  float eps;

  // What forward saved for backward, moved out and back in: a pipeline stage keeps several
  // micro-batches in flight between their forward and backward passes (model/gpt.h).
  struct Saved {
    Tensor input, mean, rstd;
  };
  Saved take_saved() {
    return {std::exchange(input_, Tensor()), std::exchange(mean_, Tensor()),
            std::exchange(rstd_, Tensor())};
  }
  void restore_saved(Saved s) {
    input_ = std::move(s.input);
    mean_ = std::move(s.mean);
    rstd_ = std::move(s.rstd);
  }

 private:
  Tensor input_, mean_, rstd_;
};

}  // namespace tpf
