#include "parallel/linear.h"

#include "parallel/region_ops.h"
#include "tensor/blas.h"
#include "tensor/kernels.h"

namespace tpf {

namespace {

Parameter matrix(const std::string& name, int64_t in, int64_t out, ShardSpec spec, float std) {
  Parameter p;
  p.name = name;
  p.global_shape = {in, out};
  p.shard = spec;
  p.init = Init::normal;
  p.init_std = std;
  p.weight_decay = true;
  return p;
}

Parameter vector_param(const std::string& name, int64_t n, ShardSpec spec) {
  Parameter p;
  p.name = name;
  p.global_shape = {n};
  p.shard = spec;
  p.init = Init::zeros;
  return p;
}

// y[m, n] = x[m, k] W[k, n].
Tensor matmul(const Tensor& x, const Tensor& w) {
  Tensor y = Tensor::uninitialized({x.dim(0), w.dim(1)});
  gemm_f32(false, false, x.dim(0), w.dim(1), x.dim(1), 1.0f, x.f32(), x.dim(1), w.f32(), w.dim(1),
           0.0f, y.f32(), w.dim(1));
  return y;
}

// dW += x^T dy.
void accumulate_weight_grad(const Tensor& x, const Tensor& dy, Tensor& dw) {
  const int64_t m = x.dim(0), k = x.dim(1), n = dy.dim(1);
  gemm_f32(true, false, k, n, m, 1.0f, x.f32(), k, dy.f32(), n, 1.0f, dw.f32(), n);
}

// dx = dy W^T.
Tensor input_grad(const Tensor& w, const Tensor& dy) {
  const int64_t m = dy.dim(0), k = w.dim(0), n = w.dim(1);
  Tensor dx = Tensor::uninitialized({m, k});
  gemm_f32(false, true, m, k, n, 1.0f, dy.f32(), n, w.f32(), n, 0.0f, dx.f32(), k);
  return dx;
}

// dW += x^T dy; returns dx = dy W^T.
Tensor matmul_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dw) {
  accumulate_weight_grad(x, dy, dw);
  return input_grad(w, dy);
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(const std::string& name, int64_t in, int64_t out,
                                           int blocks, float init_std)
    : weight(matrix(name + ".weight", in, out, ShardSpec{1, blocks}, init_std)),
      bias(vector_param(name + ".bias", out, ShardSpec{0, blocks})) {}

ParallelTensor ColumnParallelLinear::forward(TpGroup& tp, const ParallelTensor& x) {
  require_placement(x, activation_placement(tp), weight.name + " (column-parallel input)");
  ParallelTensor whole = tp.sequence_parallel
                             ? tp.timed([&] { return gather_from_sequence_forward(*tp.comm, x); })
                             : copy_to_tp_forward(*tp.comm, x);
  Tensor y = matmul(whole.local, weight.value);
  add_bias_rows(y.f32(), bias.value.f32(), y.dim(0), y.dim(1));
  input_ = std::move(whole.local);
  return ParallelTensor{std::move(y), Placement::shard(1)};
}

ParallelTensor ColumnParallelLinear::backward(TpGroup& tp, const ParallelTensor& dy) {
  require_placement(dy, Placement::shard(1), weight.name + " (column-parallel output gradient)");
  accumulate_bias_grad(dy.local.f32(), dy.local.dim(0), dy.local.dim(1), bias.grad.f32());
  ParallelTensor dx{input_grad(weight.value, dy.local), Placement::partial()};
  if (tp.overlap_backward_comm) {
    // The input gradient's reduction travels while this rank computes the weight gradient.
    PendingGradient pending = tp.sequence_parallel
                                  ? start_gather_from_sequence_backward(*tp.comm, std::move(dx))
                                  : start_copy_to_tp_backward(*tp.comm, std::move(dx));
    accumulate_weight_grad(input_, dy.local, weight.grad);
    input_ = Tensor();
    return tp.timed([&] { return pending.finish(); });
  }
  accumulate_weight_grad(input_, dy.local, weight.grad);
  input_ = Tensor();
  return tp.timed([&] {
    return tp.sequence_parallel ? gather_from_sequence_backward(*tp.comm, dx)
                                : copy_to_tp_backward(*tp.comm, std::move(dx));
  });
}

RowParallelLinear::RowParallelLinear(const std::string& name, int64_t in, int64_t out,
                                     float init_std)
    : weight(matrix(name + ".weight", in, out, ShardSpec{0, 1}, init_std)),
      bias(vector_param(name + ".bias", out, ShardSpec{})) {}

ParallelTensor RowParallelLinear::forward(TpGroup& tp, const ParallelTensor& x) {
  require_placement(x, Placement::shard(1), weight.name + " (row-parallel input)");
  bias.grad_summed_over_tp = tp.sequence_parallel;
  ParallelTensor partial{matmul(x.local, weight.value), Placement::partial()};
  input_ = x.local;
  ParallelTensor y = tp.timed([&] {
    return tp.sequence_parallel ? reduce_scatter_to_sequence_forward(*tp.comm, partial)
                                : reduce_from_tp_forward(*tp.comm, std::move(partial));
  });
  add_bias_rows(y.local.f32(), bias.value.f32(), y.local.dim(0), y.local.dim(1));
  return y;
}

ParallelTensor RowParallelLinear::backward(TpGroup& tp, const ParallelTensor& dy) {
  require_placement(dy, activation_placement(tp), weight.name + " (row-parallel output gradient)");
  accumulate_bias_grad(dy.local.f32(), dy.local.dim(0), dy.local.dim(1), bias.grad.f32());
  ParallelTensor whole =
      tp.sequence_parallel
          ? tp.timed([&] { return reduce_scatter_to_sequence_backward(*tp.comm, dy); })
          : reduce_from_tp_backward(*tp.comm, dy);
  Tensor dx = matmul_backward(input_, weight.value, whole.local, weight.grad);
  input_ = Tensor();
  return ParallelTensor{std::move(dx), Placement::shard(1)};
}

}  // namespace tpf
