// The time and memory of one training step of a model under a layout on a cluster: compute per
// layer from each GEMM's shape and the attention kernel (ComputeModel), TP collectives on the
// critical path, expert-parallel all-to-alls, pipeline bubbles of 1F1B and interleaved schedules,
// p2p activations between stages, data-parallel gradient reduction bucketed and overlapped with the
// last backward pass, optimizer, and memory per GPU (weights, gradients, optimizer state,
// activations per Korthikanti et al. 2022).
#pragma once

#include <string>
#include <vector>

#include "plan/collective_planner.h"
#include "plan/layout.h"
#include "plan/model_spec.h"

namespace tpf::plan {

struct MemoryEstimate {
  double weights_gb = 0, gradients_gb = 0, optimizer_gb = 0, activations_gb = 0, other_gb = 0;
  double total_gb() const {
    return weights_gb + gradients_gb + optimizer_gb + activations_gb + other_gb;
  }
};

// Seconds of one step, split so the parts add up to step_s.
struct StepBreakdown {
  double compute_s = 0;     // GEMMs and element-wise work of the busiest stage, all micro-batches
  double tp_comm_s = 0;     // TP collectives on the critical path
  double cp_comm_s = 0;     // context-parallel K/V passing not hidden behind attention
  double ep_comm_s = 0;     // expert-parallel all-to-alls (token dispatch and combine)
  double pp_comm_s = 0;     // activations and gradients between stages
  double pp_bubble_s = 0;   // pipeline fill and drain
  double dp_exposed_s = 0;  // gradient reduction not hidden behind the backward pass
  double optimizer_s = 0;
};

// The parts of a step by name, in the order reports list them.
struct BreakdownPart {
  const char* name;
  const char* color;  // for charts
  double StepBreakdown::*seconds;
};
inline constexpr BreakdownPart kBreakdownParts[] = {
    {"compute", "#4e79a7", &StepBreakdown::compute_s},
    {"TP comm", "#f28e2b", &StepBreakdown::tp_comm_s},
    {"CP comm", "#b07aa1", &StepBreakdown::cp_comm_s},
    {"EP comm", "#9c755f", &StepBreakdown::ep_comm_s},
    {"PP comm", "#edc948", &StepBreakdown::pp_comm_s},
    {"PP bubble", "#e15759", &StepBreakdown::pp_bubble_s},
    {"exposed DP comm", "#76b7b2", &StepBreakdown::dp_exposed_s},
    {"optimizer", "#59a14f", &StepBreakdown::optimizer_s},
};

struct StepEstimate {
  Layout layout;  // with global_batch filled in
  double step_s = 0;
  StepBreakdown breakdown;
  MemoryEstimate memory;
  bool fits = true;  // memory.total_gb() <= the GPU's memory
  double tokens_per_s = 0;
  double mfu = 0;                    // model FLOPs / (step time * GPUs * peak)
  double gemm_efficiency = 0;        // of the per-GPU GEMMs
  double dp_comm_s = 0;              // whole gradient reduction, hidden or not
  CollectiveEstimate tp_all_reduce;  // one activation all-reduce (or its SP equivalent)
  CollectiveEstimate dp_reduction;   // the whole gradient reduction of one GPU
  std::vector<std::string> notes;    // e.g. why it does not fit
};

// Checks that `layout` can run `model` on `cluster`; returns the global batch it runs (the
// model's when the layout gives none). Throws Error(invalid_argument) naming the problem:
// degrees not matching the GPU count, heads or layers not divisible, a global batch not
// divisible into micro-batches, interleaving without enough micro-batches, ...
int validate_layout(const ModelSpec& model, const Layout& layout, const ClusterSpec& cluster);

// Layers of each pipeline stage: L / pp each (in vp equal chunks), or first= and last= for the
// end stages and the rest split evenly (at least vp layers each). Throws Error(invalid_argument)
// where they do not divide.
std::vector<int> layers_per_stage(const ModelSpec& model, const Layout& layout);

// Throws Error(invalid_argument) naming the problem when the layout is impossible for the model
// and cluster: degrees not matching the GPU count, heads or layers not divisible, a global batch
// not divisible into micro-batches, interleaving without enough micro-batches, ...
StepEstimate estimate_step(const ModelSpec& model, const Layout& layout,
                           CollectivePlanner& planner);

}  // namespace tpf::plan
