// `tpf train --layout auto`: the planner's pick among the layouts the trainer can run on this
// job's ranks, predicted on this machine (host_cluster.h); `tpf train --predict`: its prediction
// of the layout the run uses.
#pragma once

#include <string>
#include <vector>

#include "model/gpt_config.h"
#include "model/train_layout.h"
#include "plan/cluster.h"
#include "plan/model_spec.h"

namespace tpf::cli {

// The trainer's GPT (GPT-2 style, byte-level, tied embedding) as the planner describes models.
plan::ModelSpec planner_model(const RunConfig& config);

// The planner's layout string for `layout` of the trainer under `config` (micro-batch, global
// batch, fp32, materialized attention, the trainer's overlap settings, its stage sizes).
std::string planner_layout(const TrainLayout& layout, const RunConfig& config);

struct LayoutCandidate {
  TrainLayout layout;
  double tokens_per_s = 0;  // predicted; 0 when it cannot run
  double step_s = 0;
  std::string summary;  // the predicted breakdown, or why it cannot run
};

// The planner's prediction of `layout` (its ranks on `cluster`, one accelerator each), or why the
// trainer or the planner cannot run it (tokens_per_s 0).
LayoutCandidate predict_train_layout(const TrainLayout& layout, const RunConfig& config,
                                     const plan::ClusterSpec& cluster);

struct LayoutChoice {
  TrainLayout chosen;
  std::vector<LayoutCandidate>
      candidates;           // every tp x pp x dp (x vp, zero1) of the ranks, best first
  std::string explanation;  // what rank 0 prints
};

// Predicts every layout of `ranks` ranks on `cluster` (one accelerator per rank) and picks the
// fastest that the trainer accepts (check_train_layout) and that fits memory. Throws
// Error(invalid_argument) listing the reasons when none does.
LayoutChoice choose_train_layout(const RunConfig& config, int ranks,
                                 const plan::ClusterSpec& cluster);

}  // namespace tpf::cli
