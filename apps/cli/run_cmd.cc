// `tpf run`: parses the command line and hands the job to the launcher.
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/env_config.h"
#include "cli/commands.h"
#include "cli/launcher.h"
#include "tpf/error.h"
#include "tpf/topology.h"

namespace tpf::cli {
namespace {

// More ranks than this on one machine is a typo, not a job (and would exhaust file descriptors).
constexpr int kMaxRanks = 4096;

constexpr const char* kUsage =
    "usage: tpf run -n N [--bind core|numa|none] [--timeout S] [--job-timeout S] [--tag-output]\n"
    "               [--] PROGRAM [ARGS...]\n"
    "\n"
    "Starts N ranks of PROGRAM on this machine. Each rank gets TPF_RANK, TPF_WORLD_SIZE,\n"
    "TPF_LOCAL_RANK, TPF_LOCAL_WORLD_SIZE, TPF_STORE_ADDR (a rendezvous store served by tpf run),\n"
    "TPF_JOB_SECRET, TPF_JOB_ID and, with --timeout, TPF_TIMEOUT.\n"
    "\n"
    "options:\n"
    "  -n, --nproc N     number of ranks (required, 1..4096)\n"
    "  --bind POLICY     core: rank r on its share of the cores (cores/N consecutive cores,\n"
    "                    at least one); numa: on NUMA node r mod <nodes>; none: no pinning.\n"
    "                    Default: core when N <= cores, else none.\n"
    "  --timeout S       per-operation deadline in seconds for the ranks' collectives\n"
    "  --job-timeout S   stop the job after S seconds: print where every rank is (from their\n"
    "                    flight recorders), then stop the ranks; exit status 124\n"
    "  --tag-output      prefix every line a rank prints with \"[rank] \"\n"
    "  -h, --help        show this help\n"
    "\n"
    "When a rank fails, the others get a grace period (TPF_RUN_GRACE_S, default 3 s) to report,\n"
    "then SIGTERM, then after another grace period SIGKILL. SIGINT, SIGTERM, SIGHUP and SIGQUIT\n"
    "sent to tpf run are forwarded to every rank.\n"
    "\n"
    "Flight recorder: every communicator keeps its last operations (TPF_FLIGHT_RECORDER_SIZE,\n"
    "default 64). Ranks dump them into a directory of the job (TPF_FLIGHT_RECORDER_DIR, made by\n"
    "tpf run unless set) when an operation fails, and when asked: before ranks still running are\n"
    "stopped (after a failure or --job-timeout) and when tpf run gets SIGUSR2. tpf run then waits\n"
    "for the dumps (TPF_RUN_DUMP_WAIT_S, default 5 s) and prints one summary: where each rank is\n"
    "and which rank everyone waits for. The directory is kept if it holds a dump.\n"
    "\n"
    "exit status: 0 all ranks succeeded; 1 a rank exited non-zero or was killed; 2 bad command\n"
    "line; 124 the job ran past --job-timeout; 127 the program could not be started; 128+S tpf\n"
    "run received signal S.\n";

int parse_world_size(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || value < 1 || value > kMaxRanks) {
    throw UsageError("-n expects a number of ranks between 1 and " + std::to_string(kMaxRanks) +
                     ", got '" + text + "'");
  }
  return static_cast<int>(value);
}

std::string parse_timeout(const std::string& text, const char* option = "--timeout") {
  char* end = nullptr;
  double seconds = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(seconds) || seconds <= 0 || seconds > 1e8) {
    throw UsageError(std::string(option) + " expects a positive number of seconds, got '" + text +
                     "'");
  }
  return text;
}

std::chrono::milliseconds parse_job_timeout(const std::string& text) {
  const double seconds = std::strtod(parse_timeout(text, "--job-timeout").c_str(), nullptr);
  return std::chrono::milliseconds(static_cast<long long>(std::ceil(seconds * 1000.0)));
}

BindPolicy parse_bind(const std::string& text) {
  try {
    return parse_bind_policy(text);
  } catch (const Error&) {
    throw UsageError("--bind expects core, numa or none, got '" + text + "'");
  }
}

// Ranks spread over distinct cores run best pinned; with more ranks than cores, pinning would
// stack several on one core while others idle, so the kernel's scheduler does better.
BindPolicy default_bind(int world_size) {
  try {
    size_t cores = discover_topology().cores.size();
    return static_cast<size_t>(world_size) <= cores ? BindPolicy::core : BindPolicy::none;
  } catch (const Error& e) {
    std::fprintf(stderr, "tpf run: warning: %s; ranks run unbound\n", e.what());
    return BindPolicy::none;
  }
}

}  // namespace

int cmd_run(int argc, char** argv) {
  LaunchOptions options;
  bool have_bind = false;
  int i = 0;
  // Returns the value of an option given as "--opt VALUE", "--opt=VALUE" or (for -n) "-nVALUE".
  auto value_of = [&](const std::string& arg, const std::string& name) -> std::string {
    if (arg.size() > name.size()) {
      return arg.substr(name.size() + (arg[name.size()] == '=' ? 1 : 0));
    }
    if (i + 1 >= argc) throw UsageError(name + " needs a value");
    return argv[++i];
  };
  auto is_option = [](const std::string& arg, const std::string& name, bool allow_glued) {
    if (arg == name) return true;
    if (arg.rfind(name + "=", 0) == 0) return true;
    return allow_glued && arg.rfind(name, 0) == 0;
  };

  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-') break;  // the program: everything after belongs to it
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return kExitOk;
    } else if (is_option(arg, "-n", true)) {
      options.world_size = parse_world_size(value_of(arg, "-n"));
    } else if (is_option(arg, "--nproc", false)) {
      options.world_size = parse_world_size(value_of(arg, "--nproc"));
    } else if (is_option(arg, "--bind", false)) {
      options.bind = parse_bind(value_of(arg, "--bind"));
      have_bind = true;
    } else if (is_option(arg, "--job-timeout", false)) {
      options.job_timeout = parse_job_timeout(value_of(arg, "--job-timeout"));
    } else if (is_option(arg, "--timeout", false)) {
      options.timeout_s = parse_timeout(value_of(arg, "--timeout"));
    } else if (arg == "--tag-output") {
      options.tag_output = true;
    } else {
      throw UsageError("unknown option '" + arg + "'");
    }
  }
  if (options.world_size == 0) throw UsageError("missing -n N (the number of ranks)");
  if (i >= argc) throw UsageError("missing the program to run (tpf run -n N -- PROGRAM ARGS...)");
  for (; i < argc; ++i) options.command.emplace_back(argv[i]);

  if (!have_bind) options.bind = default_bind(options.world_size);
  options.grace = base::env_seconds("TPF_RUN_GRACE_S").value_or(std::chrono::seconds(3));
  options.dump_wait = base::env_seconds("TPF_RUN_DUMP_WAIT_S").value_or(std::chrono::seconds(5));
  return launch_job(options);
}

}  // namespace tpf::cli
