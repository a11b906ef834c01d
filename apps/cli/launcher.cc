#include "cli/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/env_config.h"
#include "base/open_files.h"
#include "cli/flight_dumps.h"
#include "cli/line_prefixer.h"
#include "cli/lost_ranks.h"
#include "cli/process_util.h"
#include "cli/remote_processes.h"
#include "cli/remote_sweep.h"
#include "cli/remote_worker.h"
#include "cli/stopped_ranks.h"
#include "topo/rail_devices.h"
#include "tpf/error.h"
#include "tpf/store.h"

extern char** environ;

namespace tpf::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Signals tpf run forwards to every rank (and then treats as "the user wants the job to stop").
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
// Asks tpf run for the ranks' flight recorders and a summary of where they are; the job goes on.
constexpr int kSummarySignal = SIGUSR2;
// What tpf run says, after "rank 2 (pid 1234)", of a stopped rank it does not ask for a dump.
std::string stopped_cannot_dump() {
  return std::string(" is stopped (") + transport::kStoppedHow +
         "): it cannot dump its flight recorder, and the others may be waiting for it";
}
// While waiting for dumps without inotify, how often the dump files are looked at.
constexpr int kDumpPollMs = 20;
constexpr uint64_t kLauncherFilesPerRank = 4;  // measured: 1 per rank with plain output
constexpr uint64_t kLauncherSpareFiles = 64;
// The launcher's own connection to the store it serves.
constexpr std::chrono::milliseconds kStoreConnectTimeout{5000};
// Looking at or signalling ranks' processes on other hosts (a search for them, then a command
// for what it found) waits at most this long for the remote shells, both rounds together (an ssh
// that cannot reach its host waits for its own connect timeout); the second round has at least
// kRemoteRoundMinimum.
constexpr std::chrono::milliseconds kRemoteProcessDeadline{5000};
constexpr std::chrono::milliseconds kRemoteRoundMinimum{1000};

// What is left of a budget for remote commands that ends at `until`, at least kRemoteRoundMinimum.
std::chrono::milliseconds remote_time_left(std::chrono::steady_clock::time_point until) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      until - std::chrono::steady_clock::now());
  return std::max(left, kRemoteRoundMinimum);
}

// Blocks the signals the launcher handles through a signalfd, in this thread and in every thread
// started afterwards (the store server's), and restores the old mask when the job is over.
class SignalRouting {
 public:
  SignalRouting() {
    sigemptyset(&mask_);
    sigaddset(&mask_, SIGCHLD);
    for (int sig : kForwardedSignals) sigaddset(&mask_, sig);
    sigaddset(&mask_, kSummarySignal);
    if (::pthread_sigmask(SIG_BLOCK, &mask_, &old_mask_) != 0) {
      throw Error(ErrorCode::system, "pthread_sigmask: cannot block the signals tpf run handles");
    }
    fd_ = Fd(::signalfd(-1, &mask_, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!fd_.valid()) {
      int err = errno;
      ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
      throw_system_error(ErrorCode::system, "signalfd", err);
    }
    // Writing tagged output to a closed pipe must not kill the launcher (and orphan the ranks).
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &old_sigpipe_);
  }
  ~SignalRouting() {
    ::sigaction(SIGPIPE, &old_sigpipe_, nullptr);
    fd_.reset();
    ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  SignalRouting(const SignalRouting&) = delete;
  SignalRouting& operator=(const SignalRouting&) = delete;

  int fd() const { return fd_.get(); }
  // What a child must restore before exec: signal masks and ignored dispositions survive exec.
  const sigset_t& old_mask() const { return old_mask_; }
  const struct sigaction& old_sigpipe() const { return old_sigpipe_; }

 private:
  sigset_t mask_;
  sigset_t old_mask_;
  struct sigaction old_sigpipe_ {};
  Fd fd_;
};

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int wait_status = 0;
  int exec_errno = 0;  // non-zero: execve failed in the child with this errno
  Fd exec_status;      // read end of the child's CLOEXEC pipe: EOF = exec succeeded
  Fd out, err;         // read ends of the child's stdout/stderr (--tag-output only)
  std::unique_ptr<LinePrefixer> out_tag, err_tag;
  bool ended_as_lost = false;  // the job found it lost and ended it
};

// Owns the ranks' processes: whatever path leaves launch_job (including an exception), no rank
// outlives it.
class RankSet {
 public:
  explicit RankSet(int n) : ranks_(static_cast<size_t>(n)) {
    for (int r = 0; r < n; ++r) ranks_[static_cast<size_t>(r)].rank = r;
  }
  ~RankSet() {
    bool any = false;
    for (Rank& r : ranks_) {
      if (r.running) {
        ::kill(-r.pid, SIGKILL);
        ::kill(r.pid, SIGKILL);
        any = true;
      }
    }
    if (!any) return;
    // SIGKILL cannot be caught; the loop only bounds the rare process stuck in the kernel.
    Clock::time_point deadline = Clock::now() + std::chrono::seconds(5);
    for (Rank& r : ranks_) {
      while (r.running && Clock::now() < deadline) {
        if (::waitpid(r.pid, &r.wait_status, WNOHANG) != 0) {
          r.running = false;
        } else {
          ::usleep(10000);
        }
      }
    }
  }
  RankSet(const RankSet&) = delete;
  RankSet& operator=(const RankSet&) = delete;

  std::vector<Rank>& ranks() { return ranks_; }
  const std::vector<Rank>& ranks() const { return ranks_; }

  // Signals each running rank's whole process group, so that a rank started through a shell
  // wrapper (sh -c '...; sleep') loses its children too; they would otherwise keep its output
  // pipes open and survive the job.
  void signal_running(int sig) {
    for (Rank& r : ranks_) {
      if (r.running) signal(r, sig);
    }
  }
  // One rank's process group (or, where it has left its group, the process).
  static void signal(const Rank& r, int sig) {
    if (::kill(-r.pid, sig) != 0) ::kill(r.pid, sig);
  }

  // The running ranks whose process group has a stopped process in it (SIGSTOP, ^Z, a
  // debugger), each with that process's pid.
  std::vector<std::pair<int, pid_t>> stopped() const {
    const std::vector<StoppedProcess> processes = stopped_processes();
    std::vector<std::pair<int, pid_t>> out;
    for (const Rank& r : ranks_) {
      if (!r.running) continue;
      for (const StoppedProcess& p : processes) {
        if (p.group != r.pid) continue;  // each rank leads its own process group
        out.emplace_back(r.rank, p.pid);
        break;
      }
    }
    return out;
  }

