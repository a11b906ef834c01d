// `tpf train`: trains a GPT with tensor parallelism over the ranks of the job (TP = number of
// ranks), e.g. `tpf run -n 2 -- tpf train --preset small --data text.txt --out runs/small`.
#include <cstdio>
#include <filesystem>
#include <string>

#include "cli/commands.h"
#include "cli/model_cli.h"
#include "model/gpt_config.h"
#include "model/trainer.h"
#include "tensor/blas.h"

namespace tpf::cli {

namespace {

void print_train_usage() {
  std::printf(
      "usage: tpf train (--preset NAME | --config FILE | --resume DIR) --data TEXT_FILE\n"
      "                 [--steps N] [--seed S] [--out DIR] [--sequence-parallel] [--threads N]\n"
      "                 [--quiet]\n"
      "Trains a GPT-2-style byte-level model with tensor parallelism over this job's ranks\n"
      "(start it with `tpf run -n T -- tpf train ...`; alone it trains at TP=1).\n"
      "  --preset NAME         a built-in configuration:");
  for (const auto& name : preset_names()) std::printf(" %s", name.c_str());
  std::printf(
      "\n"
      "  --config FILE         a JSON configuration (see src/model/gpt_config.h); may name a "
      "preset\n"
      "  --resume DIR          continue from a checkpoint or a previous --out directory, at any\n"
      "                        TP size (model, optimizer state and data position are restored)\n"
      "  --data TEXT_FILE      any UTF-8 (or binary) file; the tokenizer is its bytes\n"
      "  --steps N             total optimizer steps, at least 1 (overrides the configuration;\n"
      "                        with --resume, the step to stop at)\n"
      "  --seed S              initialization, data order and dropout (default 1)\n"
      "  --out DIR             writes config.json, log.jsonl (one record per step), loss.svg and\n"
      "                        checkpoints/ (every train.checkpoint_every steps and at the end)\n"
      "  --sequence-parallel   shard LayerNorm/dropout activations along the sequence\n"
      "  --threads N           BLAS threads per rank (default: cores / ranks on this machine)\n"
      "  --quiet               no progress lines\n");
}

}  // namespace

int cmd_train(int argc, char** argv) {
  const FlagParser flags(
      argc, argv,
      {"--preset", "--config", "--resume", "--data", "--steps", "--seed", "--out", "--threads"},
      {"--sequence-parallel", "--quiet"});
  if (flags.help()) {
    print_train_usage();
    return kExitOk;
  }
  const int sources = flags.has("--preset") + flags.has("--config") + flags.has("--resume");
  if (sources != 1) {
    throw UsageError("give exactly one of --preset, --config or --resume");
  }
  TrainOptions options;
  if (flags.has("--preset")) options.config = preset_config(flags.get("--preset"));
  if (flags.has("--config")) options.config = load_config_file(flags.get("--config"));
  options.sequence_parallel = flags.has("--sequence-parallel");
  options.resume = flags.get("--resume");
  options.data_path = flags.required("--data");
  options.out_dir = flags.get("--out");
  options.seed = static_cast<uint64_t>(flags.get_int("--seed", 1, 0));
  options.steps = flags.get_int("--steps", -1, 1, kMaxSteps);
  options.progress = !flags.has("--quiet");

  World world;
  const int threads = configure_blas_threads(flags, world.local_ranks());
  const TrainSummary summary = train(world.comm(), options);
  if (world.comm().rank() == 0 && !summary.records.empty()) {
    std::printf(
        "tpf train: %zu step%s, loss %.4f -> %.4f, %.0f tokens/s at TP=%d (%d BLAS thread%s "
        "per rank, OpenBLAS %s kernels), %.1f%% of step time in communication%s\n",
        summary.records.size(), summary.records.size() == 1 ? "" : "s",
        summary.records.front().loss, summary.records.back().loss, summary.tokens_per_s,
        world.comm().size(), threads, threads == 1 ? "" : "s", blas_kernel_name().c_str(),
        100.0 * summary.comm_share,
        summary.records.size() == 1 ? " (one step: its rate includes first touches of memory)"
                                    : "");
    if (!options.out_dir.empty()) {
      std::printf(
          "tpf train: log %s/log.jsonl, loss curve %s/loss.svg, checkpoint %s/checkpoints/\n",
          options.out_dir.c_str(), options.out_dir.c_str(), options.out_dir.c_str());
    }
  }
  return kExitOk;
}

}  // namespace tpf::cli
