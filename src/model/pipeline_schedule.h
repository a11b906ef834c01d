// The order in which a pipeline stage runs the forward and backward passes of a step's
// micro-batches. 1F1B (PipeDream-Flush, Narayanan et al., "Efficient Large-Scale Language Model
// Training on GPU Clusters Using Megatron-LM", 2021): stage s of P first runs P - 1 - s forwards
// (the warm-up that fills the pipeline), then alternates one forward and one backward, then runs
// the remaining backwards. At most P - s micro-batches are in flight on stage s, against all M
// with GPipe's all-forwards-then-all-backwards, and the bubble is the same: (P-1)/(M+P-1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tpf {

struct PipelinePass {
  enum class Kind { forward, backward };
  Kind kind;
  int64_t micro_batch;
  bool operator==(const PipelinePass&) const = default;
};

// The passes of stage `stage` (0-based) of `stages` over `micro_batches` micro-batches.
std::vector<PipelinePass> one_forward_one_backward(int stages, int stage, int64_t micro_batches);

// "F0 F1 B0 F2 B1 B2": for messages and tests.
std::string describe(const std::vector<PipelinePass>& passes);

// The idle share of a stage's time in 1F1B with equal stages and backward = forward x k for any
// k: (P - 1) / (M + P - 1).
double one_forward_one_backward_bubble(int stages, int64_t micro_batches);

}  // namespace tpf
