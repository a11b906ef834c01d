// Causal multi-head self-attention on the heads one rank holds (Megatron splits attention by
// heads, so this kernel never communicates). f32, row-major.
#pragma once

#include <cstdint>

#include "tensor/counter_rng.h"

namespace tpf {

struct AttentionShape {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t heads = 0;  // heads held here
  int64_t head_dim = 0;
  int64_t head_offset = 0;  // global index of the first head held here (for dropout indices)
  int64_t total_heads = 0;  // heads of the whole layer
  int64_t width() const noexcept { return heads * head_dim; }
};

// qkv: [batch * seq, 3 * width] laid out [q | k | v], head h at columns h*head_dim.. of each.
// out: [batch * seq, width]. probs: [batch, heads, seq, seq], the softmax (before dropout), saved
// for the backward pass. Dropout on the probabilities is indexed by (batch, global head, i, j).
void causal_attention_forward(const float* qkv, const AttentionShape& shape, float dropout,
                              RngKey key, float* probs, float* out);

// dqkv is overwritten. scratch: 2 * seq * seq floats.
void causal_attention_backward(const float* dout, const float* qkv, const float* probs,
                               const AttentionShape& shape, float dropout, RngKey key, float* dqkv,
                               float* scratch);

// One new position attending to a key/value cache (generation). q: [heads * head_dim];
// caches: [heads][capacity][head_dim] with `length` positions filled (the new one included).
// out: [heads * head_dim]. scores: `length` floats of scratch.
void cached_attention_step(const float* q, const float* k_cache, const float* v_cache,
                           int64_t heads, int64_t head_dim, int64_t capacity, int64_t length,
                           float* scores, float* out);

}  // namespace tpf
