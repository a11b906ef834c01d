// `tpf run`: its command line, handed to the launcher.
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/env_config.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/launcher.h"
#include "comm/settings.h"
#include "topo/rail_devices.h"
#include "tpf/error.h"
#include "tpf/topology.h"

namespace tpf::cli {
namespace {

// More ranks than this on one machine is a typo, not a job (and would exhaust file descriptors).
constexpr int kMaxRanks = 4096;

constexpr const char* kDescription =
    "Starts N ranks of PROGRAM on this machine. Each rank gets TPF_RANK, TPF_WORLD_SIZE,\n"
    "TPF_LOCAL_RANK, TPF_LOCAL_WORLD_SIZE, TPF_STORE_ADDR (a rendezvous store served by tpf run),\n"
    "TPF_JOB_SECRET, TPF_JOB_ID and, with --timeout, TPF_TIMEOUT. Once the ranks have ended,\n"
    "what they left running is killed: their process groups, and (named) processes whose\n"
    "environment holds the job's TPF_JOB_ID.\n"
    "\n"
    "When a rank fails, the others get a grace period (TPF_RUN_GRACE_S, default 3 s) to report,\n"
    "then SIGTERM, then after another grace period SIGKILL; with --keep-going they run on (a job\n"
    "whose ranks go on without the failed one: Communicator::shrink). SIGINT, SIGTERM, SIGHUP\n"
    "and SIGQUIT sent to tpf run are forwarded to every rank.\n"
    "\n"
    "A rank found lost is ended at once (SIGKILL, which a stopped process takes too): one that\n"
    "stays stopped (SIGSTOP, a debugger) for TPF_HOST_LOST_S (default 10 s) or is cut off from\n"
    "the other hosts, as the rank that found it tells the store; and one of this machine that\n"
    "stays stopped that long while no running rank could find it (each other one has ended or\n"
    "is stopped too), which tpf run finds itself.\n"
    "\n"
    "Flight recorder: every communicator keeps its last operations (TPF_FLIGHT_RECORDER_SIZE,\n"
    "default 64). Ranks dump them into a directory of the job (TPF_FLIGHT_RECORDER_DIR, made by\n"
    "tpf run unless set) when an operation fails, and when asked: before ranks still running are\n"
    "stopped (after a failure or --job-timeout) and when tpf run gets SIGUSR2. tpf run then waits\n"
    "for the dumps (TPF_RUN_DUMP_WAIT_S, default 5 s) and prints one summary: where each rank is\n"
    "and which rank everyone waits for. The directory is kept if it holds a dump.\n"
    "\n"
    "Several machines: --hosts h0:2,h1:2 starts ranks 0-1 on h0 and 2-3 on h1, each as\n"
    "  REMOTE_SHELL HOST env VARIABLES... PROGRAM ARGS (--rsh, default ssh), as mpirun does.\n"
    "  They get the variables above (TPF_LOCAL_* per host) and the launcher's own TPF_* and\n"
    "  UCX_* settings; PROGRAM is found on each host. The store listens on --store-bind (default:\n"
    "  every address, and the ranks are given this machine's name). The job's secret is on the\n"
    "  remote shell's command line. Ranks are not pinned unless --bind says how: each host\n"
    "  then pins its own ranks (local rank among the host's), through `tpf bind` at this tpf's\n"
    "  path there. Signals reach the remote shell and, through it, the job's processes there\n"
    "  (found by TPF_JOB_ID in their environment: find /proc ... -exec grep); what the job\n"
    "  left running on a host after its ranks ended is killed there, and said.\n"
    "  After the job each host's /dev/shm is swept of the job's segments through the remote\n"
    "  shell (find; at most 10 s), as this machine's is. The ranks' flight-recorder dumps come\n"
    "  back through the store (TPF_FLIGHT_RECORDER_STORE=1) into this machine's directory, and\n"
    "  the requests for them go through the remote shell (kill -USR2 PID on each host).\n"
    "\n"
    "exit status: 0 all ranks succeeded; 1 a rank exited non-zero or was killed; 2 bad command\n"
    "line; 124 the job ran past --job-timeout; 127 the program could not be started; 128+S tpf\n"
    "run received signal S.";

// The command line as given; converted (and checked) by launch_options().
struct RunFlags {
  std::optional<std::string> world_size;
  std::optional<std::string> hosts;
  std::optional<std::string> remote_shell;
  std::optional<std::string> store_bind;
  std::optional<std::string> bind;
  std::optional<std::string> timeout;
  std::optional<std::string> job_timeout;
  std::optional<std::string> rail_devices;
  bool tag_output = false;
  bool keep_going = false;
  std::vector<std::string> command;
};

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
    throw UsageError("--bind expects core, numa, gpu or none, got '" + text + "'");
  }
}