  std::vector<pid_t> running_groups() const {
    std::vector<pid_t> out;
    for (const Rank& r : ranks_) {
      if (r.running) out.push_back(r.pid);  // each rank leads its own process group
    }
    return out;
  }

  std::vector<int> running_ranks() const {
    std::vector<int> out;
    for (const Rank& r : ranks_) {
      if (r.running) out.push_back(r.rank);
    }
    return out;
  }

  // "rank 2" or "ranks 0,2,3".
  std::string running_list() const {
    std::string out;
    int count = 0;
    for (const Rank& r : ranks_) {
      if (!r.running) continue;
      if (count++ > 0) out += ",";
      out += std::to_string(r.rank);
    }
    return (count == 1 ? "rank " : "ranks ") + out;
  }

  // A rank's descendants that outlived it (background jobs of a shell wrapper) would hold its
  // output pipe and keep running after the job: once the ranks are gone, their groups go too.
  void kill_leftover_groups() {
    for (const Rank& r : ranks_) {
      if (r.pid > 0) ::kill(-r.pid, SIGKILL);  // ESRCH when the group is empty: nothing to do
    }
  }

  int running_count() const {
    int n = 0;
    for (const Rank& r : ranks_) n += r.running ? 1 : 0;
    return n;
  }

 private:
  std::vector<Rank> ranks_;
};

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0)
    throw_system_error(ErrorCode::system, "gethostname", errno);
  return name;
}

// This tpf's own path (a remote rank under --bind runs `tpf bind` at the same path on its host).
std::string own_path() {
  std::vector<char> path(4096);
  const ssize_t n = ::readlink("/proc/self/exe", path.data(), path.size() - 1);
  if (n <= 0) throw_system_error(ErrorCode::system, "readlink /proc/self/exe", errno);
  return std::string(path.data(), static_cast<size_t>(n));
}

int usable_cpu_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// `override_timeout`, `override_devices`: TPF_TIMEOUT, and UCX_NET_DEVICES and TPF_RAIL_DEVICES
// (which would win over the launcher's UCX_NET_DEVICES), are the launcher's too where its options
// set them for every rank (--timeout, --rail-devices).
bool is_launcher_variable(const char* entry, bool override_timeout, bool override_devices) {
  static const char* const kNames[] = {
      "TPF_RANK",       "TPF_WORLD_SIZE", "TPF_LOCAL_RANK", "TPF_LOCAL_WORLD_SIZE",
      "TPF_STORE_ADDR", "TPF_JOB_SECRET", "TPF_JOB_ID",     "TPF_CPUS"};
  auto matches = [entry](const char* name) {
    size_t len = std::strlen(name);
    return std::strncmp(entry, name, len) == 0 && entry[len] == '=';
  };
  for (const char* name : kNames) {
    if (matches(name)) return true;
  }
  return (override_timeout && matches("TPF_TIMEOUT")) ||
         (override_devices && (matches("UCX_NET_DEVICES") || matches("TPF_RAIL_DEVICES")));
}

// Where --hosts HOST:N,... puts `rank`: ranks are numbered host by host, in the list's order.
struct HostSlot {
  size_t host;     // index into options.hosts
  int local_rank;  // among that host's ranks
};
HostSlot host_slot_of(const LaunchOptions& options, int rank) {
  size_t host = 0;
  int first = 0;
  while (rank >= first + options.hosts[host].ranks) first += options.hosts[host++].ranks;
  return {host, rank - first};
}

// --hosts: the host of each rank, by rank.
std::vector<std::string> host_of_each_rank(const LaunchOptions& options) {
  std::vector<std::string> hosts;
  for (int rank = 0; rank < options.world_size; ++rank) {
    hosts.push_back(options.hosts[host_slot_of(options, rank).host].host);
  }
  return hosts;
}

// The job's processes on other hosts: those its id marks there (found through the remote shell),
// and of `armed` (the pids the running ranks' flight recorders gave) those on hosts that answered
// the search (a process that changed its environment would be missed by it). Waits on the remote
// shell: tpf run calls it off its loop (cli/remote_worker.h).
std::vector<RemoteProcess> find_remote_processes(const LaunchOptions& options,
                                                 const std::string& job_id,
                                                 const std::vector<RemoteProcess>& armed,
                                                 RepeatedWarnings* warnings = nullptr) {
  if (options.hosts.empty()) return {};
  JobProcesses found = find_job_processes(options.remote_shell, host_of_each_rank(options), job_id,
                                          kRemoteProcessDeadline, warnings);
  std::set<std::pair<std::string, pid_t>> known;
  for (const RemoteProcess& p : found.processes) known.insert({p.host, p.pid});
  for (const RemoteProcess& p : armed) {
    if (found.unanswered.count(p.host) == 0 && known.insert({p.host, p.pid}).second) {
      found.processes.push_back(p);
    }
  }
  return found.processes;
}

// Those of the job's processes on other hosts (find_remote_processes) that are stopped: the search
// and the read of their states share the bound of kRemoteProcessDeadline. Waits on the remote
// shell: tpf run calls it off its loop.
std::vector<RemoteProcess> stopped_remote_job_processes(const LaunchOptions& options,
                                                        const std::string& job_id,
                                                        const std::vector<RemoteProcess>& armed,
                                                        RepeatedWarnings* warnings = nullptr) {
  const auto until = std::chrono::steady_clock::now() + kRemoteProcessDeadline;
  return stopped_remote_processes(options.remote_shell,
                                  find_remote_processes(options, job_id, armed, warnings),
                                  remote_time_left(until), warnings);
}

// What the job leaves behind once its ranks have ended: its segments in /dev/shm here, and
// (--hosts) on every host through the remote shell the processes it left running there and its
// segments (cli/remote_sweep.h). The fabric unlinks its segments as soon as every rank has mapped
// them; this only catches what a rank killed during setup left. Runs when the job is over,
// whichever way launch_job leaves: at the latest when it is destroyed, but Job sweeps the hosts as
// soon as the ranks have ended, while the store still stands, so that the processes it kills are
// not the ones that the store's close ends anyway (TPF_END_WITH_STORE).
class JobSweeper {
 public:
  JobSweeper(std::string job_id, const LaunchOptions& options)
      : job_id_(std::move(job_id)), options_(options) {}
  ~JobSweeper() {
    remove_job_shm_segments(job_id_);
    sweep_hosts_once();
  }
  JobSweeper(const JobSweeper&) = delete;
  JobSweeper& operator=(const JobSweeper&) = delete;

