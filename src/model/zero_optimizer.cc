#include "model/zero_optimizer.h"

#include <algorithm>

#include "model/optimizer.h"
#include "tpf/error.h"

namespace tpf {

ShardedAdamW::ShardedAdamW(const std::vector<Parameter*>& params, const TrainConfig& config,
                           Communicator& data, double& seconds, Timeline* timeline)
    : params_(params), config_(config), data_(data), seconds_(seconds), timeline_(timeline) {
  const int64_t total = total_numel(values_of(params_));
  const int64_t replicas = data_.size();
  share_ = (total + replicas - 1) / replicas;
  const int64_t first = share_ * data_.rank(), last = std::min(total, first + share_);
  int64_t at = 0;
  for (Parameter* p : params_) {
    const int64_t begin = std::max(first, at), end = std::min(last, at + p->value.numel());
    if (begin < end) pieces_.push_back({p, begin - at, end - at, begin - first});
    offsets_.push_back(at);
    at += p->value.numel();
  }
  grad_share_ = Tensor({share_});
  m_ = Tensor({share_});
  v_ = Tensor({share_});
  started_.assign(params_.size(), false);
}

ShardedAdamW::~ShardedAdamW() {
  for (Work& w : pending_) {
    try {
      w.wait();      // the buffers stay alive until then
    } catch (...) {  // the error that unwound the step is the one to report
    }
  }
}

void ShardedAdamW::reduce_async(const std::vector<Parameter*>& params) {
  if (flat_grads_.numel() == 0) flat_grads_ = Tensor({share_ * data_.size()});
  for (Parameter* p : params) {
    const auto it = std::find(params_.begin(), params_.end(), p);
    if (it == params_.end()) {
      throw Error(ErrorCode::internal, "ZeRO-1: " + p->name + " is not one of its parameters");
    }
    const auto i = static_cast<size_t>(it - params_.begin());
    if (started_[i]) continue;
    started_[i] = true;
    const int64_t begin = offsets_[i], end = begin + p->grad.numel();
    std::copy_n(p->grad.f32(), p->grad.numel(), flat_grads_.f32() + begin);
    for (int64_t at = begin; at < end;) {
      const int64_t owner = at / share_, piece_end = std::min(end, (owner + 1) * share_);
      float* sum = owner == data_.rank() ? grad_share_.f32() + (at - owner * share_) : nullptr;
      pending_.push_back(data_.reduce_async(flat_grads_.f32() + at, sum,
                                            static_cast<size_t>(piece_end - at), DType::f32,
                                            ReduceOp::sum, static_cast<int>(owner)));
      at = piece_end;
    }
  }
}

void ShardedAdamW::finish_reductions() {
  reduce_async(params_);
  timed_span(timeline_, seconds_, "dp", "ZeRO-1 gradient reductions", [&] {
    for (Work& w : pending_) w.wait();
  });
  pending_.clear();
  started_.assign(params_.size(), false);
}

void ShardedAdamW::reduce_scatter_gradients() {
  const Tensor packed = pack_flat(gradients_of(params_), share_ * data_.size());
  timed_span(timeline_, seconds_, "dp", "ZeRO-1 gradient reduce-scatter", [&] {
    data_.reduce_scatter(packed.data(), grad_share_.data(), static_cast<size_t>(share_), DType::f32,
                         ReduceOp::sum);
  });
}

std::pair<double, double> ShardedAdamW::shard_square_sums(const Parameter* skip) const {
  double sharded = 0, replicated = 0;
  for (const Piece& piece : pieces_) {
    if (piece.param == skip) continue;
    const float* g = grad_share_.f32() + piece.offset;
    double s = 0;
    for (int64_t i = 0; i < piece.end - piece.begin; ++i) s += static_cast<double>(g[i]) * g[i];
    (piece.param->shard.replicated() ? replicated : sharded) += s;
  }
  return {sharded, replicated};
}

void ShardedAdamW::step(double lr, double grad_scale) {
  ++steps_;
  AdamWStep s = adamw_constants(config_, steps_, lr, grad_scale);
  Tensor updated({share_});
  for (const Piece& piece : pieces_) {
    s.decay = adamw_decay(config_, *piece.param, lr);
    float* w = piece.param->value.f32() + piece.begin;
    const int64_t n = piece.end - piece.begin;
    adamw_update(w, grad_share_.f32() + piece.offset, m_.f32() + piece.offset,
                 v_.f32() + piece.offset, n, s);
    std::copy_n(w, n, updated.f32() + piece.offset);
  }
  Tensor whole({share_ * data_.size()});
  timed_span(timeline_, seconds_, "dp", "ZeRO-1 weight all-gather", [&] {
    data_.all_gather(updated.data(), whole.data(), static_cast<size_t>(share_), DType::f32);
  });
  unpack_flat(whole, values_of(params_));
}

void ShardedAdamW::gather_moments(std::vector<Tensor>& first, std::vector<Tensor>& second) {
  for (auto [share, out] : {std::pair{&m_, &first}, std::pair{&v_, &second}}) {
    Tensor whole({share_ * data_.size()});
    data_.all_gather(share->data(), whole.data(), static_cast<size_t>(share_), DType::f32);
    out->clear();
    std::vector<Tensor*> tensors;
    for (const Parameter* p : params_) out->emplace_back(p->value.shape());
    for (Tensor& t : *out) tensors.push_back(&t);
    unpack_flat(whole, tensors);
  }
}

void ShardedAdamW::load_moments(const std::vector<Tensor>& first, const std::vector<Tensor>& second,
                                int64_t steps) {
  for (auto [share, in] : {std::pair{&m_, &first}, std::pair{&v_, &second}}) {
    for (size_t i = 0; i < params_.size(); ++i) {
      for (const Piece& piece : pieces_) {
        if (piece.param != params_[i]) continue;
        std::copy_n((*in)[i].f32() + piece.begin, piece.end - piece.begin,
                    share->f32() + piece.offset);
      }
    }
  }
  steps_ = steps;
}

}  // namespace tpf
