// `tpf train`: trains a GPT over the ranks of the job, with tensor parallelism over all of them
// or the tensor x pipeline x data-parallel layout --layout gives, e.g.
// `tpf run -n 4 -- tpf train --preset small --layout tp=2,pp=2 --data text.txt --out runs/small`.
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "cli/auto_layout.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/host_cluster.h"
#include "cli/model_cli.h"
#include "cli/option_values.h"
#include "model/gpt_config.h"
#include "model/pipeline_schedule.h"
#include "model/trainer.h"
#include "tensor/blas.h"
#include "tpf/error.h"

namespace tpf::cli {

namespace {

// The command line as given; converted (and checked) by train_options().
struct TrainFlags {
  std::optional<std::string> preset;
  std::optional<std::string> config;
  std::optional<std::string> resume;
  std::string data;
  std::optional<std::string> steps;
  std::optional<std::string> seed;
  std::string out;
  bool sequence_parallel = false;
  std::string layout;
  std::string trace;
  std::optional<std::string> threads;
  bool quiet = false;
  bool predict = false;
};

TrainOptions train_options(const TrainFlags& flags) {
  if (flags.preset.has_value() + flags.config.has_value() + flags.resume.has_value() != 1) {
    throw UsageError("give exactly one of --preset, --config or --resume");
  }
  TrainOptions options;
  // The values first: a bad one is named before any file is read.
  options.seed = static_cast<uint64_t>(integer_option(flags.seed, "--seed", 1, 0));
  options.steps = integer_option(flags.steps, "--steps", -1, 1, kMaxSteps);
  if (flags.preset) options.config = preset_config(*flags.preset);
  if (flags.config) options.config = load_config_file(*flags.config);
  options.sequence_parallel = flags.sequence_parallel;
  options.layout = flags.layout;
  options.trace_path = flags.trace;
  options.resume = flags.resume.value_or("");
  options.data_path = flags.data;
  options.out_dir = flags.out;
  options.progress = !flags.quiet;
  return options;
}

std::string preset_list() {
  std::string list;
  for (const auto& name : preset_names()) list += " " + name;
  return list;
}

// Where the planner places this job's ranks (host_cluster.h), or why it cannot: collective.
struct JobPlacement {
  HostSpread spread;
  std::string unplannable;  // empty when the planner can place the job
};

JobPlacement job_placement(World& world) {
  JobPlacement placement;
  try {
    placement.spread = host_spread(world.comm());
  } catch (const Error& e) {
    placement.unplannable = e.what();
  }
  return placement;
}

// The planner's choice for --layout auto, predicted on this machine (or the hosts the job spans,
// auto_layout.h); rank 0 prints the choice and the alternatives.
std::function<TrainLayout(const RunConfig&, int)> planner_choice(const JobPlacement& placement) {
  return [placement](const RunConfig& config, int ranks) {
    if (!placement.unplannable.empty()) {
      throw Error(ErrorCode::invalid_argument, "--layout auto cannot place this job: " +
                                                   placement.unplannable + "; give --layout");
    }
    const LayoutChoice choice = choose_train_layout(
        config, ranks, load_cluster_or_host(kHostClusterName, ranks, placement.spread));
    std::printf("tpf train: %s", choice.explanation.c_str());
    std::fflush(stdout);
    return choice.chosen;
  };
}

// --predict: rank 0 prints the planner's prediction of the run's layout on this machine (or the
// hosts the job spans) before training. A prediction that fails says so and never stops the run.
void print_prediction(const JobPlacement& placement, const RunConfig& config,
                      const TrainLayout& layout) {
  const std::string cannot = "tpf train: the planner cannot predict " + layout.to_string() + ": ";
  if (!placement.unplannable.empty()) {
    std::printf("%s%s\n", cannot.c_str(), placement.unplannable.c_str());
    return;
  }
  try {
    const plan::ClusterSpec cluster =
        load_cluster_or_host(kHostClusterName, layout.ranks(), placement.spread);
    const LayoutCandidate p = predict_train_layout(layout, config, cluster);
    if (p.tokens_per_s > 0) {
      std::printf("tpf train: the planner predicts %.0f tokens/s at %s on %s (%s)\n",
                  p.tokens_per_s, layout.to_string().c_str(), cluster.name.c_str(),
                  p.summary.c_str());
    } else {
      std::printf("%s%s\n", cannot.c_str(), p.summary.c_str());
    }
  } catch (const Error& e) {
    std::printf("%s%s\n", cannot.c_str(), e.what());
  }
  std::fflush(stdout);
}

int run_train(const TrainFlags& flags) {
  TrainOptions options = train_options(flags);
  const int threads_asked =
      static_cast<int>(integer_option(flags.threads, "--threads", 0, 1, kMaxBlasThreads));
  World world;
  const bool plans = options.layout == kAutoLayout || flags.predict;
  const JobPlacement placement = plans ? job_placement(world) : JobPlacement{};
  if (options.layout == kAutoLayout) options.choose_layout = planner_choice(placement);
  if (flags.predict) {
    options.on_layout = [placement](const RunConfig& config, const TrainLayout& layout) {
      print_prediction(placement, config, layout);
    };
  }
  const int threads = configure_blas_threads(threads_asked, world.local_ranks());
  const TrainSummary summary = train(world.comm(), options);
  if (world.comm().rank() == 0 && !summary.records.empty()) {
    std::printf(
        "tpf train: %zu step%s, loss %.4f -> %.4f, %.0f tokens/s at %s (%d BLAS thread%s "
        "per rank, OpenBLAS %s kernels), %.1f%% of step time in communication%s\n",
        summary.records.size(), summary.records.size() == 1 ? "" : "s",
        summary.records.front().loss, summary.records.back().loss, summary.tokens_per_s,
        summary.layout.to_string().c_str(), threads, threads == 1 ? "" : "s",
        blas_kernel_name().c_str(), 100.0 * summary.comm_share,
        summary.records.size() == 1 ? " (one step: its rate includes first touches of memory)"
                                    : "");
    if (summary.layout.ranks() > 1) {
      const TrainLayout& l = summary.layout;
      const double theory = interleaved_bubble(l.pp, l.vp, summary.micro_batches);
      const std::string bubble =
          l.pp > 1 ? std::string(" (") + (l.vp > 1 ? "interleaved 1F1B" : "1F1B") +
                         "'s bubble in theory: " +
                         std::to_string(static_cast<int>(100.0 * theory + 0.5)) + "% at " +
                         std::to_string(summary.micro_batches) + " micro-batches" +
                         (l.vp > 1 ? " x " + std::to_string(l.vp) + " chunks" : "") + ")"
                   : "";
      std::printf(
          "tpf train: rank 0's step time: %.1f%% in TP collectives, %.1f%% waiting for other "
          "pipeline stages%s, %.1f%% in DP and cross-stage exchanges, the rest computing\n",
          100.0 * summary.tp_share, 100.0 * summary.pp_share, bubble.c_str(),
          100.0 * summary.dp_share);
    }
    if (!options.trace_path.empty()) {
      std::printf(
          "tpf train: timeline of every rank in %s (Chrome trace format: open it in "
          "https://ui.perfetto.dev)\n",
          options.trace_path.c_str());
    }
    if (!options.out_dir.empty()) {
      std::printf(
          "tpf train: log %s/log.jsonl, loss curve %s/loss.svg, checkpoint %s/checkpoints/\n",
          options.out_dir.c_str(), options.out_dir.c_str(), options.out_dir.c_str());
    }
  }
  return kExitOk;
}

}  // namespace

void add_train_command(Command& tpf) {
  Command train = tpf.add_subcommand("train", "train a parallel GPT on a text file");
  train.footer(
      "Trains a GPT-2-style byte-level model over this job's ranks: tensor parallelism over all\n"
      "of them, or the layout --layout gives (start it with `tpf run -n N -- tpf train ...`;\n"
      "alone it trains on one rank). Give exactly one of --preset, --config or --resume.");
  auto flags = std::make_shared<TrainFlags>();
  train.add_option("--preset", flags->preset, "a built-in configuration:" + preset_list())
      .type_name("NAME");
  train
      .add_option("--config", flags->config,
                  "a JSON configuration (see src/model/gpt_config.h); may name a preset")
      .type_name("FILE");
  train
      .add_option("--resume", flags->resume,
                  "continue from a checkpoint or a previous --out directory, at any\n"
                  "layout (model, optimizer state and data position are restored)")
      .type_name("DIR");
  train.add_option("--data", flags->data, "any UTF-8 (or binary) file; the tokenizer is its bytes")
      .type_name("TEXT_FILE")
      .required();
  train
      .add_option("--steps", flags->steps,
                  "total optimizer steps, at least 1 (overrides the configuration;\n"
                  "with --resume, the step to stop at)")
      .type_name("N");
  train.add_option("--seed", flags->seed, "initialization, data order and dropout (default 1)")
      .type_name("S");
  train
      .add_option("--out", flags->out,
                  "writes config.json, log.jsonl (one record per step), loss.svg and\n"
                  "checkpoints/ (every train.checkpoint_every steps and at the end)")
      .type_name("DIR");
  train
      .add_option("--layout", flags->layout,
                  "tp=T,pp=P,dp=D[,vp=V][,zero1][,first=N][,last=N] with T x P x D = the\n"
                  "job's ranks (a missing size is 1; default: tp = all ranks): TP innermost,\n"
                  "pipeline stages outermost; dp splits each step's train.grad_accum\n"
                  "micro-batches, pp runs them 1F1B, vp splits each stage into V chunks of\n"
                  "layers run interleaved (a V times smaller bubble for V times the pipeline\n"
                  "traffic), zero1 splits AdamW's moments over the dp replicas, first= and\n"
                  "last= give the end stages' layers (the others share the rest); auto: the\n"
                  "layout the planner predicts fastest here (tpf plan --cluster this-host;\n"
                  "across hosts also --hosts H, with TPF_NET_GBPS the links' rate)")
      .type_name("SIZES");
  train
      .add_option("--trace", flags->trace,
                  "write every rank's compute, TP, pipeline and DP spans to FILE in the\n"
                  "Chrome trace format (open it in https://ui.perfetto.dev)")
      .type_name("FILE");
  train.add_flag("--sequence-parallel", flags->sequence_parallel,
                 "shard LayerNorm/dropout activations along the sequence");
  train
      .add_option("--threads", flags->threads,
                  "BLAS threads per rank (default: cores / ranks on this machine)")
      .type_name("N");
  train.add_flag("--quiet", flags->quiet, "no progress lines");
  train.add_flag("--predict", flags->predict,
                 "print the planner's tokens/s and step breakdown for this run's layout on\n"
                 "this machine, or the hosts the job spans, before training (tpf plan\n"
                 "--cluster this-host [--hosts H])");
  set_action(train, [flags] { return run_train(*flags); });
}

}  // namespace tpf::cli
