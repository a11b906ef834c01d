#include "cli/auto_layout.h"

#include <algorithm>
#include <cmath>

#include "plan/collective_planner.h"
#include "plan/layout.h"
#include "plan/step_model.h"
#include "plan/text_format.h"
#include "tpf/error.h"

namespace tpf::cli {
namespace {

// "compute 71%, TP 3%, bubble 20%, ...": the parts of the predicted step that are not zero.
std::string breakdown_text(const plan::StepEstimate& e) {
  std::string text;
  for (const plan::BreakdownPart& part : plan::kBreakdownParts) {
    const double seconds = e.breakdown.*part.seconds;
    if (seconds <= 0.005 * e.step_s) continue;
    text += plan::format("%s%s %.0f%%", text.empty() ? "" : ", ", part.name,
                         100.0 * seconds / e.step_s);
  }
  return text;
}

// Every tp x pp x dp of `ranks`, with and without ZeRO-1 where dp > 1, and interleaved with
// each vp whose pp x vp chunks divide the model's `layers` equally.
std::vector<TrainLayout> layouts_of(int ranks, int64_t layers) {
  std::vector<TrainLayout> all;
  for (int tp = 1; tp <= ranks; ++tp) {
    if (ranks % tp != 0) continue;
    for (int pp = 1; pp <= ranks / tp; ++pp) {
      if ((ranks / tp) % pp != 0) continue;
      for (int vp = 1; vp == 1 || (pp > 1 && pp * vp <= layers); ++vp) {
        if (vp > 1 && layers % (pp * vp) != 0) continue;
        TrainLayout layout{tp, pp, ranks / tp / pp, false};
        layout.vp = vp;
        all.push_back(layout);
        if (layout.dp > 1) {
          layout.zero1 = true;
          all.push_back(layout);
        }
      }
    }
  }
  return all;
}

}  // namespace

plan::ModelSpec planner_model(const RunConfig& config) {
  const ModelConfig& m = config.model;
  plan::ModelSpec spec;
  spec.name = config.preset.empty() ? "tpf-train" : config.preset;
  spec.layers = static_cast<int>(m.layers);
  spec.hidden = static_cast<int>(m.width);
  spec.heads = static_cast<int>(m.heads);
  spec.ffn_hidden = static_cast<int>(m.mlp_width());
  spec.seq_len = static_cast<int>(m.context);
  spec.vocab = static_cast<int>(m.vocab);
  spec.global_batch = static_cast<int>(config.train.batch_size * config.train.grad_accum);
  // GPT-2: GELU MLP, LayerNorm, biases, learned positions, the output layer tied to the
  // embedding (gpt.h); these are ModelSpec's defaults, set here so a change there cannot drift.
  spec.gated_mlp = false;
  spec.rms_norm = false;
  spec.biases = true;
  spec.learned_positions = true;
  spec.tied_embeddings = true;
  plan::validate(spec);
  return spec;
}

std::string planner_layout(const TrainLayout& layout, const RunConfig& config) {
  const TrainConfig& t = config.train;
  std::string text = "tp=" + std::to_string(layout.tp) + ",pp=" + std::to_string(layout.pp) +
                     ",dp=" + std::to_string(layout.dp) + ",mb=" + std::to_string(t.batch_size) +
                     ",gb=" + std::to_string(t.batch_size * t.grad_accum) +
                     ",precision=fp32,attention=materialized,recompute=none" +
                     ",zero=" + (layout.zero1 ? "1" : "0") +
                     ",sp=" + (t.sequence_parallel && layout.tp > 1 ? "1" : "0");
  // The pipeline's sends are asynchronous (run_pipeline): a transfer travels while its sender
  // computes on, as overlap=pp prices it.
  std::string overlap = "pp";
  if (t.dp_comm_overlap) overlap += "+dp_grads";
  if (t.tp_comm_overlap) overlap += "+tp";
  text += ",overlap=" + overlap;
  // GradientBuckets (and ZeRO-1's reduce_async) reduce each block's gradients as its backward
  // finishes: a bucket is one layer's parameters on a rank.
  const plan::LayerParameters block = planner_model(config).layer_parameters();
  text += ",bucket=" + std::to_string(static_cast<long long>(
                           std::ceil(block.sharded / layout.tp + block.replicated)));
  if (layout.vp > 1) {
    text += ",vp=" + std::to_string(layout.vp);  // equal chunks, as the trainer's
  } else if (layout.pp > 1) {
    // The trainer's own stage sizes (the first and last may be lighter).
    auto layers_of = [&](int stage) {
      const StageSpan span = pipeline_stage(config.model, layout, stage);
      return std::to_string(span.end_layer - span.first_layer);
    };
    text += ",first=" + layers_of(0) + ",last=" + layers_of(layout.pp - 1);
  }
  return text;
}

namespace {

LayoutCandidate predict(const TrainLayout& layout, const RunConfig& config, int ranks,
                        const plan::ModelSpec& model, plan::CollectivePlanner& planner) {
  LayoutCandidate c;
  c.layout = layout;
  try {
    check_train_layout(layout, ranks, config);
    const plan::StepEstimate e =
        plan::estimate_step(model, plan::parse_layout(planner_layout(layout, config)), planner);
    if (e.fits) {
      c.tokens_per_s = e.tokens_per_s;
      c.step_s = e.step_s;
      c.summary = breakdown_text(e);
    } else {
      c.summary = "does not fit in memory";
    }
  } catch (const Error& e) {
    c.summary = e.what();
    const std::string option = "--layout: ";  // the reader knows which option it is
    if (c.summary.rfind(option, 0) == 0) c.summary.erase(0, option.size());
  }
  return c;
}

}  // namespace

LayoutCandidate predict_train_layout(const TrainLayout& layout, const RunConfig& config,
                                     const plan::ClusterSpec& cluster) {
  plan::CollectivePlanner planner(cluster);
  return predict(layout, config, layout.ranks(), planner_model(config), planner);
}

LayoutChoice choose_train_layout(const RunConfig& config, int ranks,
                                 const plan::ClusterSpec& cluster) {
  const plan::ModelSpec model = planner_model(config);
  plan::CollectivePlanner planner(cluster);
  LayoutChoice choice;
  for (const TrainLayout& layout : layouts_of(ranks, config.model.layers)) {
    choice.candidates.push_back(predict(layout, config, ranks, model, planner));
  }
  std::stable_sort(choice.candidates.begin(), choice.candidates.end(),
                   [](const LayoutCandidate& a, const LayoutCandidate& b) {
                     return a.tokens_per_s > b.tokens_per_s;
                   });
  std::string table;
  for (const LayoutCandidate& c : choice.candidates) {
    table += plan::format("  %-26s ", c.layout.to_string().c_str()) +
             (c.tokens_per_s > 0 ? plan::format("%9.0f tokens/s  ", c.tokens_per_s)
                                 : std::string("cannot run: ")) +
             c.summary + "\n";
  }
  const LayoutCandidate& best = choice.candidates.front();
  if (best.tokens_per_s <= 0) {
    throw Error(
        ErrorCode::invalid_argument,
        "--layout auto: no layout of " + std::to_string(ranks) + " ranks can run:\n" + table);
  }
  choice.chosen = best.layout;
  choice.explanation =
      plan::format(
          "--layout auto chose %s: predicted %.0f tokens/s, the fastest of %zu layouts "
          "on %s (%s)\n",
          best.layout.to_string().c_str(), best.tokens_per_s, choice.candidates.size(),
          cluster.name.c_str(), best.summary.c_str()) +
      table;
  return choice;
}

}  // namespace tpf::cli
