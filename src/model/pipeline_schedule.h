// The order in which a pipeline stage runs the forward and backward passes of a step's
// micro-batches. 1F1B (PipeDream-Flush, Narayanan et al., "Efficient Large-Scale Language Model
// Training on GPU Clusters Using Megatron-LM", 2021): stage s of P first runs P - 1 - s forwards
// (the warm-up that fills the pipeline), then alternates one forward and one backward, then runs
// the remaining backwards. At most P - s micro-batches are in flight on stage s, against all M
// with GPipe's all-forwards-then-all-backwards, and the bubble is the same: (P-1)/(M+P-1).
//
// Interleaved 1F1B (the same paper, section 2.2): each rank holds V chunks of layers, chunk c of
// rank s being virtual stage c P + s of P V, so a micro-batch passes every rank V times. Each pass
// is 1/V as long, and the bubble shrinks to (P-1)/(V M + P-1), for V times the point-to-point
// traffic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tpf {

struct PipelinePass {
  enum class Kind { forward, backward };
  Kind kind;
  int64_t micro_batch;
  int chunk = 0;  // which of the rank's chunks of layers (interleaved schedule)
  bool operator==(const PipelinePass&) const = default;
};

// The passes of stage `stage` (0-based) of `stages` over `micro_batches` micro-batches.
std::vector<PipelinePass> one_forward_one_backward(int stages, int stage, int64_t micro_batches);

// The passes of rank `stage` of `stages` holding `chunks` chunks each, in Megatron-LM's
// interleaved order: micro-batches go in groups of P, a group through chunk 0, then chunk 1, ...
// forward and in the reverse order of chunks backward; the rank first runs 2 (P - 1 - s) +
// (V - 1) P forwards (all of them when M = P), then alternates, then runs the rest of the
// backwards. micro_batches must be a multiple of stages. chunks = 1 is
// one_forward_one_backward.
std::vector<PipelinePass> interleaved_one_forward_one_backward(int stages, int stage, int chunks,
                                                               int64_t micro_batches);

// "F0 F1 B0 F2 B1 B2": for messages and tests; with chunks, "F0.1" is micro-batch 0's forward
// through chunk 1.
std::string describe(const std::vector<PipelinePass>& passes);

// The idle share of a stage's time in 1F1B with equal stages and backward = forward x k for any
// k: (P - 1) / (M + P - 1).
double one_forward_one_backward_bubble(int stages, int64_t micro_batches);
// The same for the interleaved schedule: (P - 1) / (V M + P - 1).
double interleaved_bubble(int stages, int chunks, int64_t micro_batches);

}  // namespace tpf
