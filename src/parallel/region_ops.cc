#include "parallel/region_ops.h"

#include <cstring>
#include <string>

#include "tpf/error.h"

namespace tpf {

namespace {

// A tensor seen as [outer, extent of dim, inner] with inner in bytes.
struct DimView {
  int64_t outer = 1;
  int64_t extent = 0;
  size_t inner_bytes = 0;
};

DimView view_along(const Tensor& t, int dim, const char* who) {
  if (dim < 0 || dim >= t.rank()) {
    throw Error(ErrorCode::invalid_argument, std::string(who) + ": dimension " +
                                                 std::to_string(dim) + " out of range for shape " +
                                                 shape_string(t.shape()));
  }
  DimView v;
  for (int i = 0; i < dim; ++i) v.outer *= t.shape()[static_cast<size_t>(i)];
  v.extent = t.shape()[static_cast<size_t>(dim)];
  int64_t inner = 1;
  for (int i = dim + 1; i < t.rank(); ++i) inner *= t.shape()[static_cast<size_t>(i)];
  v.inner_bytes = static_cast<size_t>(inner) * dtype_size(t.dtype());
  return v;
}

void require_divisible(int64_t extent, int parts, int dim, const Shape& shape, const char* who) {
  if (extent % parts != 0) {
    throw Error(ErrorCode::invalid_argument,
                std::string(who) + ": dimension " + std::to_string(dim) + " of shape " +
                    shape_string(shape) + " (" + std::to_string(extent) + ") does not split into " +
                    std::to_string(parts) +
                    " equal shards; choose sizes divisible by the tensor-parallel size");
  }
}

ParallelTensor with_placement(Tensor t, Placement p) { return ParallelTensor{std::move(t), p}; }

}  // namespace

Tensor all_gather_along(Communicator& tp, const Tensor& local, int dim) {
  const DimView v = view_along(local, dim, "all_gather_along");
  const int parts = tp.size();
  Shape shape = local.shape();
  shape[static_cast<size_t>(dim)] *= parts;
  Tensor whole = Tensor::uninitialized(shape, local.dtype());
  if (v.outer == 1) {  // the blocks are contiguous: gather straight into place
    tp.all_gather(local.data(), whole.data(), static_cast<size_t>(local.numel()), local.dtype());
    return whole;
  }
  Tensor blocks = Tensor::uninitialized(Shape{parts, local.numel()}, local.dtype());
  tp.all_gather(local.data(), blocks.data(), static_cast<size_t>(local.numel()), local.dtype());
  const size_t row = static_cast<size_t>(v.extent) * v.inner_bytes;
  auto* dst = static_cast<std::byte*>(whole.data());
  const auto* src = static_cast<const std::byte*>(blocks.data());
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int r = 0; r < parts; ++r) {
      std::memcpy(dst + (static_cast<size_t>(o) * parts + static_cast<size_t>(r)) * row,
                  src + static_cast<size_t>(r) * local.bytes() + static_cast<size_t>(o) * row, row);
    }
  }
  return whole;
}

Tensor split_along(const Tensor& whole, int dim, int rank, int parts) {
  const DimView v = view_along(whole, dim, "split_along");
  require_divisible(v.extent, parts, dim, whole.shape(), "split_along");
  Shape shape = whole.shape();
  shape[static_cast<size_t>(dim)] /= parts;
  Tensor local = Tensor::uninitialized(shape, whole.dtype());
  const size_t row = static_cast<size_t>(v.extent / parts) * v.inner_bytes;
  auto* dst = static_cast<std::byte*>(local.data());
  const auto* src = static_cast<const std::byte*>(whole.data());
  for (int64_t o = 0; o < v.outer; ++o) {
    std::memcpy(dst + static_cast<size_t>(o) * row,
                src + (static_cast<size_t>(o) * parts + static_cast<size_t>(rank)) * row, row);
  }
  return local;
}

Tensor reduce_scatter_along(Communicator& tp, const Tensor& whole, int dim) {
  const DimView v = view_along(whole, dim, "reduce_scatter_along");
  const int parts = tp.size();
  require_divisible(v.extent, parts, dim, whole.shape(), "reduce_scatter_along");
  Shape shape = whole.shape();
  shape[static_cast<size_t>(dim)] /= parts;
  Tensor local = Tensor::uninitialized(shape, whole.dtype());
  const size_t count = static_cast<size_t>(local.numel());
  if (v.outer == 1) {
    tp.reduce_scatter(whole.data(), local.data(), count, whole.dtype(), ReduceOp::sum);
    return local;
  }
  // Rank-major blocks first, so that each rank's block is contiguous.
  Tensor blocks = Tensor::uninitialized(Shape{parts, local.numel()}, whole.dtype());
  for (int r = 0; r < parts; ++r) {
    Tensor part = split_along(whole, dim, r, parts);
    std::memcpy(static_cast<std::byte*>(blocks.data()) + static_cast<size_t>(r) * part.bytes(),
                part.data(), part.bytes());
  }
  tp.reduce_scatter(blocks.data(), local.data(), count, whole.dtype(), ReduceOp::sum);
  return local;
}