  void sweep_hosts_once() {
    if (options_.hosts.empty() || hosts_swept_) return;
    hosts_swept_ = true;
    sweep_hosts(options_.remote_shell, host_of_each_rank(options_), job_id_, kRemoteSweepDeadline);
  }

 private:
  // An ssh that cannot reach its host waits for its own connect timeout: the job's end does
  // not wait that long for a cleanup.
  static constexpr std::chrono::milliseconds kRemoteSweepDeadline{10000};
  std::string job_id_;
  const LaunchOptions& options_;
  bool hosts_swept_ = false;
};

// Everything a child needs, built before fork: after fork in a process with threads (the store
// server) the child should do as little as possible before execve.
struct ChildPlan {
  std::vector<std::string> env_strings;
  std::vector<std::string> remote_words;  // remote shell, host, "env" (ranks on other hosts)
  std::vector<std::string> bind_words;    // tpf bind ... -- (ranks on other hosts, with --bind)
  std::vector<char*> envp;
  std::vector<char*> argv;
};

// What the child runs between fork and execve. Only returns by _exit.
[[noreturn]] void run_child(const LaunchOptions& options, const std::string& path, Rank& rank,
                            const ChildPlan& plan, const SignalRouting& signals, pid_t launcher,
                            int exec_status_fd, int out_fd, int err_fd) {
  // Own process group: the launcher signals the rank and everything it started as one unit, and
  // a terminal's Ctrl-C reaches the ranks once (through the launcher), not twice.
  ::setpgid(0, 0);
  // If the launcher dies without cleaning up (SIGKILL, OOM killer), the ranks go too.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(kExitCannotStart);
  ::sigaction(SIGPIPE, &signals.old_sigpipe(), nullptr);
  ::pthread_sigmask(SIG_SETMASK, &signals.old_mask(), nullptr);
  if (out_fd >= 0) ::dup2(out_fd, STDOUT_FILENO);
  if (err_fd >= 0) ::dup2(err_fd, STDERR_FILENO);

  if (options.bind != BindPolicy::none && plan.remote_words.empty()) {  // remote: tpf bind
    std::string where;
    try {
      where = bind_current_process(options.bind, rank.rank, options.world_size);
    } catch (const std::exception& e) {
      where = std::string("warning: ") + e.what();
    }
    if (where.rfind("warning:", 0) == 0) {
      std::string line = "tpf run: rank " + std::to_string(rank.rank) + ": " + where + "\n";
      (void)!::write(STDERR_FILENO, line.data(), line.size());
    }
  }

  ::execve(path.c_str(), plan.argv.data(), plan.envp.data());
  int err = errno;
  (void)!::write(exec_status_fd, &err, sizeof(err));
  ::_exit(kExitCannotStart);
}

class Job {
 public:
  // `lost`: the ranks the job's store was told are lost, to end.
  Job(const LaunchOptions& options, std::string path, FlightDumps& dumps, JobSweeper& sweeper,
      LostRanks& lost)
      : options_(options),
        path_(std::move(path)),
        ranks_(options.world_size),
        dumps_(dumps),
        sweeper_(sweeper),
        lost_(lost),
        stopped_ranks_(options.world_size, options.stopped_lost_after) {}

  int run(const std::string& store_addr, const std::string& secret, const std::string& job_id,
          const SignalRouting& signals) {
    job_id_ = job_id;
    spawn_all(store_addr, secret, job_id, signals);
    if (options_.job_timeout) job_deadline_ = Clock::now() + *options_.job_timeout;
    supervise(signals);
    remote_.finish();  // what it still had to do on other hosts (signals the ranks were sent)
    ranks_.kill_leftover_groups();
    kill_local_leftovers();
    sweeper_.sweep_hosts_once();
    finish_output();
    // The summary printed when the ranks were stopped stays the one: dumps made after it (a rank
    // that saw its stopped peer die) show the stop, not the hang.
    if (!stop_summary_printed_ && dumps_.dump_count() > summarized_dumps_) print_summary();
    return exit_code();
  }

 private:
  // --rail-devices: the device of the rail of local rank `local_rank`.
  void add_rail_device(std::vector<std::string>& env, int local_rank) const {
    if (options_.rail_devices.empty()) return;
    if (topo::is_auto(options_.rail_devices)) {
      env.push_back(std::string("TPF_RAIL_DEVICES=") + topo::kAutoRailDevices);
      return;
    }
    env.push_back("UCX_NET_DEVICES=" + topo::rail_device(options_.rail_devices, local_rank));
    // Empty is unset: a TPF_RAIL_DEVICES that a remote shell keeping the launcher's environment
    // (`ip netns exec`) passes on would otherwise win over UCX_NET_DEVICES.
    env.push_back("TPF_RAIL_DEVICES=");
  }
  // A rank on this machine: the launcher's environment with the job's variables.
  ChildPlan local_plan(const std::vector<std::string>& common, int rank) const {
    ChildPlan plan;
    plan.env_strings = common;
    plan.env_strings.push_back("TPF_RANK=" + std::to_string(rank));
    plan.env_strings.push_back("TPF_LOCAL_RANK=" + std::to_string(rank));
    add_rail_device(plan.env_strings, rank);
    for (std::string& s : plan.env_strings) plan.envp.push_back(s.data());
    plan.envp.push_back(nullptr);
    for (const std::string& a : options_.command) plan.argv.push_back(const_cast<char*>(a.c_str()));
    plan.argv.push_back(nullptr);
    return plan;
  }

