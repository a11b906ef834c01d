// Every layout of a model on a cluster, predicted and ranked: TP, CP, PP and DP degrees that
// multiply to the GPU count, micro-batch sizes, interleaving, sequence parallelism,
// recomputation, the ZeRO stage and, for a mixture of experts, EP and expert TP. Ranked by tokens
// per second, layouts that fit in memory first; the winner is explained against the best layout
// that differs from it in each choice.
#pragma once

#include <string>
#include <vector>

#include "plan/collective_planner.h"
#include "plan/model_spec.h"
#include "plan/step_model.h"

namespace tpf::plan {

struct SearchOptions {
  int global_batch = 0;  // sequences per step; 0 = the model's
  // Run each layout at the batch rounded up to a multiple of its DP size where DP x micro-batch
  // does not divide it. Off: such layouts are skipped (counted), so the winner trains the batch
  // asked for, not a larger one whose smaller bubble and DP share flatter it.
  bool allow_batch_rounding = false;
  std::vector<int> micro_batches = {1, 2, 4, 8};
  std::vector<int> virtual_stages = {1, 2, 4};
  int max_tp = 0;  // 0 = twice the GPUs per node (TP across nodes is shown, rarely wins)
  // What the framework does, the same for every layout: its precision, attention kernel and
  // overlap are copied into each one (the rest of `framework` is ignored).
  Layout framework;
};

// The framework options `text` ("precision=fp8,overlap=tp+dp_grads", layout syntax) sets, on a
// default layout. Throws Error(invalid_argument) naming any other key.
Layout parse_framework_options(const std::string& text);

struct SearchResult {
  std::vector<StepEstimate> ranked;  // fitting layouts by tokens/s, then those that do not fit
  int evaluated = 0;                 // layouts predicted
  int fitting = 0;
  int rejected = 0;                   // impossible combinations skipped (divisibility)
  int asked_batch = 0;                // the global batch asked for (sequences)
  int rounded_up = 0;                 // layouts that run a larger batch (rounded up to DP)
  int batch_skipped = 0;              // layouts skipped: DP x micro-batch does not divide it
  std::vector<std::string> why_best;  // sentences, best first
};

// Throws Error(invalid_argument) if no layout at all is possible, naming why: no TP and PP
// degrees fit the model and the GPU count (e.g. a prime GPU count above the layer count), or no
// data-parallel size they leave splits the global batch.
SearchResult search_layouts(const ModelSpec& model, CollectivePlanner& planner,
                            const SearchOptions& options);

}  // namespace tpf::plan
