// Data-parallel gradient reduction overlapped with the backward pass: as the last micro-batch's
// backward finishes a group of parameters (the output layer, each block, the embedding), their
// gradients are packed into a bucket whose all-reduce over the DP group starts at once, while the
// pass goes on through the layers below (PyTorch DDP's and Megatron-LM's overlap of the gradient
// reduction). finish() waits for every bucket and writes the sums back.
//
// The sums are the same numbers as one all-reduce of all the gradients: the fabric reduces every
// element in rank order whatever the message size, and the replicas issue the buckets in the same
// order (they run the same schedule).
#pragma once

#include <vector>

#include "parallel/parameter.h"
#include "parallel/timeline.h"
#include "tpf/comm.h"

namespace tpf {

class GradientBuckets {
 public:
  // seconds: where the time spent waiting in finish() is added (and a "dp" span, where
  // timeline records).
  GradientBuckets(Communicator& data, double& seconds, Timeline* timeline = nullptr)
      : data_(data), seconds_(seconds), timeline_(timeline) {}
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;
  ~GradientBuckets();

  // Starts the all-reduce of these parameters' gradients; they must not change until finish().
  void reduce_async(const std::vector<Parameter*>& params);
  void finish();
  bool empty() const { return buckets_.empty(); }

 private:
  struct Bucket {
    std::vector<Tensor*> grads;
    Tensor packed;
    Work work;
  };
  Communicator& data_;
  double& seconds_;
  Timeline* timeline_;
  std::vector<Bucket> buckets_;
};

}  // namespace tpf
