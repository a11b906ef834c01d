// Megatron-LM's two halves of a sharded matrix product, y = x W + b with W stored [in, out]
// (Hugging Face GPT-2's Conv1D layout, so checkpoints export without transposes).
//
// ColumnParallelLinear: W split by output columns. Input replicated (with sequence parallelism:
// sharded by rows and all-gathered first); output shard(1), no communication in the forward pass;
// the input gradient is a partial sum, all-reduced (or reduce-scattered) in the backward pass.
//
// RowParallelLinear: W split by input rows. Input shard(1) (a column-parallel output); the
// product is a partial sum, all-reduced (or reduce-scattered by rows) and the bias added once,
// after the reduction.
//
// Both save what their backward pass needs; backward() must follow forward() once. Parameter
// gradients accumulate (+=) until the optimizer zeroes them.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "parallel/parameter.h"
#include "parallel/placement.h"
#include "parallel/tp_group.h"

namespace tpf {

class ColumnParallelLinear {
 public:
  // blocks > 1: the output is `blocks` concatenated parts each split separately (fused QKV).
  ColumnParallelLinear(const std::string& name, int64_t in, int64_t out, int blocks,
                       float init_std);
  ParallelTensor forward(TpGroup& tp, const ParallelTensor& x);
  ParallelTensor backward(TpGroup& tp, const ParallelTensor& dy);
  void collect(std::vector<Parameter*>& out) {
    out.push_back(&weight);
    out.push_back(&bias);
  }

  Parameter weight;  // global [in, out], shard(1)
  Parameter bias;    // global [out], shard(0)

  // What forward saved for backward, moved out and back in: a pipeline stage keeps several
  // micro-batches in flight between their forward and backward passes (model/gpt.h).
  struct Saved {
    Tensor input;
  };
  Saved take_saved() { return {std::exchange(input_, Tensor())}; }
  void restore_saved(Saved s) { input_ = std::move(s.input); }

 private:
  Tensor input_;  // the whole (gathered) input
};

class RowParallelLinear {
 public:
  RowParallelLinear(const std::string& name, int64_t in, int64_t out, float init_std);
  ParallelTensor forward(TpGroup& tp, const ParallelTensor& x);
  ParallelTensor backward(TpGroup& tp, const ParallelTensor& dy);
  void collect(std::vector<Parameter*>& out) {
    out.push_back(&weight);
    out.push_back(&bias);
  }

  Parameter weight;  // global [in, out], shard(0)
  Parameter bias;    // global [out], replicated

  using Saved = ColumnParallelLinear::Saved;
  Saved take_saved() { return {std::exchange(input_, Tensor())}; }
  void restore_saved(Saved s) { input_ = std::move(s.input); }

 private:
  Tensor input_;  // local input columns
};

// The placement of activations between layers: replicated, or shard(0) (rows) with sequence
// parallelism.
inline Placement activation_placement(const TpGroup& tp) {
  return tp.sequence_parallel ? Placement::shard(0) : Placement::replicate();
}

}  // namespace tpf
