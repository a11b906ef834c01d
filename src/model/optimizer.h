// AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization", 2019) over this rank's
// parameter slices, global-norm gradient clipping across the tensor-parallel group, and the
// warm-up + cosine learning-rate schedule.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model/gpt_config.h"
#include "parallel/parameter.h"
#include "parallel/tp_group.h"
#include "tensor/kernels.h"

namespace tpf {

// Learning rate at `step` (0-based): linear warm-up from lr/warmup to lr over `warmup` steps,
// then a cosine from lr down to min_lr at the last step.
double learning_rate(const TrainConfig& config, int64_t step);

// Sums the selected parameters' gradients over comm, in one all-reduce of them packed together.
void all_reduce_gradients(Communicator& comm, const std::vector<Parameter*>& params,
                          const std::function<bool(const Parameter&)>& selected);

// Sums the gradients that sequence parallelism leaves partial (Parameter::grad_summed_over_tp).
void reduce_sequence_parallel_grads(TpGroup& tp, const std::vector<Parameter*>& params);

// The L2 norm of the whole model's gradient: sharded slices are summed over the group, replicated
// parameters counted once (identical on every rank). Returns the same value on every rank.
double global_grad_norm(TpGroup& tp, const std::vector<Parameter*>& params);
// Its square, before the square root (for sums across pipeline stages).
double grad_square_sum(TpGroup& tp, const std::vector<Parameter*>& params);

// The constants of AdamW's update number `step` (1-based) with learning rate lr (decay = 1: set
// it per parameter with adamw_decay).
AdamWStep adamw_constants(const TrainConfig& config, int64_t step, double lr, double grad_scale);
float adamw_decay(const TrainConfig& config, const Parameter& p, double lr);

class AdamW {
 public:
  AdamW(const std::vector<Parameter*>& params, const TrainConfig& config);
  // One update with learning rate lr; gradients are multiplied by grad_scale first (clipping).
  void step(double lr, double grad_scale);
  int64_t steps_taken() const { return steps_; }
  // First and second moments, one per parameter (checkpoints save and restore them).
  std::vector<Tensor>& first_moments() { return m_; }
  std::vector<Tensor>& second_moments() { return v_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }

 private:
  std::vector<Parameter*> params_;
  TrainConfig config_;
  std::vector<Tensor> m_, v_;
  int64_t steps_ = 0;
};

}  // namespace tpf
