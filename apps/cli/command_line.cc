#include "cli/command_line.h"

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tpf::cli {

CommandOption& CommandOption::required() {
  option_->required();
  return *this;
}

CommandOption& CommandOption::type_name(const std::string& name) {
  option_->type_name(name);
  return *this;
}

CommandOption& CommandOption::allow_extra_args(bool allow) {
  option_->allow_extra_args(allow);
  return *this;
}

CommandOption& CommandOption::transform(std::function<std::string(std::string)> rewrite) {
  option_->transform(std::move(rewrite));
  return *this;
}

Command Command::add_subcommand(const std::string& name, const std::string& help) {
  return Command(*app_->add_subcommand(name, help));
}

template <typename T>
CommandOption Command::add_option(const std::string& names, T& target, const std::string& help) {
  return CommandOption(*app_->add_option(names, target, help));
}

CommandOption Command::add_flag(const std::string& names, bool& target, const std::string& help) {
  return CommandOption(*app_->add_flag(names, target, help));
}

void Command::footer(const std::string& text) { app_->footer(text); }

void Command::positionals_at_end() { app_->positionals_at_end(); }

void Command::require_subcommand(int min, int max) { app_->require_subcommand(min, max); }

// The option types of tpf's commands.
template CommandOption Command::add_option(const std::string&, std::string&, const std::string&);
template CommandOption Command::add_option(const std::string&, std::optional<std::string>&,
                                           const std::string&);
template CommandOption Command::add_option(const std::string&, std::vector<std::string>&,
                                           const std::string&);
template CommandOption Command::add_option(const std::string&, int&, const std::string&);
template CommandOption Command::add_option(const std::string&, std::optional<int>&,
                                           const std::string&);

}  // namespace tpf::cli
