// The one door from the `tpf` subcommands to CLI11: a command adds its options and subcommands
// through Command and CommandOption, which hold CLI11's objects but keep its header out of every
// *_cmd.cc. Why: CLI11 2.1 (Debian 12) has no precompiled form (and a precompiled header did not
// help), and each file that includes it compiles its validators anew: 16 s a file in the sanitizer
// build, 6 s at -O3, most of each command's compile time. Only command_line.cc and main.cc
// include <CLI/CLI.hpp>.
#pragma once

#include <functional>
#include <string>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace tpf::cli {

// An option just added; each setter returns it again so that they chain.
class CommandOption {
 public:
  explicit CommandOption(CLI::Option& option) : option_(&option) {}

  CommandOption& required();
  // The name the help gives the option's value ("N", "FILE"); "" gives none.
  CommandOption& type_name(const std::string& name);
  // false: a repeated vector option takes one value each time (--bench A --bench B).
  CommandOption& allow_extra_args(bool allow);
  // Rewrites the value before it is converted to the option's type.
  CommandOption& transform(std::function<std::string(std::string)> rewrite);

 private:
  CLI::Option* option_;
};

// A (sub)command of the command line: `tpf` itself, or one of its commands.
class Command {
 public:
  explicit Command(CLI::App& app) : app_(&app) {}

  Command add_subcommand(const std::string& name, const std::string& help);
  // Binds `target` to an option (names "-n,--nproc") or a positional argument (a name without
  // a dash). Instantiated in command_line.cc for the types tpf's options have; a new type is a
  // link error until it is added there.
  template <typename T>
  CommandOption add_option(const std::string& names, T& target, const std::string& help);
  CommandOption add_flag(const std::string& names, bool& target, const std::string& help);
  // Text shown after the options in the command's help.
  void footer(const std::string& text);
  // Everything from the first positional argument on is positional (a program and its own
  // options, as `tpf run -n 2 -- prog --flag` passes them).
  void positionals_at_end();
  // How many of this command's subcommands one command line may name.
  void require_subcommand(int min, int max);

  // CLI11's own object, for main.cc, which parses the line and reports its errors.
  CLI::App& app() const { return *app_; }

 private:
  CLI::App* app_;
};

}  // namespace tpf::cli