// "h0:2,h1:2" (a host without ":N" holds one rank).
std::vector<LaunchOptions::HostSlots> parse_hosts(const std::string& text) {
  std::vector<LaunchOptions::HostSlots> hosts;
  size_t begin = 0;
  long total = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, end - begin);
    const size_t colon = item.rfind(':');
    LaunchOptions::HostSlots slots{item.substr(0, colon), 1};
    if (colon != std::string::npos) {
      const std::string count = item.substr(colon + 1);
      char* stop = nullptr;
      errno = 0;
      const long n = std::strtol(count.c_str(), &stop, 10);
      if (count.empty() || *stop != '\0' || errno != 0 || n < 1 || n > kMaxRanks) {
        throw UsageError("--hosts: '" + item + "' should be HOST:N with N between 1 and " +
                         std::to_string(kMaxRanks));
      }
      slots.ranks = static_cast<int>(n);
    }
    const bool blank = slots.host.empty() || slots.host.find_first_of(" \t\n") != std::string::npos;
    if (blank) throw UsageError("--hosts: '" + item + "' names no host (HOST:N,HOST:N,...)");
    total += slots.ranks;
    if (total > kMaxRanks) {
      throw UsageError("--hosts: more than " + std::to_string(kMaxRanks) + " ranks in all");
    }
    hosts.push_back(slots);
    begin = end + 1;
  }
  return hosts;
}

// "ssh -p 2222" -> {"ssh", "-p", "2222"}.
std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  size_t at = 0;
  while ((at = text.find_first_not_of(" \t", at)) != std::string::npos) {
    const size_t end = std::min(text.find_first_of(" \t", at), text.size());
    words.push_back(text.substr(at, end - at));
    at = end;
  }
  return words;
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

// tpf run has always taken -n=4 as well; CLI11 reads its value as "=4".
std::string without_equals_sign(std::string value) {
  if (!value.empty() && value[0] == '=') value.erase(0, 1);
  return value;
}

LaunchOptions launch_options(const RunFlags& flags) {
  LaunchOptions options;
  if (flags.world_size) options.world_size = parse_world_size(*flags.world_size);
  if (flags.hosts) {
    options.hosts = parse_hosts(*flags.hosts);
    int total = 0;
    for (const LaunchOptions::HostSlots& h : options.hosts) total += h.ranks;
    if (flags.world_size && options.world_size != total) {
      throw UsageError("-n " + std::to_string(options.world_size) +
                       " disagrees with --hosts, which places " + std::to_string(total) + " ranks");
    }
    options.world_size = total;
    if (flags.remote_shell) {
      options.remote_shell = split_words(*flags.remote_shell);
      if (options.remote_shell.empty()) throw UsageError("--rsh names no command");
    }
    if (flags.store_bind) options.store_bind = *flags.store_bind;
  } else if (flags.remote_shell || flags.store_bind) {
    throw UsageError(std::string(flags.remote_shell ? "--rsh" : "--store-bind") +
                     " only applies with --hosts");
  }
  if (flags.bind) options.bind = parse_bind(*flags.bind);
  if (flags.timeout) options.timeout_s = parse_timeout(*flags.timeout);
  if (flags.job_timeout) options.job_timeout = parse_job_timeout(*flags.job_timeout);
  if (flags.rail_devices) {
    try {
      options.rail_devices = topo::parse_rail_devices(*flags.rail_devices, "--rail-devices");
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  }
  if (options.world_size == 0) throw UsageError("missing -n N (the number of ranks) or --hosts");
  if (flags.command.empty()) {
    throw UsageError("missing the program to run (tpf run -n N -- PROGRAM ARGS...)");
  }
  if (!flags.bind)
    options.bind = options.hosts.empty() ? default_bind(options.world_size) : BindPolicy::none;
  options.tag_output = flags.tag_output;
  options.keep_going = flags.keep_going;
  options.command = flags.command;
  options.grace = base::env_seconds("TPF_RUN_GRACE_S").value_or(std::chrono::seconds(3));
  options.dump_wait = base::env_seconds("TPF_RUN_DUMP_WAIT_S").value_or(std::chrono::seconds(5));
  options.stopped_lost_after = detail::host_lost_after_setting();
  return options;
}

}  // namespace

