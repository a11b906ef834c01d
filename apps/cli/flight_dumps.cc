#include "cli/flight_dumps.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <set>

#include "base/env_config.h"
#include "cli/remote_commands.h"
#include "comm/flight_store.h"
#include "comm/flight_summary.h"
#include "tpf/store.h"

namespace tpf::cli {
namespace {

// A rank's file holds its dumps; more than this is read from the end (the newest dumps).
constexpr off_t kMaxReadBytes = off_t{64} << 20;

std::string read_tail(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return {};
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return {};
  off_t from = st.st_size > kMaxReadBytes ? st.st_size - kMaxReadBytes : 0;
  std::string text(static_cast<size_t>(st.st_size - from), '\0');
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n =
        ::pread(fd.get(), text.data() + done, text.size() - done, from + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  return text;
}

// Asking ranks on other hosts for their dumps waits at most this long for the remote shells (an
// ssh that cannot reach its host waits for its own connect timeout).
constexpr std::chrono::milliseconds kRemoteRequestDeadline{5000};

bool append_to_file(const std::string& path, const std::string& text) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!fd.valid()) return false;
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

FlightDumps::FlightDumps(std::string job_id) : job_id_(std::move(job_id)) {
  if (auto dir = base::env_string("TPF_FLIGHT_RECORDER_DIR")) {
    dir_ = *dir;
  } else {
    std::string base = base::env_string("TMPDIR").value_or("/tmp");
    std::string pattern = base + "/tpf-run-" + job_id_ + "-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      report("warning: cannot make a directory for the ranks' flight recorders (" + pattern + ": " +
             std::strerror(errno) + "); a hung job will not say where its ranks are");
      return;
    }
    dir_ = pattern;
    owned_ = true;
  }
  watch_ = Fd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (watch_.valid() &&
      ::inotify_add_watch(watch_.get(), dir_.c_str(), IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE) < 0) {
    watch_.reset();
  }
}

FlightDumps::~FlightDumps() {
  if (!owned_) return;
  if (dumps_in_files() > 0) return;  // the summary pointed here
  for (const std::string& file : files()) ::unlink(file.c_str());
  ::rmdir(dir_.c_str());
}

std::string FlightDumps::env_entry() const {
  return owned_ ? "TPF_FLIGHT_RECORDER_DIR=" + dir_ : std::string();
}

void FlightDumps::read_store(std::unique_ptr<Store> store, int world_size, RemoteRanks remote) {
  if (dir_.empty()) return;
  store_ = std::move(store);
  world_size_ = world_size;
  remote_ = std::move(remote);
}

std::string FlightDumps::remote_env_entry() const {
  return dir_.empty() ? std::string() : "TPF_FLIGHT_RECORDER_STORE=1";
}

std::string FlightDumps::store_copy_file(int rank) const {
  return dir_ + "/flight-" + job_id_ + "-rank" + std::to_string(rank) + "-from-store.txt";
}

void FlightDumps::copy_from_store() {
  if (!store_) return;
  try {
    const int64_t total = store_->add(detail::kFlightStoreTotalKey, 0);
    if (total == seen_total_) return;
    // The ranks the new notices name; a notice not there yet stands for any rank. A text counted
    // in `total` is in the store; a text counted only in its rank's count (being written) stops
    // that rank's copy here (texts stay in order) and is taken when the total moves again.
    std::set<int> ranks;
    bool every_rank = false;
    for (int64_t m = seen_total_ + 1; m <= total && !every_rank; ++m) {
      const std::string notice = detail::flight_store_notice_key(m);
      if (!store_->check(notice)) {
        every_rank = true;
        continue;
      }
      const int rank = std::stoi(store_->get(notice, std::chrono::milliseconds(0)));
      if (rank < 0 || rank >= world_size_) {
        throw std::runtime_error(notice + " names rank " + std::to_string(rank) + " of " +
                                 std::to_string(world_size_));
      }
      ranks.insert(rank);
    }
    seen_total_ = total;
    if (every_rank) {
      for (int r = 0; r < world_size_; ++r) ranks.insert(r);
    }
    if (copied_.size() < static_cast<size_t>(world_size_)) copied_.resize(world_size_, 0);
    for (const int rank : ranks) {
      const size_t r = static_cast<size_t>(rank);
      const int64_t count = store_->add(detail::flight_store_count_key(rank), 0);
      while (copied_[r] < count) {
        const std::string key = detail::flight_store_text_key(rank, copied_[r] + 1);
        if (!store_->check(key)) break;
        const std::string text = store_->get(key, std::chrono::milliseconds(0));
        if (!append_to_file(store_copy_file(rank), text)) {
          throw std::runtime_error("cannot write " + store_copy_file(rank) + ": " +
                                   std::strerror(errno));
        }
        ++copied_[r];
        copy_files_[store_copy_file(rank)] = rank;
      }
    }
  } catch (const std::exception& e) {
    report(std::string("warning: cannot read the flight recorders of ranks on other hosts from "
                       "the job's store (") +
           e.what() + "); the summary leaves them out");
    store_.reset();
  }
}

