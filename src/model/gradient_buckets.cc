#include "model/gradient_buckets.h"

namespace tpf {

GradientBuckets::~GradientBuckets() {
  // An exception left buckets in flight: their buffers must outlive the operations, which end
  // (or fail) within the communicator's deadline.
  for (Bucket& b : buckets_) {
    try {
      b.work.wait();
    } catch (...) {  // the error that unwound the step is the one to report
    }
  }
}

void GradientBuckets::reduce_async(const std::vector<Parameter*>& params) {
  std::vector<Tensor*> grads = gradients_of(params);
  const int64_t total = total_numel(grads);
  if (total == 0 || data_.size() == 1) return;
  Bucket& b = buckets_.emplace_back();
  b.packed = pack_flat(grads, total);
  b.grads = std::move(grads);
  b.work = data_.all_reduce_async(b.packed.data(), b.packed.data(), static_cast<size_t>(total),
                                  DType::f32, ReduceOp::sum);
}

void GradientBuckets::finish() {
  timed_span(timeline_, seconds_, "dp", "wait for DP gradient buckets", [&] {
    for (Bucket& b : buckets_) b.work.wait();
  });
  for (Bucket& b : buckets_) unpack_flat(b.packed, b.grads);
  buckets_.clear();
}

}  // namespace tpf