  // What a rank on another host is told (on the remote shell's command line, through env): the
  // job's variables, and the launcher's own TPF_* and UCX_* settings. Not its TPF_CPUS (another
  // machine's cores) nor the rest of the launcher's environment (PATH and the like are the
  // remote machine's own).
  std::vector<std::string> remote_variables(const std::string& store_addr,
                                            const std::string& secret,
                                            const std::string& job_id) const {
    std::vector<std::string> vars;
    const bool override_timeout = options_.timeout_s.has_value();
    for (char** e = environ; *e != nullptr; ++e) {
      const bool ours = std::strncmp(*e, "TPF_", 4) == 0 || std::strncmp(*e, "UCX_", 4) == 0;
      if (ours && !is_launcher_variable(*e, override_timeout, !options_.rail_devices.empty()) &&
          std::strncmp(*e, "TPF_FLIGHT_RECORDER_DIR=", 24) != 0) {
        vars.emplace_back(*e);
      }
    }
    vars.push_back("TPF_WORLD_SIZE=" + std::to_string(options_.world_size));
    vars.push_back("TPF_STORE_ADDR=" + store_addr);
    vars.push_back("TPF_JOB_SECRET=" + secret);
    vars.push_back("TPF_JOB_ID=" + job_id);
    if (options_.timeout_s) vars.push_back("TPF_TIMEOUT=" + *options_.timeout_s);
    if (std::string to_store = dumps_.remote_env_entry(); !to_store.empty()) {
      vars.push_back(to_store);
    }
    // The launcher's end reaches a rank on its own machine through PR_SET_PDEATHSIG; one on
    // another host watches the store instead (bootstrap/store_watch.h), unless the user said 0.
    if (!base::env_string("TPF_END_WITH_STORE")) vars.push_back("TPF_END_WITH_STORE=1");
    return vars;
  }

  // A rank on host h: REMOTE_SHELL... HOST env VARIABLES... PROGRAM ARGS, the shell itself run
  // with the launcher's environment.
  ChildPlan remote_plan(const std::vector<std::string>& vars, int rank) const {
    const HostSlot slot = host_slot_of(options_, rank);
    const size_t host = slot.host;
    ChildPlan plan;
    plan.env_strings = vars;
    plan.env_strings.push_back("TPF_RANK=" + std::to_string(rank));
    plan.env_strings.push_back("TPF_LOCAL_RANK=" + std::to_string(slot.local_rank));
    plan.env_strings.push_back("TPF_LOCAL_WORLD_SIZE=" +
                               std::to_string(options_.hosts[host].ranks));
    add_rail_device(plan.env_strings, slot.local_rank);
    plan.remote_words = options_.remote_shell;
    plan.remote_words.push_back(options_.hosts[host].host);
    plan.remote_words.push_back("env");
    // --bind: the host pins its own rank, through this tpf (at the same path there).
    if (options_.bind != BindPolicy::none) {
      plan.bind_words = {own_path(),
                         "bind",
                         "--policy",
                         bind_policy_name(options_.bind),
                         "--local-rank",
                         std::to_string(slot.local_rank),
                         "--local-size",
                         std::to_string(options_.hosts[host].ranks),
                         "--"};
    }
    for (std::string& word : plan.remote_words) plan.argv.push_back(word.data());
    for (std::string& s : plan.env_strings) plan.argv.push_back(s.data());
    for (std::string& word : plan.bind_words) plan.argv.push_back(word.data());
    for (const std::string& a : options_.command) plan.argv.push_back(const_cast<char*>(a.c_str()));
    plan.argv.push_back(nullptr);
    for (char** e = environ; *e != nullptr; ++e) plan.envp.push_back(*e);
    plan.envp.push_back(nullptr);
    return plan;
  }

  void spawn_all(const std::string& store_addr, const std::string& secret,
                 const std::string& job_id, const SignalRouting& signals) {
    std::vector<std::string> common;
    bool override_timeout = options_.timeout_s.has_value();
    for (char** e = environ; *e != nullptr; ++e) {
      if (!is_launcher_variable(*e, override_timeout, !options_.rail_devices.empty()))
        common.emplace_back(*e);
    }
    common.push_back("TPF_WORLD_SIZE=" + std::to_string(options_.world_size));
    common.push_back("TPF_LOCAL_WORLD_SIZE=" + std::to_string(options_.world_size));
    common.push_back("TPF_STORE_ADDR=" + store_addr);
    common.push_back("TPF_JOB_SECRET=" + secret);
    common.push_back("TPF_JOB_ID=" + job_id);
    // Ranks are bound to single cores below, so they cannot see how many cores the job has.
    common.push_back("TPF_CPUS=" + std::to_string(usable_cpu_count()));
    if (options_.timeout_s) common.push_back("TPF_TIMEOUT=" + *options_.timeout_s);
    if (std::string dir = dumps_.env_entry(); !dir.empty()) common.push_back(dir);

    std::fflush(nullptr);  // nothing buffered in the launcher may be duplicated into a child
    pid_t launcher = ::getpid();
    const std::vector<std::string> remote = remote_variables(store_addr, secret, job_id);
    for (Rank& rank : ranks_.ranks()) {
      ChildPlan plan =
          options_.hosts.empty() ? local_plan(common, rank.rank) : remote_plan(remote, rank.rank);
      Pipe status = make_pipe("the exec status of a rank");
      Pipe out, err;
      if (options_.tag_output) {
        out = make_pipe("a rank's stdout");
        err = make_pipe("a rank's stderr");
      }
      pid_t pid = ::fork();
      if (pid < 0)
        throw_system_error(ErrorCode::resource, "fork of rank " + std::to_string(rank.rank), errno);
      if (pid == 0) {
        run_child(options_, path_, rank, plan, signals, launcher, status.write.get(),
                  out.write.get(), err.write.get());
      }
      ::setpgid(pid, pid);  // also here, so signals sent right after fork reach the group
      rank.pid = pid;
      rank.running = true;
      rank.exec_status = std::move(status.read);
      if (options_.tag_output) {
        // Appended piecewise: GCC 12 -O3 warns falsely (-Wrestrict) on "[" + std::string.
        std::string prefix("[");
        prefix += std::to_string(rank.rank);
        prefix += "] ";
        rank.out = std::move(out.read);
        rank.err = std::move(err.read);
        rank.out_tag = std::make_unique<LinePrefixer>(prefix, STDOUT_FILENO);
        rank.err_tag = std::make_unique<LinePrefixer>(prefix, STDERR_FILENO);
      }
    }
  }