void add_run_command(Command& tpf) {
  Command run = tpf.add_subcommand("run", "launch N ranks of a program, here or on several hosts");
  run.footer(kDescription);
  auto flags = std::make_shared<RunFlags>();
  run.add_option("-n,--nproc", flags->world_size,
                 "number of ranks (1..4096; required without --hosts)")
      .type_name("N")
      .transform(without_equals_sign);
  run.add_option("--hosts", flags->hosts,
                 "ranks on other machines: HOST:N,HOST:N,... (ranks in that order),\n"
                 "started through --rsh; -n may be left out")
      .type_name("LIST");
  run.add_option("--rsh", flags->remote_shell,
                 "with --hosts: the command that runs a command on HOST, as\n"
                 "'RSH HOST COMMAND...' (default ssh; e.g. 'ssh -p 2222', or\n"
                 "'ip netns exec' for emulated hosts)")
      .type_name("CMD");
  run.add_option("--store-bind", flags->store_bind,
                 "with --hosts: the address the rendezvous store listens on and the\n"
                 "ranks connect to (default: every address; ranks get this machine's name)")
      .type_name("ADDR");
  run.add_option("--bind", flags->bind,
                 "core: rank r on its share of the cores (cores/N consecutive cores,\n"
                 "at least one); numa: on NUMA node r mod <nodes>; gpu: on the cores\n"
                 "and memory next to its GPU (GPU r mod the visible ones, or TPF_GPU;\n"
                 "see tpf topo); none: no pinning.\n"
                 "Default: core when N <= cores, else none; with --hosts none (r and N\n"
                 "then count each host's ranks)")
      .type_name("POLICY");
  run.add_option("--timeout", flags->timeout,
                 "per-operation deadline in seconds for the ranks' collectives")
      .type_name("S");
  run.add_option("--job-timeout", flags->job_timeout,
                 "stop the job after S seconds: print where every rank is (from their\n"
                 "flight recorders), then stop the ranks; exit status 124")
      .type_name("S");
  run.add_option("--rail-devices", flags->rail_devices,
                 "local rank l on every host crosses the network through device l mod\n"
                 "the count (UCX_NET_DEVICES, in place of the launcher's), e.g.\n"
                 "mlx5_0:1,mlx5_1:1: with a device per local rank the large\n"
                 "collectives go per rail, each rank over its own NIC; auto: each\n"
                 "rank the device on its GPU's PCIe path (GPU local rank l mod the\n"
                 "visible ones, or TPF_GPU), or, on a machine without GPUs, one next\n"
                 "to its cores (hwloc; see tpf topo), a host's ranks spread over them")
      .type_name("LIST");
  run.add_flag("--keep-going", flags->keep_going,
               "a rank that fails does not stop the others: they may go on without it\n"
               "(Communicator::shrink); the exit status is still 1");
  run.add_flag("--tag-output", flags->tag_output,
               "prefix every line a rank prints with \"[rank] \"");
  run.add_option("program", flags->command,
                 "PROGRAM [ARGS...]: everything from PROGRAM on (or after --) is passed\n"
                 "to it untouched, options included")
      .type_name("");
  // Once PROGRAM is named, everything after it is its own, options included.
  run.positionals_at_end();
  set_action(run, [flags] { return launch_job(launch_options(*flags)); });
}

}  // namespace tpf::cli
