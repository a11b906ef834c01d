#include "parallel/self_attention.h"

#include <algorithm>

#include "tpf/error.h"

namespace tpf {

namespace {

int64_t checked_local_heads(const std::string& prefix, int64_t width, int64_t heads, int tp) {
  if (heads <= 0 || width % heads != 0) {
    throw Error(ErrorCode::invalid_argument, prefix + ": width " + std::to_string(width) +
                                                 " is not a multiple of the head count " +
                                                 std::to_string(heads));
  }
  if (heads % tp != 0) {
    throw Error(ErrorCode::invalid_argument,
                prefix + ": " + std::to_string(heads) + " heads do not split over " +
                    std::to_string(tp) +
                    " tensor-parallel ranks (whole heads per rank); use a TP "
                    "size that divides the head count");
  }
  return heads / tp;
}

}  // namespace

ParallelSelfAttention::ParallelSelfAttention(const std::string& prefix, int64_t width,
                                             int64_t heads, int tp_size, float init_std,
                                             float proj_std)
    : qkv(prefix + ".c_attn", width, 3 * width, 3, init_std),
      proj(prefix + ".c_proj", width, width, proj_std),
      heads_total_(heads),
      local_heads_(checked_local_heads(prefix, width, heads, tp_size)),
      head_dim_(width / heads) {}

ParallelTensor ParallelSelfAttention::forward(TpGroup& tp, const ParallelTensor& x, int64_t batch,
                                              int64_t seq, float dropout, RngKey key) {
  ParallelTensor q = qkv.forward(tp, x);
  if (q.local.dim(0) != batch * seq) {
    throw Error(ErrorCode::invalid_argument,
                qkv.weight.name + ": " + std::to_string(q.local.dim(0)) + " rows for batch " +
                    std::to_string(batch) + " x sequence " + std::to_string(seq));
  }
  shape_ =
      AttentionShape{batch, seq, local_heads_, head_dim_, tp.rank() * local_heads_, heads_total_};
  probs_ = Tensor::uninitialized({batch, local_heads_, seq, seq});
  ParallelTensor context{Tensor::uninitialized({batch * seq, shape_.width()}), Placement::shard(1)};
  causal_attention_forward(q.local.f32(), shape_, dropout, key, probs_.f32(), context.local.f32());
  qkv_out_ = std::move(q.local);
  dropout_ = dropout;
  key_ = key;
  return proj.forward(tp, context);
}

ParallelTensor ParallelSelfAttention::backward(TpGroup& tp, const ParallelTensor& dy) {
  ParallelTensor dcontext = proj.backward(tp, dy);
  ParallelTensor dq{Tensor::uninitialized(qkv_out_.shape()), Placement::shard(1)};
  std::vector<float> scratch(static_cast<size_t>(2 * shape_.seq * shape_.seq));
  causal_attention_backward(dcontext.local.f32(), qkv_out_.f32(), probs_.f32(), shape_, dropout_,
                            key_, dq.local.f32(), scratch.data());
  qkv_out_ = Tensor();
  probs_ = Tensor();
  return qkv.backward(tp, dq);
}

KvCache ParallelSelfAttention::make_cache(int64_t capacity) const {
  KvCache c;
  c.capacity = capacity;
  c.keys = Tensor({local_heads_, capacity, head_dim_});
  c.values = Tensor({local_heads_, capacity, head_dim_});
  return c;
}

ParallelTensor ParallelSelfAttention::forward_cached(TpGroup& tp, const ParallelTensor& x,
                                                     KvCache& cache) {
  if (cache.length >= cache.capacity) {
    throw Error(ErrorCode::invalid_argument, qkv.weight.name + ": the key/value cache is full (" +
                                                 std::to_string(cache.capacity) +
                                                 " positions, the model's context)");
  }
  ParallelTensor q = qkv.forward(tp, x);  // [1, 3 * local width]
  const int64_t w = local_heads_ * head_dim_;
  const float* row = q.local.f32();
  for (int64_t h = 0; h < local_heads_; ++h) {
    const int64_t at = (h * cache.capacity + cache.length) * head_dim_;
    std::copy_n(row + w + h * head_dim_, head_dim_, cache.keys.f32() + at);
    std::copy_n(row + 2 * w + h * head_dim_, head_dim_, cache.values.f32() + at);
  }
  ++cache.length;
  ParallelTensor context{Tensor({1, w}), Placement::shard(1)};
  std::vector<float> scores(static_cast<size_t>(cache.length));
  cached_attention_step(row, cache.keys.f32(), cache.values.f32(), local_heads_, head_dim_,
                        cache.capacity, cache.length, scores.data(), context.local.f32());
  return proj.forward(tp, context);
}

}  // namespace tpf
