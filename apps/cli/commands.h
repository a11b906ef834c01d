// The subcommands of the `tpf` CLI. Each takes the arguments that follow its name
// (argv[0] is the first argument, not the subcommand) and returns the process exit code.
#pragma once

#include <stdexcept>
#include <string>

namespace tpf::cli {

int cmd_run(int argc, char** argv);
int cmd_topo(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_demo(int argc, char** argv);
int cmd_train(int argc, char** argv);
int cmd_generate(int argc, char** argv);
int cmd_export(int argc, char** argv);
int cmd_import(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_settings(int argc, char** argv);

// Thrown for bad command-line input (unknown option, missing or malformed value). main() prints
// "tpf <sub>: error: <message>" and a hint to `tpf <sub> --help`, and exits with kExitUsage.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& message) : std::runtime_error(message) {}
};

// Exit codes shared by all subcommands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // a tpf::Error or any other failure
inline constexpr int kExitUsage = 2;    // bad command line

}  // namespace tpf::cli
