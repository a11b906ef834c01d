#include "parallel/layer_norm.h"

#include "parallel/linear.h"
#include "tensor/kernels.h"

namespace tpf {

ReplicatedLayerNorm::ReplicatedLayerNorm(const std::string& name, int64_t width, float eps_)
    : eps(eps_) {
  weight.name = name + ".weight";
  weight.global_shape = {width};
  weight.init = Init::ones;
  bias.name = name + ".bias";
  bias.global_shape = {width};
  bias.init = Init::zeros;
}

ParallelTensor ReplicatedLayerNorm::forward(TpGroup& tp, const ParallelTensor& x) {
  require_placement(x, activation_placement(tp), "LayerNorm " + weight.name);
  weight.grad_summed_over_tp = bias.grad_summed_over_tp = tp.sequence_parallel;
  const int64_t rows = x.local.dim(0), cols = x.local.dim(1);
  Tensor y = Tensor::uninitialized(x.local.shape());
  mean_ = Tensor({rows});
  rstd_ = Tensor({rows});
  layer_norm_forward(x.local.f32(), weight.value.f32(), bias.value.f32(), rows, cols, eps, y.f32(),
                     mean_.f32(), rstd_.f32());
  input_ = x.local;
  return ParallelTensor{std::move(y), x.placement};
}

ParallelTensor ReplicatedLayerNorm::backward(TpGroup& tp, const ParallelTensor& dy) {
  require_placement(dy, activation_placement(tp), "LayerNorm " + weight.name + " (gradient)");
  Tensor dx = Tensor::uninitialized(dy.local.shape());
  layer_norm_backward(dy.local.f32(), input_.f32(), weight.value.f32(), mean_.f32(), rstd_.f32(),
                      dy.local.dim(0), dy.local.dim(1), dx.f32(), weight.grad.f32(),
                      bias.grad.f32());
  input_ = Tensor();
  return ParallelTensor{std::move(dx), dy.placement};
}

}  // namespace tpf
