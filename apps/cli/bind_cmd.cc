// `tpf bind`: pins this process as `tpf run --bind` pins a rank, then runs the program in its
// place. `tpf run --hosts ... --bind P` starts each remote rank through it (the remote shell runs
// the launcher's own tpf, at the same path on every host, as it runs PROGRAM), so a remote rank is
// pinned by the machine it runs on, whose cores the launcher does not know.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/launcher.h"
#include "tpf/error.h"
#include "tpf/topology.h"

namespace tpf::cli {
namespace {

struct BindFlags {
  std::string policy;
  int local_rank = 0;
  int local_size = 1;
  std::vector<std::string> command;
};

int bind_and_exec(const BindFlags& flags) {
  BindPolicy policy;
  try {
    policy = parse_bind_policy(flags.policy);
  } catch (const Error&) {
    throw UsageError("--policy expects core, numa, gpu or none, got '" + flags.policy + "'");
  }
  if (flags.local_size < 1 || flags.local_rank < 0 || flags.local_rank >= flags.local_size) {
    throw UsageError("--local-rank " + std::to_string(flags.local_rank) + " is not in [0, " +
                     "--local-size " + std::to_string(flags.local_size) + ")");
  }
  if (flags.command.empty())
    throw UsageError("missing the program to run (tpf bind ... -- PROGRAM)");
  // As tpf run does for its own ranks: a binding the machine refuses is a warning, not a failure.
  std::string where;
  try {
    where = bind_current_process(policy, flags.local_rank, flags.local_size);
  } catch (const std::exception& e) {
    where = std::string("warning: ") + e.what();
  }
  if (where.rfind("warning:", 0) == 0) std::fprintf(stderr, "tpf bind: %s\n", where.c_str());
  std::vector<char*> argv;
  for (const std::string& word : flags.command) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  std::fprintf(stderr, "tpf bind: cannot run '%s': %s\n", argv[0], std::strerror(errno));
  return kExitCannotStart;
}

}  // namespace

void add_bind_command(Command& tpf) {
  auto flags = std::make_shared<BindFlags>();
  Command bind =
      tpf.add_subcommand("bind", "run a program pinned as tpf run --bind pins a local rank");
  bind.footer(
      "Pins this process as 'tpf run --bind POLICY' pins local rank R of N on this machine\n"
      "(core: its share of the cores; numa: NUMA node R mod <nodes>; gpu: the cores and\n"
      "memory next to its GPU), then runs PROGRAM in its place. tpf run --hosts starts remote\n"
      "ranks through it when given --bind. A binding the machine refuses is a warning, and\n"
      "PROGRAM runs unpinned.");
  bind.add_option("--policy", flags->policy, "core, numa, gpu or none").required().type_name("P");
  bind.add_option("--local-rank", flags->local_rank, "R: this rank among the machine's ranks")
      .required()
      .type_name("R");
  bind.add_option("--local-size", flags->local_size, "N: the ranks on this machine")
      .required()
      .type_name("N");
  bind.add_option("program", flags->command, "PROGRAM [ARGS...], after --").type_name("");
  bind.positionals_at_end();
  set_action(bind, [flags] { return bind_and_exec(*flags); });
}

}  // namespace tpf::cli
