// How `tpf train` spreads a model over its ranks: tensor (tp), pipeline (pp) and data (dp)
// parallelism, with world rank = (pp_rank * dp + dp_rank) * tp + tp_rank: TP innermost and
// contiguous (its peers share the fastest links), pipeline stages outermost, as the planner and
// Megatron-LM's default order (tp-dp-pp) lay them out.
//
// Data parallelism splits each step's micro-batches (train.grad_accum of them, train.batch_size
// sequences each): DP rank d runs micro-batches [d M, (d + 1) M), M = grad_accum / dp, so the
// global batch, the data and the dropout masks are the same at every layout.
#pragma once

#include <string>

#include "model/gpt.h"
#include "model/gpt_config.h"

namespace tpf {

struct TrainLayout {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  bool zero1 = false;  // AdamW's moments split over the DP replicas (zero_optimizer.h)
  // Layers of the first and the last pipeline stage, as the planner's first= and last= (the
  // first also embeds, the last computes the output layer and the loss); 0: pipeline_stage's
  // default split.
  int first_layers = 0;
  int last_layers = 0;
  // Chunks of layers per pipeline stage (interleaved 1F1B, pipeline_schedule.h): rank s holds
  // virtual stages s, s + pp, ..., each of layers / (pp vp) layers.
  int vp = 1;
  int ranks() const { return tp * pp * dp; }
  // "tp=2,pp=2,dp=1", then ",vp=N" (where not 1), ",zero1", ",first=N", ",last=N"
  std::string to_string() const;
};

// What `--layout` takes for the planner's choice (TrainOptions::choose_layout).
inline constexpr const char* kAutoLayout = "auto";

// "tp=2,pp=2,dp=2[,vp=2][,zero1][,first=N][,last=N]" (any order; a missing size is 1). Throws
// tpf::Error naming the bad part.
TrainLayout parse_train_layout(const std::string& text);

// Throws tpf::Error saying what does not fit: the product of the sizes against the job's ranks,
// more stages than layers, end-stage sizes that leave a stage without layers (or are given
// without a pipeline), heads or the vocabulary not divisible by tp, micro-batches not divisible
// by dp; with vp, a pipeline of 2 or more stages, layers divisible by pp x vp, each replica's
// micro-batches divisible by pp, and no end-stage sizes.
void check_train_layout(const TrainLayout& layout, int world_size, const RunConfig& config);

// The layers of pipeline stage `stage` of layout.pp: first_layers and last_layers on the end
// stages where given, and the rest an equal share each; where they do not divide, one more on
// each of the last stages but the last (the first embeds and the last computes the output layer
// and loss, so by default they get the fewest). With vp, the stage's vp chunks of
// layers / (pp vp) layers each. A layout check_train_layout accepts.
StageSpan pipeline_stage(const ModelConfig& model, const TrainLayout& layout, int stage);

// This rank's coordinates in the layout.
struct LayoutCoords {
  int tp = 0, dp = 0, pp = 0;
};
LayoutCoords coords_of(const TrainLayout& layout, int world_rank);

}  // namespace tpf