void FlightDumps::drain_watch() {
  if (!watch_.valid()) return;
  alignas(inotify_event) char buf[4096];
  while (::read(watch_.get(), buf, sizeof(buf)) > 0) {
  }
}

std::vector<std::string> FlightDumps::files() const {
  std::vector<std::string> out;
  if (dir_.empty()) return out;
  DIR* dir = ::opendir(dir_.c_str());
  if (dir == nullptr) return out;
  const std::string prefix = "flight-" + job_id_ + "-";
  while (dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind(prefix, 0) == 0 && name.size() > 4 &&
        name.compare(name.size() - 4, 4, ".txt") == 0) {
      out.push_back(dir_ + "/" + name);
    }
  }
  ::closedir(dir);
  return out;
}

std::vector<RemoteProcess> FlightDumps::remote_processes(const std::vector<int>& running_ranks) {
  std::vector<RemoteProcess> out;
  if (remote_.remote_shell.empty()) return out;
  copy_from_store();
  const std::set<int> running(running_ranks.begin(), running_ranks.end());
  std::set<std::pair<int, pid_t>> seen;  // a pid may arm more than once
  for (const auto& [file, rank] : copy_files_) {
    // Its rank still runs, so the pid is still that rank's process (or its child's).
    if (running.count(rank) == 0) continue;
    for (const int64_t pid : detail::parse_flight_file(read_tail(file)).armed_pids) {
      if (seen.insert({rank, static_cast<pid_t>(pid)}).second) {
        out.push_back({rank, remote_.host_of_rank[size_t(rank)], static_cast<pid_t>(pid)});
      }
    }
  }
  return out;
}

int FlightDumps::request(const std::vector<pid_t>& groups, const std::vector<int>& running_ranks,
                         const std::vector<RemoteProcess>& stopped_remote, RemoteRequests& remote) {
  copy_from_store();
  asked_.clear();
  remote.generation = ++generation_;
  remote.remote_shell = remote_.remote_shell;
  remote.kills.clear();
  std::set<std::pair<std::string, pid_t>> seen;  // (file, pid): a pid may arm more than once
  const std::set<int> running(running_ranks.begin(), running_ranks.end());
  std::map<std::pair<std::string, int>, std::vector<std::string>> remote_pids;  // (host, signal)
  for (const std::string& file : files()) {
    const detail::FlightFile parsed = detail::parse_flight_file(read_tail(file));
    // A rank's texts from the store; on this machine (a job without --hosts) they are asked as
    // local processes are.
    const auto copied = copy_files_.find(file);
    const int remote_rank =
        copied != copy_files_.end() && !remote_.remote_shell.empty() ? copied->second : -1;
    for (size_t i = 0; i < parsed.armed_pids.size(); ++i) {
      const pid_t pid = static_cast<pid_t>(parsed.armed_pids[i]);
      const int sig = parsed.armed_signals[i];
      if (!seen.insert({file, pid}).second) continue;
      if (remote_rank >= 0) {
        // Its rank still runs, so the pid is still that rank's process (or its child's). A
        // stopped process would take the signal only once it runs again: not waited for.
        const bool stopped = std::any_of(
            stopped_remote.begin(), stopped_remote.end(),
            [&](const RemoteProcess& p) { return p.rank == remote_rank && p.pid == pid; });
        if (running.count(remote_rank) == 0 || stopped) continue;
        remote_pids[{remote_.host_of_rank[size_t(remote_rank)], sig}].push_back(
            std::to_string(pid));
      } else {
        // Only a process still in a running rank's group: never a stranger that reused the pid.
        const pid_t group = ::getpgid(pid);
        bool ours = false;
        for (pid_t g : groups) ours = ours || (group == g);
        // A stopped process would take the signal only once it runs again: not waited for.
        if (!ours || is_stopped(pid) || ::kill(pid, sig) != 0) continue;
      }
      asked_.push_back({file, pid, remote_rank, parsed.signal_dumps});
    }
  }
  for (const auto& [where, pids] : remote_pids) {
    RemoteCommand& kill = remote.kills.emplace_back();
    kill.host = where.first;
    std::string signal_flag("-");  // appended: GCC 12 -O3 warns falsely on "-" + std::string
    signal_flag += std::to_string(where.second);
    kill.words = {"kill", signal_flag};
    kill.words.insert(kill.words.end(), pids.begin(), pids.end());
  }
  return static_cast<int>(asked_.size());
}

