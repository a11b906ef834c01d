// `tpf`: one CLI for launching, benchmarking and inspecting tpfabric jobs. This file builds the
// command line (one CLI::App, a subcommand per command, each added by its own *_cmd.cc through
// cli/command_line.h), parses it and turns every error into a message and an exit status.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "tpf/error.h"

#ifndef TPF_VERSION
#error "the version macro TPF_VERSION is defined by CMakeLists.txt from project(VERSION)"
#endif

namespace tpf::cli {
namespace {

// What the action of the command that ran returned: set_action's callbacks run inside parse().
int command_status = kExitOk;

// The top-level help, also while a command is parsed (App::help would show that command's).
std::string usage(const CLI::App& tpf) {
  return tpf.get_formatter()->make_help(&tpf, tpf.get_name(), CLI::AppFormatMode::Normal);
}

void add_help_command(CLI::App& tpf) {
  CLI::App& help =
      *tpf.add_subcommand("help", "show this help, or 'tpf help <command>' for a command's help");
  auto name = std::make_shared<std::string>();
  help.add_option("command", *name, "the command whose options to show")->type_name("");
  set_action(Command(help), [&tpf, name] {
    if (name->empty()) {
      std::fputs(usage(tpf).c_str(), stdout);
      return kExitOk;
    }
    for (const CLI::App* command : tpf.get_subcommands({})) {
      if (command->get_name() == *name && !command->get_group().empty()) {
        std::fputs(command->help(tpf.get_name()).c_str(), stdout);
        return kExitOk;
      }
    }
    std::fprintf(stderr, "tpf help: unknown command '%s'\n\n%s", name->c_str(), usage(tpf).c_str());
    return kExitUsage;
  });
}

void add_commands(CLI::App& tpf) {
  tpf.set_help_flag("-h,--help", "print this help and exit");
  tpf.set_version_flag("--version", "tpf " TPF_VERSION, "print the version and exit");
  tpf.require_subcommand(0, 1);  // one command; its arguments are never taken for another one
  // An option given twice takes its last value (vectors keep all), as tpf always did.
  tpf.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  Command line(tpf);
  add_run_command(line);
  add_bench_command(line);
  add_topo_command(line);
  add_bind_command(line);
  add_demo_command(line);
  add_train_command(line);
  add_generate_command(line);
  add_export_command(line);
  add_import_command(line);
  add_plan_command(line);
  add_settings_command(line);
  add_help_command(tpf);
  // The spelling of --version before there was one; not listed.
  set_action(Command(*tpf.add_subcommand("version")->group("")), [] {
    std::printf("tpf %s\n", TPF_VERSION);
    return kExitOk;
  });
  // After the commands: they would inherit it.
  tpf.footer("Run 'tpf <command> --help' for the options of a command.");
}

// "tpf plan collective": the commands given, as the messages and the hint name them.
std::string command_path(const CLI::App& tpf) {
  std::string path = tpf.get_name();
  for (const CLI::App* at = &tpf; !at->get_subcommands().empty();) {
    at = at->get_subcommands().front();
    path += " " + at->get_name();
  }
  return path;
}

// CLI11 says "The following argument was not expected: ..."; name the first one as tpf always has.
std::string unexpected_argument(const std::string& arg) {
  const bool option = arg.size() > 1 && arg[0] == '-';
  return std::string(option ? "unknown option '" : "unexpected argument '") + arg + "'";
}

// True if `name` is one of tpf's commands, the unlisted ones included.
bool is_command(const CLI::App& tpf, const std::string& name) {
  for (const CLI::App* command : tpf.get_subcommands({})) {
    if (command->get_name() == name) return true;
  }
  return false;
}

int unknown_command(const CLI::App& tpf, const std::string& name) {
  std::fprintf(stderr, "tpf: unknown command '%s'\n\n%s", name.c_str(), usage(tpf).c_str());
  return kExitUsage;
}

int usage_error(const CLI::App& tpf, const std::string& message) {
  const std::string command = command_path(tpf);
  std::fprintf(stderr, "%s: error: %s\nRun '%s --help' for usage.\n", command.c_str(),
               message.c_str(), command.c_str());
  return kExitUsage;
}

int parse_error(const CLI::App& tpf, const CLI::ParseError& e) {
  if (dynamic_cast<const CLI::ExtrasError*>(&e) == nullptr) return usage_error(tpf, e.what());
  // Left over at the top: not the name of a command.
  if (const std::vector<std::string> top = tpf.remaining(); !top.empty()) {
    const std::string& arg = top.front();
    std::fprintf(stderr, "tpf: unknown %s '%s'\n\n%s", arg[0] == '-' ? "option" : "command",
                 arg.c_str(), usage(tpf).c_str());
    return kExitUsage;
  }
  return usage_error(tpf, unexpected_argument(tpf.remaining(true).front()));
}

// The other errors escape the actions as exceptions; this is the one place that turns them into
// a message and an exit code, so every command reports the same way.
int failure(const CLI::App& tpf, const char* message) {
  std::fprintf(stderr, "%s: error: %s\n", command_path(tpf).c_str(), message);
  return kExitFailure;
}

}  // namespace

void set_action(Command command, std::function<int()> action) {
  CLI::App& app = command.app();
  app.callback([&app, action = std::move(action)] {
    if (app.get_subcommands().empty()) command_status = action();
  });
}

}  // namespace tpf::cli

int main(int argc, char** argv) {
  using namespace tpf::cli;
  CLI::App tpf("tpf: launch, benchmark and inspect tpfabric jobs", "tpf");
  add_commands(tpf);
  if (argc < 2) {
    std::fputs(usage(tpf).c_str(), stderr);
    return kExitUsage;
  }
  // Before CLI11 sees it: it would answer `tpf frobnicate --help` with the help and status 0.
  if (argv[1][0] != '-' && !is_command(tpf, argv[1])) return unknown_command(tpf, argv[1]);
  try {
    tpf.parse(argc, argv);
    return command_status;
  } catch (const CLI::Success& e) {  // --help, --version
    return tpf.exit(e);
  } catch (const CLI::ParseError& e) {
    return parse_error(tpf, e);
  } catch (const UsageError& e) {
    return usage_error(tpf, e.what());
  } catch (const tpf::Error& e) {
    return failure(tpf, e.what());
  } catch (const std::exception& e) {
    return failure(tpf, e.what());
  }
}
