// Causal self-attention split by heads (Megatron-LM): QKV column-parallel with whole heads per
// rank (the fused [q | k | v] weight is sharded as 3 blocks), attention local to the rank's
// heads, output projection row-parallel (one all-reduce, or reduce-scatter with sequence
// parallelism, per forward pass).
#pragma once

#include <string>
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

 private:
  int64_t heads_total_, local_heads_, head_dim_;
  AttentionShape shape_;
  Tensor qkv_out_, probs_;
  float dropout_ = 0;
  RngKey key_;
};

}  // namespace tpf
