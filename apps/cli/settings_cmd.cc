// `tpf settings`: the effective value of every TPF_* variable, where each came from, who reads it
// and what it sets. Communicator values are resolved exactly as a communicator created now would
// resolve them (comm/settings.h), so a malformed value fails here with the communicator's error.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/command_line.h"
#include "cli/commands.h"
#include "coll/reduce_kernels.h"
#include "comm/settings.h"

namespace tpf::cli {
namespace {

constexpr const char* kDescription =
    "Prints every TPF_* variable tpfabric reads: its effective value for a communicator created\n"
    "now in this environment (without CommOptions), where the value came from (default,\n"
    "the variable, the hardware or the launcher), who reads it and what it sets. A malformed\n"
    "value is reported as the communicator would report it, with exit code 1.\n"
    "Settings marked [alike on every rank] or [alike on each host's ranks] are ones from which\n"
    "every rank makes the same choices on its own: a communicator whose ranks differ on one\n"
    "fails while it is created, naming the setting and who has which value.";

void print_row(const std::string& name, const std::string& value, const std::string& source,
               const std::string& reader, const std::string& meaning) {
  std::printf("%-26s %-15s %-24s %s: %s\n", name.c_str(), value.c_str(), source.c_str(),
              reader.c_str(), meaning.c_str());
}

// What the ranks must agree on about `name` (comm/settings_agreement.h), as a mark after its
// meaning; "" for a setting each rank may have its own of.
std::string agreement_mark(const std::vector<detail::SharedSetting>& shared,
                           const std::string& name) {
  for (const detail::SharedSetting& s : shared) {
    if (s.name != name) continue;
    return s.among == detail::SharedAmong::communicator ? " [alike on every rank]"
                                                        : " [alike on each host's ranks]";
  }
  return "";
}

int print_settings() {
  const detail::CommSettings settings = detail::resolve_comm_settings();
  const std::vector<detail::SharedSetting> shared = detail::shared_settings(settings);
  print_row("variable", "value", "source", "read by", "meaning");
  for (const detail::SettingInfo& info : detail::setting_catalog()) {
    if (const detail::SettingReport* r = settings.reported(info.name)) {
      print_row(info.name, r->value, r->source, info.reader,
                info.meaning + agreement_mark(shared, info.name));
      continue;
    }
    const char* raw = std::getenv(info.name);
    const bool set = raw != nullptr && *raw != '\0';
    const bool secret = std::strcmp(info.name, "TPF_JOB_SECRET") == 0;
    print_row(info.name,
              !set     ? "(unset)"
              : secret ? "(set, hidden)"
                       : raw,
              set ? "environment" : "-", info.reader, info.meaning);
  }
  if (const detail::SettingReport* local = settings.reported("local world size")) {
    print_row("(ranks on this machine)", local->value, local->source, "communicator",
              "with TPF_CPUS, how many ranks lack a core of their own");
  }
  print_row("(reduce kernels)", coll::reduce_kernel_isa(), "CPU, TPF_REDUCE_ISA", "process",
            "instruction set of the reductions");
  return kExitOk;
}

}  // namespace

void add_settings_command(Command& tpf) {
  Command settings =
      tpf.add_subcommand("settings", "show every TPF_* setting's value and where it came from");
  settings.footer(kDescription);
  set_action(settings, print_settings);
}

}  // namespace tpf::cli
