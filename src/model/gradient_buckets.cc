#include "model/gradient_buckets.h"

#include <algorithm>

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
  int64_t total = 0;
  for (const Parameter* p : params) total += p->grad.numel();
  if (total == 0 || data_.size() == 1) return;
  Bucket& b = buckets_.emplace_back();
  b.params = params;
  b.packed = Tensor::uninitialized({total});
  int64_t at = 0;
  for (const Parameter* p : params) {
    std::copy_n(p->grad.f32(), p->grad.numel(), b.packed.f32() + at);
    at += p->grad.numel();
  }
  b.work = data_.all_reduce_async(b.packed.data(), b.packed.data(), static_cast<size_t>(total),
                                  DType::f32, ReduceOp::sum);
}

void GradientBuckets::finish() {
  timed_span(timeline_, seconds_, "dp", "wait for DP gradient buckets", [&] {
    for (Bucket& b : buckets_) b.work.wait();
  });
  for (Bucket& b : buckets_) {
    int64_t at = 0;
    for (Parameter* p : b.params) {
      std::copy_n(b.packed.f32() + at, p->grad.numel(), p->grad.f32());
      at += p->grad.numel();
    }
  }
  buckets_.clear();
}

}  // namespace tpf