  // One poll loop: the signalfd (children exiting, signals to forward), the ranks' output pipes
  // and exec-status pipes, the results of commands on other hosts, and the teardown deadlines.
  // It sleeps in poll() until one of them needs attention; nothing spins, and nothing in it
  // waits on another host (cli/remote_worker.h).
  void supervise(const SignalRouting& signals) {
    while (ranks_.running_count() > 0) {
      std::vector<pollfd> fds;
      std::vector<std::pair<Rank*, int>> owners;  // which rank/stream each entry (after [0]) is
      fds.push_back(pollfd{signals.fd(), POLLIN, 0});
      for (Rank& r : ranks_.ranks()) {
        if (r.exec_status.valid()) {
          fds.push_back({r.exec_status.get(), POLLIN, 0});
          owners.push_back({&r, 0});
        }
        if (r.out.valid()) {
          fds.push_back({r.out.get(), POLLIN, 0});
          owners.push_back({&r, 1});
        }
        if (r.err.valid()) {
          fds.push_back({r.err.get(), POLLIN, 0});
          owners.push_back({&r, 2});
        }
      }
      if (dumps_.watch_fd() >= 0) {
        fds.push_back({dumps_.watch_fd(), POLLIN, 0});
        owners.push_back({nullptr, 3});
      }
      fds.push_back({lost_.fd(), POLLIN, 0});
      owners.push_back({nullptr, 4});
      fds.push_back({remote_.fd(), POLLIN, 0});
      owners.push_back({nullptr, 5});
      int rc = ::poll(fds.data(), fds.size(), poll_timeout_ms());
      if (rc < 0 && errno != EINTR) throw_system_error(ErrorCode::system, "poll", errno);
      if (rc > 0) {
        for (size_t i = 1; i < fds.size(); ++i) {
          if (fds[i].revents == 0) continue;
          auto [rank, stream] = owners[i - 1];
          if (stream == 3) {
            dumps_.drain_watch();  // a dump file changed: enforce_deadlines() looks
          } else if (stream == 4) {
            end_lost_ranks();
          } else if (stream == 5) {
            remote_.run_results();
          } else if (stream == 0) {
            read_exec_status(*rank);
          } else {
            read_output(*rank, stream, /*drain=*/false);
          }
        }
        if (fds[0].revents != 0) handle_signals(signals);
      }
      enforce_deadlines();
      end_stopped_ranks_none_can_find();
    }
  }

