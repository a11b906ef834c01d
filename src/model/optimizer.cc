#include "model/optimizer.h"

#include <algorithm>
#include <cmath>

#include "parallel/region_ops.h"
#include "tensor/kernels.h"

namespace tpf {

double learning_rate(const TrainConfig& c, int64_t step) {
  if (c.warmup > 0 && step < c.warmup) {
    return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup);
  }
  const int64_t decay_steps = c.steps - c.warmup;
  if (decay_steps <= 1) return c.lr;
  const double progress =
      std::min(1.0, static_cast<double>(step - c.warmup) / static_cast<double>(decay_steps - 1));
  constexpr double kPi = 3.14159265358979323846;
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(kPi * progress));
}

void all_reduce_gradients(Communicator& comm, const std::vector<Parameter*>& params,
                          const std::function<bool(const Parameter&)>& selected) {
  std::vector<Parameter*> chosen;
  for (Parameter* p : params) {
    if (selected(*p)) chosen.push_back(p);
  }
  const std::vector<Tensor*> grads = gradients_of(chosen);
  const int64_t total = total_numel(grads);
  if (total == 0 || comm.size() == 1) return;
  Tensor packed = pack_flat(grads, total);
  all_reduce_in_place(comm, packed);
  unpack_flat(packed, grads);
}

void reduce_sequence_parallel_grads(TpGroup& tp, const std::vector<Parameter*>& params) {
  if (tp.size() == 1) return;
  // One all-reduce for all of them: they are small (LayerNorms, biases, positions).
  tp.timed([&] {
    all_reduce_gradients(*tp.comm, params,
                         [](const Parameter& p) { return p.grad_summed_over_tp; });
  });
}

double grad_square_sum(TpGroup& tp, const std::vector<Parameter*>& params) {
  double sharded = 0, replicated = 0;
  for (const Parameter* p : params) {
    const float* g = p->grad.f32();
    double s = 0;
    for (int64_t i = 0; i < p->grad.numel(); ++i) s += static_cast<double>(g[i]) * g[i];
    (p->shard.replicated() ? replicated : sharded) += s;
  }
  tp.timed([&] {
    if (tp.size() > 1) {
      tp.comm->all_reduce(&sharded, &sharded, 1, DType::f64, ReduceOp::sum);
    }
  });
  return sharded + replicated;
}

double global_grad_norm(TpGroup& tp, const std::vector<Parameter*>& params) {
  return std::sqrt(grad_square_sum(tp, params));
}

AdamW::AdamW(const std::vector<Parameter*>& params, const TrainConfig& config)
    : params_(params), config_(config) {
  for (const Parameter* p : params_) {
    m_.emplace_back(p->value.shape());
    v_.emplace_back(p->value.shape());
  }
}

AdamWStep adamw_constants(const TrainConfig& config, int64_t step, double lr, double grad_scale) {
  const double bias1 = 1.0 - std::pow(config.beta1, static_cast<double>(step));
  const double bias2 = 1.0 - std::pow(config.beta2, static_cast<double>(step));
  AdamWStep s;
  s.beta1 = static_cast<float>(config.beta1);
  s.beta2 = static_cast<float>(config.beta2);
  s.step_size = static_cast<float>(lr / bias1);
  s.inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(bias2));
  s.eps = static_cast<float>(config.adam_eps);
  s.grad_scale = static_cast<float>(grad_scale);
  s.decay = 1.0f;
  return s;
}

float adamw_decay(const TrainConfig& config, const Parameter& p, double lr) {
  return p.weight_decay ? static_cast<float>(1.0 - lr * config.weight_decay) : 1.0f;
}

void AdamW::step(double lr, double grad_scale) {
  ++steps_;
  AdamWStep s = adamw_constants(config_, steps_, lr, grad_scale);
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = *params_[i];
    s.decay = adamw_decay(config_, p, lr);
    adamw_update(p.value.f32(), p.grad.f32(), m_[i].f32(), v_[i].f32(), p.value.numel(), s);
  }
}

}  // namespace tpf
