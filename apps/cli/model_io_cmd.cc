// `tpf export` and `tpf import`: between tpfabric's sharded checkpoints and one unsharded
// safetensors file in the Hugging Face GPT-2 layout. Both run in one process.
#include <cstdio>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/model_cli.h"
#include "model/checkpoint.h"
#include "model/gpt_config.h"
#include "model/hf_format.h"

namespace tpf::cli {

int cmd_export(int argc, char** argv) {
  const FlagParser flags(argc, argv, {"--checkpoint", "--out"});
  if (flags.help()) {
    std::printf(
        "usage: tpf export --checkpoint DIR --out FILE.safetensors\n"
        "Writes the model of a checkpoint (any TP size) as one unsharded safetensors file with\n"
        "Hugging Face GPT-2 tensor names and layout; the configuration is in its metadata.\n");
    return kExitOk;
  }
  const GlobalCheckpoint c = read_checkpoint(flags.required("--checkpoint"));
  const std::string out = flags.required("--out");
  write_safetensors(out, export_hf(c));
  std::printf("tpf export: %zu tensors of the step-%lld model (saved at TP=%d) -> %s\n",
              c.tensors.size(), static_cast<long long>(c.step), c.tp_size, out.c_str());
  return kExitOk;
}

int cmd_import(int argc, char** argv) {
  const FlagParser flags(argc, argv, {"--in", "--out", "--tp", "--heads"});
  if (flags.help()) {
    std::printf(
        "usage: tpf import --in FILE.safetensors --out DIR [--tp T] [--heads H]\n"
        "Reads an unsharded Hugging Face GPT-2 safetensors file (f32) and writes a checkpoint\n"
        "sharded for TP size T (default 1; any later --resume or generate may use another).\n"
        "  --tp T      1 to 4096, a divisor of the head count\n"
        "  --heads H   the head count, if the file's metadata has no n_head\n"
        "Files written by `tpf export` also restore the training configuration, step and seed.\n");
    return kExitOk;
  }
  const std::string in = flags.required("--in");
  const std::string out = flags.required("--out");
  const int tp = static_cast<int>(flags.get_int("--tp", 1, 1, kMaxTpSize));
  std::optional<int64_t> heads;
  if (flags.has("--heads")) heads = flags.get_int("--heads", 1, 1, kMaxWidth);
  const GlobalCheckpoint c = import_hf(read_safetensors(in), heads, in);
  write_checkpoint_files(out, c, tp);
  std::printf(
      "tpf import: %zu tensors (%lld layers, width %lld, %lld heads) of step %lld -> %s at "
      "TP=%d\n",
      c.tensors.size(), static_cast<long long>(c.config.model.layers),
      static_cast<long long>(c.config.model.width), static_cast<long long>(c.config.model.heads),
      static_cast<long long>(c.step), out.c_str(), tp);
  return kExitOk;
}

}  // namespace tpf::cli
