// Causal self-attention split by heads (Megatron-LM): QKV column-parallel with whole heads per
// rank (the fused [q | k | v] weight is sharded as 3 blocks), attention local to the rank's
// heads, output projection row-parallel (one all-reduce, or reduce-scatter with sequence
// parallelism, per forward pass).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "parallel/linear.h"
#include "parallel/tp_group.h"
#include "tensor/attention.h"

namespace tpf {

// Keys and values of the positions generated so far, for this rank's heads.
struct KvCache {
  int64_t capacity = 0;
  int64_t length = 0;
  Tensor keys;    // [heads, capacity, head_dim]
  Tensor values;  // [heads, capacity, head_dim]
};

class ParallelSelfAttention {
 public:
  ParallelSelfAttention(const std::string& prefix, int64_t width, int64_t heads, int tp_size,
                        float init_std, float proj_std);

  // x: [batch * seq, width] in the activation placement; out: the same placement.
  ParallelTensor forward(TpGroup& tp, const ParallelTensor& x, int64_t batch, int64_t seq,
                         float dropout, RngKey key);
  ParallelTensor backward(TpGroup& tp, const ParallelTensor& dy);
  void collect(std::vector<Parameter*>& out) {
    qkv.collect(out);
    proj.collect(out);
  }

  // Generation: one replicated row (the newest position) attends to the cache and appends to it.
  KvCache make_cache(int64_t capacity) const;
  ParallelTensor forward_cached(TpGroup& tp, const ParallelTensor& x, KvCache& cache);

  ColumnParallelLinear qkv;
  RowParallelLinear proj;

  // What forward saved for backward, moved out and back in: a pipeline stage keeps several
  // micro-batches in flight between their forward and backward passes (model/gpt.h).
  struct Saved {
    Tensor qkv_out, probs;
    AttentionShape shape;
    float dropout = 0;
    RngKey key;
    ColumnParallelLinear::Saved qkv, proj;
  };
  Saved take_saved() {
    return {std::exchange(qkv_out_, Tensor()),
            std::exchange(probs_, Tensor()),
            shape_,
            dropout_,
            key_,
            qkv.take_saved(),
            proj.take_saved()};
  }
  void restore_saved(Saved s) {
    qkv_out_ = std::move(s.qkv_out);
    probs_ = std::move(s.probs);
    shape_ = s.shape;
    dropout_ = s.dropout;
    key_ = s.key;
    qkv.restore_saved(std::move(s.qkv));
    proj.restore_saved(std::move(s.proj));
  }

 private:
  int64_t heads_total_, local_heads_, head_dim_;
  AttentionShape shape_;
  Tensor qkv_out_, probs_;
  float dropout_ = 0;
  RngKey key_;
};

}  // namespace tpf
