// Region operators: the only places where the tensor-parallel layer communicates. They come in
// adjoint pairs (Megatron-LM's mappings): the backward of each forward is its adjoint, so that
// gradients are exact. With <a, b> the pairing of a tensor and its gradient summed over the ranks
// (counted once when both are replicated), every pair satisfies <f(x), g> = <x, f*(g)>, which
// tests/model/tp_region_ops_test.cc checks in f64.
//
//   operator                 forward                      backward (adjoint)
//   copy_to_tp               replicate -> replicate (id)  partial -> replicate (all-reduce)
//   reduce_from_tp           partial -> replicate (AR)    replicate -> replicate (id)
//   scatter_to_tp(d)         replicate -> shard(d) split  shard(d) -> replicate (all-gather)
//   gather_from_tp(d)        shard(d) -> replicate (AG)   replicate -> shard(d) (split)
//   gather_from_sequence     shard(0) -> replicate (AG)   partial -> shard(0) (reduce-scatter)
//   reduce_scatter_to_seq    partial -> shard(0) (RS)     shard(0) -> replicate (all-gather)
//
// The gradient of a replicated tensor is "replicate" when every rank computed the same whole
// gradient and "partial" when each rank holds its contribution; the placements above say which.
// Sharding needs the dimension to divide evenly; otherwise a tpf::Error says by how much.
#pragma once

#include "parallel/placement.h"
#include "tpf/comm.h"

namespace tpf {

ParallelTensor copy_to_tp_forward(Communicator& tp, ParallelTensor x);
ParallelTensor copy_to_tp_backward(Communicator& tp, ParallelTensor grad);

ParallelTensor reduce_from_tp_forward(Communicator& tp, ParallelTensor x);
ParallelTensor reduce_from_tp_backward(Communicator& tp, ParallelTensor grad);

ParallelTensor scatter_to_tp_forward(Communicator& tp, const ParallelTensor& x, int dim);
ParallelTensor scatter_to_tp_backward(Communicator& tp, const ParallelTensor& grad, int dim);

ParallelTensor gather_from_tp_forward(Communicator& tp, const ParallelTensor& x, int dim);
ParallelTensor gather_from_tp_backward(Communicator& tp, const ParallelTensor& grad, int dim);

ParallelTensor gather_from_sequence_forward(Communicator& tp, const ParallelTensor& x);
ParallelTensor gather_from_sequence_backward(Communicator& tp, const ParallelTensor& grad);

ParallelTensor reduce_scatter_to_sequence_forward(Communicator& tp, const ParallelTensor& x);
ParallelTensor reduce_scatter_to_sequence_backward(Communicator& tp, const ParallelTensor& grad);

// The backwards of copy_to_tp and gather_from_sequence, started without waiting, so that the
// weight-gradient GEMM of a column-parallel layer runs while the input gradient's all-reduce or
// reduce-scatter travels (Megatron-LM's --tp-comm-overlap of the backward pass). finish() waits and
// returns what the blocking operator returns; the gradient stays owned here until then.
class PendingGradient {
 public:
  PendingGradient(Work work, Tensor result, Tensor source, Placement placement)
      : work_(std::move(work)),
        result_(std::move(result)),
        source_(std::move(source)),
        placement_(placement) {}
  PendingGradient(PendingGradient&&) = default;
  PendingGradient(const PendingGradient&) = delete;
  PendingGradient& operator=(const PendingGradient&) = delete;
  // An error that skips finish() still waits: the operation writes into result_ until it ends
  // (within the communicator's deadline).
  ~PendingGradient();
  ParallelTensor finish();

 private:
  Work work_;
  Tensor result_, source_;
  Placement placement_;
};
PendingGradient start_copy_to_tp_backward(Communicator& tp, ParallelTensor grad);
PendingGradient start_gather_from_sequence_backward(Communicator& tp, ParallelTensor grad);

// The building blocks (no placement checks): concatenation of every rank's `local` along dim,
// this rank's block of `whole` along dim, and the sum over ranks scattered along dim.
Tensor all_gather_along(Communicator& tp, const Tensor& local, int dim);
Tensor split_along(const Tensor& whole, int dim, int rank, int parts);
Tensor reduce_scatter_along(Communicator& tp, const Tensor& whole, int dim);
void all_reduce_in_place(Communicator& tp, Tensor& t);

}  // namespace tpf
