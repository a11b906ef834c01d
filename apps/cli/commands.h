// The subcommands of the `tpf` CLI. Each add_*_command adds its subcommand to the one command line
// of main() (cli/command_line.h): its options, bound to the command's options struct so that CLI11
// writes the help from their descriptions, and its action (set_action).
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

#include "cli/command_line.h"

namespace tpf::cli {

void add_run_command(Command& tpf);
void add_topo_command(Command& tpf);
void add_bind_command(Command& tpf);
void add_bench_command(Command& tpf);
void add_demo_command(Command& tpf);
void add_train_command(Command& tpf);
void add_generate_command(Command& tpf);
void add_export_command(Command& tpf);
void add_import_command(Command& tpf);
void add_plan_command(Command& tpf);
void add_settings_command(Command& tpf);

// Makes `action` what `command` does once the whole command line is parsed and checked; tpf exits
// with the status it returns. A command whose subcommand was given (tpf plan collective) leaves
// the work to that subcommand's action.
void set_action(Command command, std::function<int()> action);

// Thrown for bad command-line input (unknown option, missing or malformed value). main() prints
// "tpf <command>: error: <message>" and a hint to `tpf <command> --help`, and exits with
// kExitUsage. CLI11's own parse errors are reported the same way.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& message) : std::runtime_error(message) {}
};

// Exit codes shared by all subcommands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // a tpf::Error or any other failure
inline constexpr int kExitUsage = 2;    // bad command line

}  // namespace tpf::cli
