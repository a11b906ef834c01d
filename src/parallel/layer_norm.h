// LayerNorm in the parallel layer: parameters replicated, input replicated (or row-sharded with
// sequence parallelism). A partial sum is refused: normalizing each rank's addend is not
// normalizing the sum.
#pragma once

#include <string>
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

 private:
  Tensor input_, mean_, rstd_;
};

}  // namespace tpf
