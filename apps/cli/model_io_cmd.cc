// `tpf export` and `tpf import`: between tpfabric's sharded checkpoints and one unsharded
// safetensors file in the Hugging Face GPT-2 layout. Both run in one process.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/option_values.h"
#include "model/checkpoint.h"
#include "model/gpt_config.h"
#include "model/hf_format.h"

namespace tpf::cli {

namespace {

struct ExportFlags {
  std::string checkpoint;
  std::string out;
};

// The command line of import as given; --tp and --heads are converted by run_import().
struct ImportFlags {
  std::string in;
  std::string out;
  std::optional<std::string> tp;
  std::optional<std::string> heads;
};

int run_export(const ExportFlags& flags) {
  const GlobalCheckpoint c = read_checkpoint(flags.checkpoint);
  write_safetensors(flags.out, export_hf(c));
  std::printf("tpf export: %zu tensors of the step-%lld model (saved at TP=%d) -> %s\n",
              c.tensors.size(), static_cast<long long>(c.step), c.tp_size, flags.out.c_str());
  return kExitOk;
}

int run_import(const ImportFlags& flags) {
  const int tp = static_cast<int>(integer_option(flags.tp, "--tp", 1, 1, kMaxTpSize));
  std::optional<int64_t> heads;
  if (flags.heads) heads = integer_option(flags.heads, "--heads", 1, 1, kMaxWidth);
  const GlobalCheckpoint c = import_hf(read_safetensors(flags.in), heads, flags.in);
  write_checkpoint_files(flags.out, c, tp);
  std::printf(
      "tpf import: %zu tensors (%lld layers, width %lld, %lld heads) of step %lld -> %s at "
      "TP=%d\n",
      c.tensors.size(), static_cast<long long>(c.config.model.layers),
      static_cast<long long>(c.config.model.width), static_cast<long long>(c.config.model.heads),
      static_cast<long long>(c.step), flags.out.c_str(), tp);
  return kExitOk;
}

}  // namespace

void add_export_command(Command& tpf) {
  Command command =
      tpf.add_subcommand("export", "write a checkpoint as one Hugging Face GPT-2 file");
  command.footer(
      "Writes the model of a checkpoint (any TP size) as one unsharded safetensors file with\n"
      "Hugging Face GPT-2 tensor names and layout; the configuration is in its metadata.");
  auto flags = std::make_shared<ExportFlags>();
  command
      .add_option("--checkpoint", flags->checkpoint,
                  "a checkpoint or a `tpf train --out` directory")
      .type_name("DIR")
      .required();
  command.add_option("--out", flags->out, "the safetensors file to write")
      .type_name("FILE.safetensors")
      .required();
  set_action(command, [flags] { return run_export(*flags); });
}

void add_import_command(Command& tpf) {
  Command command =
      tpf.add_subcommand("import", "make a checkpoint from a Hugging Face GPT-2 file");
  command.footer(
      "Reads an unsharded Hugging Face GPT-2 safetensors file (f32) and writes a checkpoint\n"
      "sharded for TP size T (default 1; any later --resume or generate may use another).\n"
      "Files written by `tpf export` also restore the training configuration, step and seed.");
  auto flags = std::make_shared<ImportFlags>();
  command.add_option("--in", flags->in, "the safetensors file to read")
      .type_name("FILE.safetensors")
      .required();
  command.add_option("--out", flags->out, "the checkpoint directory to write")
      .type_name("DIR")
      .required();
  command.add_option("--tp", flags->tp, "1 to 4096, a divisor of the head count").type_name("T");
  command
      .add_option("--heads", flags->heads, "the head count, if the file's metadata has no n_head")
      .type_name("H");
  set_action(command, [flags] { return run_import(*flags); });
}

}  // namespace tpf::cli