void FlightDumps::RemoteRequests::send() {
  run_remote_commands(remote_shell, kills, kRemoteRequestDeadline);
}

void FlightDumps::remote_requests_sent(const RemoteRequests& sent) {
  // A newer request asked again: what it waits for is its own.
  if (sent.generation != generation_) return;
  for (const RemoteCommand& kill : sent.kills) {
    if (kill.answered && WIFEXITED(kill.status) && WEXITSTATUS(kill.status) == 0) continue;
    report("warning: asking the ranks on host '" + kill.host +
           "' for their flight recorders failed (" +
           (kill.answered
                ? remote_exit_description(kill.status)
                : "no answer within " + std::to_string(kRemoteRequestDeadline.count()) + " ms") +
           ")");
    // Do not wait for dumps that were never asked for.
    std::erase_if(asked_, [&](const Asked& a) {
      return a.remote_rank >= 0 && remote_.host_of_rank[size_t(a.remote_rank)] == kill.host;
    });
  }
}

bool FlightDumps::request_done(const std::vector<int>& running_ranks) {
  copy_from_store();
  std::map<std::pair<std::string, pid_t>, size_t> finished;  // (file, pid) -> signal dumps
  for (const std::string& file : files()) {
    const detail::FlightFile parsed = detail::parse_flight_file(read_tail(file));
    for (int64_t pid : parsed.armed_pids) {
      finished[{file, static_cast<pid_t>(pid)}] = parsed.signal_dumps;
    }
  }
  const std::set<int> running(running_ranks.begin(), running_ranks.end());
  for (const Asked& a : asked_) {
    auto it = finished.find({a.file, a.pid});
    const bool dumped = it != finished.end() && it->second > a.finished_before;
    const bool gone = a.remote_rank >= 0 ? running.count(a.remote_rank) == 0
                                         : ::kill(a.pid, 0) != 0 && errno == ESRCH;
    if (!dumped && !gone) return false;
  }
  return true;
}

size_t FlightDumps::dump_count() {
  copy_from_store();
  return dumps_in_files();
}

size_t FlightDumps::dumps_in_files() const {
  size_t n = 0;
  for (const std::string& file : files())
    n += detail::parse_flight_file(read_tail(file)).dumps.size();
  return n;
}

std::vector<std::string> FlightDumps::summary(const std::set<int>& ended_lost) {
  copy_from_store();
  std::vector<detail::FlightDump> dumps;
  for (const std::string& file : files()) {
    detail::FlightFile parsed = detail::parse_flight_file(read_tail(file));
    for (detail::FlightDump& d : parsed.dumps) dumps.push_back(std::move(d));
  }
  return detail::summarize_flight_dumps(dumps, ended_lost);
}

}  // namespace tpf::cli
