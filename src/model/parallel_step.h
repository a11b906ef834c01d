// One training step's passes and gradient exchanges at a tp x pp x dp layout (train_layout.h):
// the micro-batches through this rank's pipeline stage in (interleaved) 1F1B order, activations
// and their gradients between stages by send/recv, then the gradients summed over data
// parallelism and the tied embedding's two copies, and the global norm over all three dimensions.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model/gpt.h"
#include "model/gradient_buckets.h"
#include "model/zero_optimizer.h"
#include "parallel/timeline.h"
#include "parallel/tp_group.h"
#include "tpf/comm.h"

namespace tpf {

// This rank's groups. pipeline ranks are stages, data ranks are DP replicas.
struct TrainGroups {
  TpGroup tp;
  Communicator* pipeline = nullptr;
  Communicator* data = nullptr;
  double pipeline_seconds = 0;   // waiting for activations / gradients from neighbouring stages
  double data_seconds = 0;       // gradient all-reduce over DP, tied-embedding exchange, norm
  Timeline* timeline = nullptr;  // where enabled, spans of every pass and exchange
  int stage() const { return pipeline->rank(); }
  int stages() const { return pipeline->size(); }
};

struct MicroBatch {
  std::vector<int32_t> inputs, targets;  // [batch * seq] token ids
  RngKey dropout_key;
};
// Fills micro-batch `index` (its number within the step, the same at every layout).
using MicroBatchSource = std::function<void(int64_t index, MicroBatch& out)>;

struct MicroBatchRange {
  int64_t first = 0;
  int64_t count = 1;
  int64_t batch = 1;  // sequences per micro-batch
  int64_t seq = 1;
};

// How a step sums the gradients over DP: plain replicas all-reduce them after the backward pass,
// or in buckets during it (`buckets`, gradient_buckets.h); ZeRO-1 (`zero`) reduce-scatters them
// after it, or during it (`overlap`) reduces each group onto the replicas whose shares hold it.
struct DataParallelSums {
  GradientBuckets* buckets = nullptr;
  ShardedAdamW* zero = nullptr;
  bool overlap = false;  // with zero
};

// Runs the micro-batches of `range` through this rank's stage in 1F1B order, interleaved where the
// model's stage holds several chunks of layers (pipeline_schedule.h); gradients accumulate scaled
// by loss_scale. Each micro-batch's activations are stashed between its forward and backward
// passes (Gpt::stash_activations). Returns the sum of the micro-batches' losses on the last stage,
// 0 on the others.
// With buckets, or zero and overlap, the last micro-batch's backward starts the DP sum of each
// group of gradients it finishes. ZeRO-1 first sums the group's sequence-parallel partials over
// TP, and leaves the tied embedding (whose copies are summed with each other first) to
// synchronize_gradients.
double run_pipeline(Gpt& model, TrainGroups& groups, const MicroBatchRange& range,
                    double loss_scale, const MicroBatchSource& source,
                    const DataParallelSums& sums = {});

// After the micro-batches: sums the gradients over DP (waits for the sums run_pipeline started,
// else one all-reduce or ZeRO-1's reduce-scatter; identical on every replica either way), the
// first and last stages' copies of the tied embedding, and the partial sums that sequence
// parallelism leaves over TP.
void synchronize_gradients(Gpt& model, TrainGroups& groups, const DataParallelSums& sums = {});

// The L2 norm of the whole model's gradient, each parameter counted once (TP shards summed,
// replicated values and the tied copy once, stages summed). The same value on every rank.
// With ZeRO-1, from zero's shares of the summed gradients.
double model_grad_norm(Gpt& model, TrainGroups& groups, const ShardedAdamW* zero = nullptr);

// The step's mean loss from the last stages' sums over `micro_batches` micro-batches in all, on
// every rank.
double step_mean_loss(TrainGroups& groups, double last_stage_loss_sum, int64_t micro_batches);

}  // namespace tpf