  int poll_timeout_ms() const {
    std::optional<Clock::time_point> next;
    // The deadlines that ask for dumps wait while a request is being made (enforce_deadlines).
    if (term_deadline_ && !asking_for_dumps_) next = term_deadline_;
    if (kill_deadline_ && (!next || *kill_deadline_ < *next)) next = kill_deadline_;
    if (job_deadline_ && !asking_for_dumps_ && (!next || *job_deadline_ < *next)) {
      next = job_deadline_;
    }
    if (dump_deadline_ && (!next || *dump_deadline_ < *next)) next = dump_deadline_;
    if (watching_stopped_ranks() && !looking_at_stopped_ranks_) {
      const std::optional<Clock::time_point> look = stopped_ranks_.next_look();
      if (look && (!next || *look < *next)) next = look;
    }
    if (!next) return -1;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*next - Clock::now()).count();
    int timeout = ms < 0 ? 0 : static_cast<int>(ms + 1);
    // Dumps through the store change no file until they are copied: look for them too.
    if (dump_deadline_ && (dumps_.watch_fd() < 0 || dumps_.reads_store())) {
      timeout = std::min(timeout, kDumpPollMs);
    }
    return timeout;
  }

  void handle_signals(const SignalRouting& signals) {
    signalfd_siginfo info;
    bool child_exited = false;
    while (::read(signals.fd(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
      int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGCHLD) {
        child_exited = true;
        continue;
      }
      if (sig == kSummarySignal) {
        if (!dump_deadline_ && !asking_for_dumps_) request_dumps(AfterDumps::summary);
        continue;
      }
      if (received_signal_ == 0) received_signal_ = sig;
      report("received " + signal_name(sig) + "; forwarding it to " + ranks_.running_list());
      signal_running({sig});
      // The ranks got the signal already; if they ignore it, they are killed after the grace.
      term_deadline_.reset();
      if (!kill_deadline_) kill_deadline_ = Clock::now() + options_.grace;
    }
    // SIGCHLD is not queued per child: one notification may stand for several exits.
    if (child_exited) reap();
  }

  void reap() {
    for (Rank& r : ranks_.ranks()) {
      if (!r.running) continue;
      pid_t got = ::waitpid(r.pid, &r.wait_status, WNOHANG);
      if (got < 0 && errno == ECHILD) {
        // Someone else reaped it (cannot happen unless SIGCHLD is ignored); never wait on it.
        r.running = false;
        report("rank " + std::to_string(r.rank) + " vanished (exit status unknown)");
        any_failed_ = true;
        continue;
      }
      if (got != r.pid) continue;
      r.running = false;
      read_exec_status(r);
      report_exit(r);
    }
  }

  void read_exec_status(Rank& r) {
    if (!r.exec_status.valid()) return;
    int err = 0;
    ssize_t n;
    do {
      n = ::read(r.exec_status.get(), &err, sizeof(err));
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(sizeof(err))) r.exec_errno = err;
    r.exec_status.reset();
  }

  void report_exit(const Rank& r) {
    bool failed = true;
    std::string who = "rank " + std::to_string(r.rank);
    if (r.exec_errno != 0) {
      std::string program = "'" + options_.command[0] + "'";
      if (path_ != options_.command[0]) program += " (" + path_ + ")";
      report(who + " could not start program " + program + ": " + std::strerror(r.exec_errno));
      cannot_start_ = true;
    } else if (WIFEXITED(r.wait_status)) {
      int code = WEXITSTATUS(r.wait_status);
      failed = code != 0;
      if (failed) report(who + " exited with code " + std::to_string(code));
    } else if (WIFSIGNALED(r.wait_status)) {
      int sig = WTERMSIG(r.wait_status);
      if (r.ended_as_lost) {
        report(who + " was ended by " + signal_name(sig) + " (found lost)");
      } else if (stopped_by_launcher_ || received_signal_ != 0) {
        report(who + " was stopped by " + signal_name(sig));
      } else {
        report(who + " was killed by signal " + signal_name(sig));
      }
    }
    if (!failed) return;
    any_failed_ = true;
    if (first_failure_.empty()) first_failure_ = who;
    if (options_.keep_going) {
      if (ranks_.running_count() > 0 && !stopped_by_launcher_ && received_signal_ == 0)
        report(ranks_.running_list() + (ranks_.running_count() == 1 ? " goes" : " go") +
               " on (--keep-going)");
      return;
    }
    // The others will notice the dead peer through their own deadlines and say so; give them
    // the grace period to do it before stopping them.
    if (!term_deadline_ && !kill_deadline_) term_deadline_ = Clock::now() + options_.grace;
  }

  // A rank the job found lost has been given up by the ranks that found it (with --keep-going
  // they go on without it; without, the job fails): ended at once with SIGKILL, which a stopped
  // process takes too, here and (--hosts) on its host. (cli/lost_ranks.h)
  void end_lost_ranks() {
    std::set<int> ending;
    for (const LostRanks::Report& lost : lost_.take()) {
      if (lost.rank < 0 || lost.rank >= options_.world_size) continue;
      Rank& r = ranks_.ranks()[static_cast<size_t>(lost.rank)];
      if (!r.running || r.ended_as_lost) continue;  // it exited, or was ended already
      const std::string finder = lost.found_by >= 0 ? "rank " + std::to_string(lost.found_by)
                                                    : std::string("the job's store");
      report("rank " + std::to_string(lost.rank) + " was found lost by " + finder + " (" +
             lost.reason + "); ending it");
      end_as_lost(r);
      ending.insert(lost.rank);
    }
    if (!ending.empty()) signal_remote(armed_remote_pids(), {SIGKILL}, ending);
  }

  static void end_as_lost(Rank& r) {
    r.ended_as_lost = true;
    RankSet::signal(r, SIGKILL);
  }

  // Whether tpf run looks for a stopped rank that no running rank could find lost
  // (cli/stopped_ranks.h): once a rank has ended, and not while the job is being stopped.
  bool watching_stopped_ranks() const {
    const int running = ranks_.running_count();
    return running > 0 && running < options_.world_size && !term_deadline_ && !kill_deadline_ &&
           !dump_deadline_ && !asking_for_dumps_ && !stopped_by_launcher_ && received_signal_ == 0;
  }

  // Looks at the running ranks when a look is due: here through /proc, across hosts through the
  // remote shell, off the loop, one look at a time (with --hosts the launcher's children are the
  // remote shells, whose state says nothing of their ranks').
  void end_stopped_ranks_none_can_find() {
    const Clock::time_point now = Clock::now();
    if (!watching_stopped_ranks()) return;
    stopped_ranks_.begin(now);
    if (looking_at_stopped_ranks_ || !stopped_ranks_.look_due(now)) return;
    if (options_.hosts.empty()) {
      std::vector<RemoteProcess> stopped;
      for (const auto& [rank, pid] : ranks_.stopped()) stopped.push_back({rank, "", pid});
      take_stopped_look(stopped, now);
      return;
    }
    looking_at_stopped_ranks_ = true;
    // The work captures no `this` it uses: only the result, run on the loop, does.
    auto look = [&options = options_, job_id = job_id_, armed = armed_remote_pids(),
                 warnings = &stopped_look_warnings_, this]() -> RemoteWorker::Then {
      std::vector<RemoteProcess> stopped =
          stopped_remote_job_processes(options, job_id, armed, warnings);
      return [this, stopped = std::move(stopped), at = Clock::now()] {
        looking_at_stopped_ranks_ = false;
        take_stopped_look(stopped, at);
      };
    };
    remote_.post(look, [this] { looking_at_stopped_ranks_ = false; });
  }

  // One look at the running ranks, made at `at`: `stopped`, their processes found stopped. A
  // rank found lost is ended, here and on its host.
  void take_stopped_look(const std::vector<RemoteProcess>& stopped, Clock::time_point at) {
    if (!watching_stopped_ranks()) return;  // the job changed while the look was made
    std::vector<StoppedRanks::Look> looks;
    for (const Rank& r : ranks_.ranks()) {
      if (!r.running || r.ended_as_lost) continue;
      StoppedRanks::Look look{r.rank, false, r.pid, ""};
      for (const RemoteProcess& p : stopped) {
        if (p.rank == r.rank) look = {r.rank, true, p.pid, p.host};
      }
      looks.push_back(look);
    }
    std::set<int> ending;
    for (const StoppedRanks::Found& found : stopped_ranks_.look(looks, at)) {
      report(found.text + "; no running rank could find it: ending it");
      end_as_lost(ranks_.ranks()[static_cast<size_t>(found.rank)]);
      ending.insert(found.rank);
    }
    if (!ending.empty()) signal_remote(armed_remote_pids(), {SIGKILL}, ending);
  }

  // What to do once the ranks asked for their flight recorders have dumped them.
  enum class AfterDumps { summary, terminate };

  // Asks the running ranks that armed their flight recorders for their dumps; once they have
  // dumped (or the dump wait has run out), `after` follows, at once if none armed it. A stopped
  // rank is said and not asked (it could not dump). Across hosts, which ranks are stopped is
  // asked on their hosts first, off the loop (asking_for_dumps_ meanwhile).
  void request_dumps(AfterDumps after) {
    std::set<int> said;
    for (const auto& [rank, pid] : ranks_.stopped()) {
      report("rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + ")" +
             stopped_cannot_dump());
      said.insert(rank);
    }
    if (options_.hosts.empty()) {
      ask_for_dumps(after, {}, said);
      return;
    }
    asking_for_dumps_ = true;
    // The work captures no `this` it uses: only the result, run on the loop, does.
    auto look = [&options = options_, job_id = job_id_, armed = armed_remote_pids(), after, said,
                 this]() -> RemoteWorker::Then {
      std::vector<RemoteProcess> stopped = stopped_remote_job_processes(options, job_id, armed);
      return [this, after, said, stopped = std::move(stopped)] {
        hosts_looked_at(after, said, stopped);
      };
    };
    remote_.post(look, [this, after, said] { hosts_looked_at(after, said, {}); });
  }

  // The look on other hosts for a dump request is done (`stopped`: what it found stopped).
  void hosts_looked_at(AfterDumps after, const std::set<int>& said,
                       const std::vector<RemoteProcess>& stopped) {
    asking_for_dumps_ = false;
    // The job may have ended meanwhile, or been stopped by a signal: nobody to ask.
    if (ranks_.running_count() > 0 && !stopped_by_launcher_ && received_signal_ == 0) {
      ask_for_dumps(after, stopped, said);
    }
  }

  // request_dumps' second half: `stopped_remote`, the ranks' processes found stopped on other
  // hosts; `said`, the ranks already said to be stopped.
  void ask_for_dumps(AfterDumps after, const std::vector<RemoteProcess>& stopped_remote,
                     std::set<int> said) {
    for (const RemoteProcess& p : stopped_remote) {
      // A fake remote shell may run the rank in the launcher's group: said once.
      if (said.insert(p.rank).second) report(describe(p) + stopped_cannot_dump());
    }
    FlightDumps::RemoteRequests remote;
    const int asked =
        dumps_.request(ranks_.running_groups(), ranks_.running_ranks(), stopped_remote, remote);
    if (asked == 0) {
      if (after == AfterDumps::terminate) {
        terminate_running(Clock::now(), stop_reason());
      } else {
        report("received " + signal_name(kSummarySignal) +
               ", but no running rank has a flight recorder");
      }
      return;
    }
    report("asking " + ranks_.running_list() + " for their flight recorders (" +
           std::to_string(asked) + " process" + (asked == 1 ? "" : "es") + ")");
    after_dumps_ = after;
    dump_deadline_ = Clock::now() + options_.dump_wait;
    if (remote.kills.empty()) return;
    auto send = [remote = std::move(remote), this]() mutable -> RemoteWorker::Then {
      remote.send();
      return [this, sent = std::move(remote)] { dumps_.remote_requests_sent(sent); };
    };
    remote_.post(std::move(send));
  }

  // False if no rank has dumped yet.
  bool print_summary() {
    summarized_dumps_ = dumps_.dump_count();
    std::set<int> ended_lost;
    for (const Rank& r : ranks_.ranks()) {
      if (r.ended_as_lost) ended_lost.insert(r.rank);
    }
    std::vector<std::string> lines = dumps_.summary(ended_lost);
    if (lines.empty()) return false;
    report("flight recorder summary (dumps in " + dumps_.dir() + "):");
    for (const std::string& line : lines) report(line);
    return true;
  }

  void terminate_running(Clock::time_point now, const std::string& why) {
    report(ranks_.running_list() + " still running " + why + "; sending SIGTERM");
    stopped_by_launcher_ = true;
    // A stopped process takes SIGTERM only once it runs again (as a shell's `kill` does for a
    // stopped job); a running one ignores SIGCONT.
    signal_running({SIGTERM, SIGCONT});
    kill_deadline_ = now + options_.grace;
  }

  // Signals the running ranks here (their process groups, and what escaped them), and on other
  // hosts the job's processes too (the remote shell that is the launcher's child there would pass
  // on none of these signals).
  void signal_running(const std::vector<int>& signals) {
    // The recorders' pids of the ranks running now (a shell signalled here may end at once),
    // then the local signals: the ranks here need not wait for the search on the other hosts.
    std::vector<RemoteProcess> armed = armed_remote_pids();
    for (const int sig : signals) ranks_.signal_running(sig);
    if (options_.hosts.empty()) {
      for (const JobProcess& p : escaped_local_processes()) {
        for (const int sig : signals) ::kill(p.pid, sig);
      }
    }
    signal_remote(std::move(armed), signals);
  }

  // Sends `signals` to the job's processes on other hosts (of `ranks` only, where given), off
  // the loop: the search for them and the signals wait on the remote shell. `armed`: the pids
  // the running ranks' flight recorders gave. Nothing without --hosts.
  void signal_remote(std::vector<RemoteProcess> armed, std::vector<int> signals,
                     std::optional<std::set<int>> ranks = std::nullopt) {
    if (options_.hosts.empty()) return;
    remote_.post([&options = options_, job_id = job_id_, armed = std::move(armed),
                  signals = std::move(signals), ranks = std::move(ranks)]() -> RemoteWorker::Then {
      const auto until = Clock::now() + kRemoteProcessDeadline;
      std::vector<RemoteProcess> theirs = find_remote_processes(options, job_id, armed);
      if (ranks) {
        std::erase_if(theirs, [&](const RemoteProcess& p) { return ranks->count(p.rank) == 0; });
      }
      if (!theirs.empty()) {
        signal_remote_processes(options.remote_shell, theirs, signals, remote_time_left(until));
      }
      return {};
    });
  }

  // The pids the running ranks' flight recorders gave for their processes on other hosts (none
  // without --hosts: FlightDumps knows no remote shell then).
  std::vector<RemoteProcess> armed_remote_pids() const {
    return dumps_.remote_processes(ranks_.running_ranks());
  }

  // The job's processes on this machine out of the ranks' process groups (a process a rank
  // started in a session of its own), which what the launcher sends the groups does not reach.
  // With --hosts the ranks' machines are searched through the remote shell instead, this one
  // among them where it is one.
  std::vector<JobProcess> escaped_local_processes() const {
    std::set<pid_t> groups;
    for (const Rank& r : ranks_.ranks()) groups.insert(r.pid);
    std::vector<JobProcess> escaped;
    for (const JobProcess& p : local_job_processes(job_id_)) {
      if (groups.count(p.group) == 0) escaped.push_back(p);
    }
    return escaped;
  }

  // What the job left running on this machine out of the ranks' process groups, which
  // kill_leftover_groups has just killed: killed and said, as on other hosts (JobSweeper).
  void kill_local_leftovers() {
    if (!options_.hosts.empty()) return;
    const std::vector<JobProcess> left = escaped_local_processes();
    if (left.empty()) return;
    report(leftovers_line("on this machine", left));
    for (const JobProcess& p : left) ::kill(p.pid, SIGKILL);
  }

  std::string stop_reason() const {
    if (job_timed_out_) return "at the job timeout";
    return "after " + first_failure_ + " failed";
  }

  void enforce_deadlines() {
    Clock::time_point now = Clock::now();
    if (dump_deadline_) {
      // Stopping waits for the dumps: a rank killed mid-dump would leave nothing to summarize.
      if (ranks_.running_count() > 0 && now < *dump_deadline_ &&
          !dumps_.request_done(ranks_.running_ranks())) {
        return;
      }
      dump_deadline_.reset();
      const bool printed = print_summary();
      if (after_dumps_ == AfterDumps::terminate) {
        stop_summary_printed_ = printed;
        if (ranks_.running_count() > 0) terminate_running(now, stop_reason());
      }
    }
    if (ranks_.running_count() == 0) return;
    // While a dump request asks other hosts which ranks are stopped, the deadlines that would
    // ask again wait for it.
    if (job_deadline_ && now >= *job_deadline_ && !asking_for_dumps_) {
      job_deadline_.reset();
      term_deadline_.reset();
      job_timed_out_ = true;
      char limit[32];
      std::snprintf(limit, sizeof(limit), "%g", options_.job_timeout->count() / 1000.0);
      report(std::string("the job ran past --job-timeout ") + limit + " s");
      request_dumps(AfterDumps::terminate);
    } else if (term_deadline_ && now >= *term_deadline_ && !asking_for_dumps_) {
      term_deadline_.reset();
      request_dumps(AfterDumps::terminate);
    } else if (kill_deadline_ && now >= *kill_deadline_) {
      kill_deadline_.reset();
      report(ranks_.running_list() + " did not stop; sending SIGKILL");
      stopped_by_launcher_ = true;
      signal_running({SIGKILL});
    }
  }

  // stream 1 = stdout, 2 = stderr. With drain, reads whatever is buffered without waiting.
  void read_output(Rank& r, int stream, bool drain) {
    Fd& fd = stream == 1 ? r.out : r.err;
    LinePrefixer& tag = stream == 1 ? *r.out_tag : *r.err_tag;
    if (drain) ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) | O_NONBLOCK);
    char buf[65536];
    do {
      ssize_t n = ::read(fd.get(), buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && !drain && errno == EAGAIN) return;  // spurious wakeup; poll again
      if (n <= 0) {  // EOF, a read error, or nothing left to drain: this stream is done
        tag.flush();
        fd.reset();
        return;
      }
      tag.feed(buf, static_cast<size_t>(n));
    } while (drain);
  }

  // The ranks are gone, but a descendant that escaped its process group may still hold a pipe
  // open: take what is already buffered rather than wait for an EOF that might never come.
  void finish_output() {
    for (Rank& r : ranks_.ranks()) {
      if (r.out.valid()) read_output(r, 1, /*drain=*/true);
      if (r.err.valid()) read_output(r, 2, /*drain=*/true);
    }
  }

  int exit_code() const {
    if (received_signal_ != 0) return 128 + received_signal_;
    if (job_timed_out_) return kExitJobTimeout;
    if (cannot_start_) return kExitCannotStart;
    return any_failed_ ? kExitRankFailed : 0;
  }

  const LaunchOptions& options_;
  std::string path_;
  RankSet ranks_;
  FlightDumps& dumps_;
  JobSweeper& sweeper_;
  LostRanks& lost_;
  StoppedRanks stopped_ranks_;
  bool looking_at_stopped_ranks_ = false;   // a look across hosts is under way
  RepeatedWarnings stopped_look_warnings_;  // the worker's alone
  std::string job_id_;
  std::optional<Clock::time_point> job_deadline_;
  std::optional<Clock::time_point> dump_deadline_;  // a dump request is pending until then
  bool asking_for_dumps_ = false;  // request_dumps is asking other hosts which ranks are stopped
  AfterDumps after_dumps_ = AfterDumps::summary;
  size_t summarized_dumps_ = 0;
  bool stop_summary_printed_ = false;
  bool job_timed_out_ = false;
  std::optional<Clock::time_point> term_deadline_;
  std::optional<Clock::time_point> kill_deadline_;
  std::string first_failure_;
  bool any_failed_ = false;
  bool cannot_start_ = false;
  bool stopped_by_launcher_ = false;
  int received_signal_ = 0;
  // Last: destroyed first, waiting for its work, which may use the members above.
  RemoteWorker remote_;
};

