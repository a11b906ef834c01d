// A trainable tensor of the parallel layer: this rank's slice of a global ("master") weight, its
// gradient, and how the slice relates to the whole, which is what initialization, checkpoints
// (resharding to another TP size) and gradient-norm clipping need.
#pragma once

#include <string>
#include <vector>

#include "tensor/counter_rng.h"
#include "tensor/tensor.h"

namespace tpf {

// How the global tensor is cut. dim < 0: replicated. Otherwise dimension `dim` is made of `blocks`
// equal blocks and each block is split into T equal shards; rank r holds shard r of every block
// (a fused QKV weight is 3 blocks, so each rank keeps q, k and v of the same heads).
struct ShardSpec {
  int dim = -1;
  int blocks = 1;
  bool replicated() const noexcept { return dim < 0; }
};

enum class Init { normal, ones, zeros };

struct Parameter {
  std::string name;  // the Hugging Face GPT-2 name, e.g. "h.0.attn.c_attn.weight"
  Shape global_shape;
  ShardSpec shard;
  Init init = Init::zeros;
  float init_std = 0.0f;  // for Init::normal
  // AdamW decays matrices, not biases or LayerNorm parameters (GPT-2 / Megatron practice).
  bool weight_decay = false;
  // Sequence parallelism: each rank's gradient covers only its rows, so replicated parameters
  // touched by sharded rows (LayerNorms, row-parallel biases) need their gradients summed over TP.
  bool grad_summed_over_tp = false;
  Tensor value;
  Tensor grad;
};

// The local shape of p on a group of `parts` ranks (throws if a sharded dimension does not divide).
Shape local_shape(const Parameter& p, int parts);

// Allocates value and grad for rank `rank` of `parts` and fills value from the counter-based RNG:
// element e of the global tensor gets counter_normal({seed, stream_of(name)}, e) * std, so the
// slice a rank holds is the same numbers whatever the TP size.
void initialize(Parameter& p, uint64_t seed, int rank, int parts);

// Global flat index of every local element, in local order (for initialization and tests).
std::vector<int64_t> global_indices(const Parameter& p, int rank, int parts);

// The parameters' gradients / values in order, and how many elements they hold (for pack_flat).
std::vector<Tensor*> gradients_of(const std::vector<Parameter*>& params);
std::vector<Tensor*> values_of(const std::vector<Parameter*>& params);
int64_t total_numel(const std::vector<Tensor*>& tensors);

// This rank's slice of a global tensor / the global tensor from every rank's slice (in rank order).
Tensor slice_of_global(const Tensor& global, const ShardSpec& spec, int rank, int parts);
Tensor global_from_slices(const std::vector<Tensor>& slices, const ShardSpec& spec);

}  // namespace tpf
