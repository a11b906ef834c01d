#include "parallel/mlp.h"

#include "tensor/kernels.h"

namespace tpf {

ParallelMlp::ParallelMlp(const std::string& prefix, int64_t width, int64_t hidden, float init_std,
                         float proj_std)
    : fc(prefix + ".c_fc", width, hidden, 1, init_std),
      proj(prefix + ".c_proj", hidden, width, proj_std) {}

ParallelTensor ParallelMlp::forward(TpGroup& tp, const ParallelTensor& x) {
  ParallelTensor u = fc.forward(tp, x);
  ParallelTensor g{Tensor::uninitialized(u.local.shape()), u.placement};
  gelu_forward(u.local.f32(), u.local.numel(), g.local.f32());
  pre_activation_ = std::move(u.local);
  return proj.forward(tp, g);
}

ParallelTensor ParallelMlp::backward(TpGroup& tp, const ParallelTensor& dy) {
  ParallelTensor dg = proj.backward(tp, dy);
  ParallelTensor du{Tensor::uninitialized(dg.local.shape()), dg.placement};
  gelu_backward(dg.local.f32(), pre_activation_.f32(), dg.local.numel(), du.local.f32());
  pre_activation_ = Tensor();
  return fc.backward(tp, du);
}

}  // namespace tpf