// Ranks that dump into the job's store (those on other hosts) reach the summary through it.
void read_dumps_from_store(FlightDumps& dumps, const LaunchOptions& options,
                           const std::string& host, uint16_t port, const std::string& secret) {
  RemoteRanks remote;
  if (!options.hosts.empty()) {
    remote.remote_shell = options.remote_shell;
    remote.host_of_rank = host_of_each_rank(options);
  }
  try {
    dumps.read_store(std::make_unique<TcpStoreClient>(host, port, secret, kStoreConnectTimeout),
                     options.world_size, std::move(remote));
  } catch (const std::exception& e) {
    report(std::string("warning: cannot read the job's store for the ranks' flight recorders (") +
           e.what() + "); the summary leaves out ranks on other hosts");
  }
}

}  // namespace

int launch_job(const LaunchOptions& options) {
  // With hosts, this machine starts the remote shell; the program is found on each host.
  const std::string& program =
      options.hosts.empty() ? options.command.at(0) : options.remote_shell.at(0);
  std::string resolve_error;
  std::optional<std::string> path = resolve_program(program, &resolve_error);
  if (!path) {
    report("error: " + resolve_error);
    return kExitCannotStart;
  }
  std::string job_id = random_hex(8);
  std::string secret = random_hex(16);  // 128 bits: keeps other local users out of the store

  // Order matters: the mask must be in place before the store server starts its thread, or that
  // thread could take SIGCHLD/SIGTERM with the default action; the sweeper must outlive the job.
  JobSweeper sweeper(job_id, options);
  FlightDumps dumps(job_id);
  SignalRouting signals;
  // One machine: loopback only. Several: where --store-bind says (all addresses by default), and
  // the ranks are told that address, or this machine's name.
  std::string bind = "127.0.0.1";
  std::string advertised = bind;
  if (!options.hosts.empty()) {
    bind = options.store_bind.empty() ? "0.0.0.0" : options.store_bind;
    advertised = bind == "0.0.0.0" ? host_name() : bind;
  }
  // Per rank, while it runs: its store connection (more while it sets up) and, with --tag-output,
  // its two output pipes; while it starts, its exec-status pipe. Past ~250 ranks that exceeds the
  // usual soft limit of 1,024; the ranks inherit the raised limit (each raises its own as its
  // communicators need: comm/open_file_room.h).
  base::make_room_for_files(kLauncherFilesPerRank * static_cast<uint64_t>(options.world_size),
                            kLauncherSpareFiles);
  LostRanks lost;  // before the server, whose thread tells it
  TcpStoreServer server(bind, 0, secret);
  server.on_rank_lost(lost.handler());
  std::string store_addr = advertised + ":" + std::to_string(server.port());
  read_dumps_from_store(dumps, options, bind == "0.0.0.0" ? "127.0.0.1" : bind, server.port(),
                        secret);
  Job job(options, *path, dumps, sweeper, lost);
  return job.run(store_addr, secret, job_id, signals);
}

}  // namespace tpf::cli