void all_reduce_in_place(Communicator& tp, Tensor& t) {
  if (tp.size() == 1 || t.empty()) return;
  tp.all_reduce(t.data(), t.data(), static_cast<size_t>(t.numel()), t.dtype(), ReduceOp::sum);
}

ParallelTensor copy_to_tp_forward(Communicator&, ParallelTensor x) {
  require_placement(x, Placement::replicate(), "copy_to_tp (forward)");
  return x;
}

ParallelTensor copy_to_tp_backward(Communicator& tp, ParallelTensor grad) {
  require_placement(grad, Placement::partial(), "copy_to_tp (backward)");
  all_reduce_in_place(tp, grad.local);
  return with_placement(std::move(grad.local), Placement::replicate());
}

ParallelTensor reduce_from_tp_forward(Communicator& tp, ParallelTensor x) {
  require_placement(x, Placement::partial(), "reduce_from_tp (forward)");
  all_reduce_in_place(tp, x.local);
  return with_placement(std::move(x.local), Placement::replicate());
}

ParallelTensor reduce_from_tp_backward(Communicator&, ParallelTensor grad) {
  require_placement(grad, Placement::replicate(), "reduce_from_tp (backward)");
  return grad;
}

ParallelTensor scatter_to_tp_forward(Communicator& tp, const ParallelTensor& x, int dim) {
  require_placement(x, Placement::replicate(), "scatter_to_tp (forward)");
  return with_placement(split_along(x.local, dim, tp.rank(), tp.size()), Placement::shard(dim));
}

ParallelTensor scatter_to_tp_backward(Communicator& tp, const ParallelTensor& grad, int dim) {
  require_placement(grad, Placement::shard(dim), "scatter_to_tp (backward)");
  return with_placement(all_gather_along(tp, grad.local, dim), Placement::replicate());
}

ParallelTensor gather_from_tp_forward(Communicator& tp, const ParallelTensor& x, int dim) {
  require_placement(x, Placement::shard(dim), "gather_from_tp (forward)");
  return with_placement(all_gather_along(tp, x.local, dim), Placement::replicate());
}

ParallelTensor gather_from_tp_backward(Communicator& tp, const ParallelTensor& grad, int dim) {
  require_placement(grad, Placement::replicate(), "gather_from_tp (backward)");
  return with_placement(split_along(grad.local, dim, tp.rank(), tp.size()), Placement::shard(dim));
}

ParallelTensor gather_from_sequence_forward(Communicator& tp, const ParallelTensor& x) {
  require_placement(x, Placement::shard(0), "gather_from_sequence (forward)");
  return with_placement(all_gather_along(tp, x.local, 0), Placement::replicate());
}

ParallelTensor gather_from_sequence_backward(Communicator& tp, const ParallelTensor& grad) {
  require_placement(grad, Placement::partial(), "gather_from_sequence (backward)");
  return with_placement(reduce_scatter_along(tp, grad.local, 0), Placement::shard(0));
}

PendingGradient::~PendingGradient() {
  try {
    work_.wait();
  } catch (...) {  // the error that skipped finish() is the one to report
  }
}

ParallelTensor PendingGradient::finish() {
  work_.wait();
  source_ = Tensor();
  return with_placement(std::move(result_), placement_);
}

PendingGradient start_copy_to_tp_backward(Communicator& tp, ParallelTensor grad) {
  require_placement(grad, Placement::partial(), "copy_to_tp (backward)");
  Work work;
  if (tp.size() > 1 && !grad.local.empty()) {
    work = tp.all_reduce_async(grad.local.data(), grad.local.data(),
                               static_cast<size_t>(grad.local.numel()), grad.local.dtype(),
                               ReduceOp::sum);
  }
  return PendingGradient(std::move(work), std::move(grad.local), Tensor(), Placement::replicate());
}

PendingGradient start_gather_from_sequence_backward(Communicator& tp, ParallelTensor grad) {
  require_placement(grad, Placement::partial(), "gather_from_sequence (backward)");
  // Rank r's block of a split along rows is contiguous: the gradient is already in the
  // rank-major order reduce_scatter takes (reduce_scatter_along copies only for other dims).
  Tensor local = split_along(grad.local, 0, tp.rank(), tp.size());  // checks that the rows divide
  const auto count = static_cast<size_t>(local.numel());
  Work work = tp.reduce_scatter_async(grad.local.data(), local.data(), count, grad.local.dtype(),
                                      ReduceOp::sum);
  return PendingGradient(std::move(work), std::move(local), std::move(grad.local),
                         Placement::shard(0));
}

ParallelTensor reduce_scatter_to_sequence_forward(Communicator& tp, const ParallelTensor& x) {
  require_placement(x, Placement::partial(), "reduce_scatter_to_sequence (forward)");
  return with_placement(reduce_scatter_along(tp, x.local, 0), Placement::shard(0));
}

ParallelTensor reduce_scatter_to_sequence_backward(Communicator& tp, const ParallelTensor& grad) {
  require_placement(grad, Placement::shard(0), "reduce_scatter_to_sequence (backward)");
  return with_placement(all_gather_along(tp, grad.local, 0), Placement::replicate());
}

}  // namespace tpf
