// `tpf`: one CLI for launching, benchmarking and inspecting tpfabric jobs. This file only
// dispatches; each subcommand lives in its own *_cmd.cc.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "tpf/error.h"

#ifndef TPF_VERSION
#error "the version macro TPF_VERSION is defined by CMakeLists.txt from project(VERSION)"
#endif

namespace {

using Command = int (*)(int, char**);

struct Subcommand {
  const char* name;
  Command run;
  const char* summary;
};

constexpr Subcommand kSubcommands[] = {
    {"run", tpf::cli::cmd_run, "launch N ranks of a program on this machine"},
    {"bench", tpf::cli::cmd_bench, "measure collective bandwidth and latency"},
    {"topo", tpf::cli::cmd_topo, "show this machine's cores, NUMA nodes and caches"},
    {"demo", tpf::cli::cmd_demo, "run a small end-to-end example"},
    {"train", tpf::cli::cmd_train, "train a tensor-parallel GPT on a text file"},
    {"generate", tpf::cli::cmd_generate, "sample text from a trained checkpoint"},
    {"export", tpf::cli::cmd_export, "write a checkpoint as one Hugging Face GPT-2 file"},
    {"import", tpf::cli::cmd_import, "make a checkpoint from a Hugging Face GPT-2 file"},
    {"plan", tpf::cli::cmd_plan, "predict a model's training step on a cluster, rank layouts"},
    {"settings", tpf::cli::cmd_settings, "show every TPF_* setting's value and where it came from"},
};

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: tpf <command> [options]\n"
               "\n"
               "commands:\n");
  for (const Subcommand& sub : kSubcommands)
    std::fprintf(out, "  %-9s %s\n", sub.name, sub.summary);
  std::fprintf(out,
               "  %-9s %s\n"
               "\n"
               "options:\n"
               "  --version  print the version and exit\n"
               "  -h, --help print this help and exit\n"
               "\n"
               "Run 'tpf <command> --help' for the options of a command.\n",
               "help", "show this help, or 'tpf help <command>' for a command's help");
}

const Subcommand* find_subcommand(const char* name) {
  for (const Subcommand& sub : kSubcommands) {
    if (std::strcmp(sub.name, name) == 0) return &sub;
  }
  return nullptr;
}

// Errors escape the subcommands as exceptions; this is the one place that turns them into a
// message and an exit code, so every subcommand reports the same way.
int run_subcommand(const Subcommand& sub, int argc, char** argv) {
  try {
    return sub.run(argc, argv);
  } catch (const tpf::cli::UsageError& e) {
    std::fprintf(stderr, "tpf %s: error: %s\nRun 'tpf %s --help' for usage.\n", sub.name, e.what(),
                 sub.name);
    return tpf::cli::kExitUsage;
  } catch (const tpf::Error& e) {
    std::fprintf(stderr, "tpf %s: error: %s\n", sub.name, e.what());
    return tpf::cli::kExitFailure;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tpf %s: error: %s\n", sub.name, e.what());
    return tpf::cli::kExitFailure;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return tpf::cli::kExitUsage;
  }
  const char* name = argv[1];
  if (std::strcmp(name, "--version") == 0 || std::strcmp(name, "version") == 0) {
    std::printf("tpf %s\n", TPF_VERSION);
    return tpf::cli::kExitOk;
  }
  if (std::strcmp(name, "help") == 0 || std::strcmp(name, "--help") == 0 ||
      std::strcmp(name, "-h") == 0) {
    if (argc >= 3 && std::strcmp(name, "help") == 0) {
      const Subcommand* sub = find_subcommand(argv[2]);
      if (sub == nullptr) {
        std::fprintf(stderr, "tpf help: unknown command '%s'\n\n", argv[2]);
        print_usage(stderr);
        return tpf::cli::kExitUsage;
      }
      static char help_flag[] = "--help";
      char* help_argv[] = {help_flag, nullptr};
      return run_subcommand(*sub, 1, help_argv);
    }
    print_usage(stdout);
    return tpf::cli::kExitOk;
  }
  const Subcommand* sub = find_subcommand(name);
  if (sub == nullptr) {
    std::fprintf(stderr, "tpf: unknown command '%s'\n\n", name);
    print_usage(stderr);
    return tpf::cli::kExitUsage;
  }
  return run_subcommand(*sub, argc - 2, argv + 2);
}
