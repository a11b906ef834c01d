#include "cli/flight_dumps.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/env_config.h"
#include "comm/flight_summary.h"

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
  if (dump_count() > 0) return;  // the summary pointed here
  for (const std::string& file : files()) ::unlink(file.c_str());
  ::rmdir(dir_.c_str());
}

std::string FlightDumps::env_entry() const {
  return owned_ ? "TPF_FLIGHT_RECORDER_DIR=" + dir_ : std::string();
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

int FlightDumps::request(const std::vector<pid_t>& groups) {
  asked_.clear();
  for (const std::string& file : files()) {
    const detail::FlightFile parsed = detail::parse_flight_file(read_tail(file));
    for (size_t i = 0; i < parsed.armed_pids.size(); ++i) {
      const pid_t pid = static_cast<pid_t>(parsed.armed_pids[i]);
      // Only a process still in a running rank's group: never a stranger that reused the pid.
      const pid_t group = ::getpgid(pid);
      bool ours = false;
      for (pid_t g : groups) ours = ours || (group == g);
      if (!ours || asked_.count(pid) > 0) continue;
      if (::kill(pid, parsed.armed_signals[i]) == 0) asked_[pid] = parsed.signal_dumps;
    }
  }
  return static_cast<int>(asked_.size());
}

bool FlightDumps::request_done() const {
  std::map<pid_t, size_t> finished;
  for (const std::string& file : files()) {
    const detail::FlightFile parsed = detail::parse_flight_file(read_tail(file));
    for (int64_t pid : parsed.armed_pids) finished[static_cast<pid_t>(pid)] = parsed.signal_dumps;
  }
  for (const auto& [pid, before] : asked_) {
    auto it = finished.find(pid);
    const bool dumped = it != finished.end() && it->second > before;
    const bool gone = ::kill(pid, 0) != 0 && errno == ESRCH;
    if (!dumped && !gone) return false;
  }
  return true;
}

size_t FlightDumps::dump_count() const {
  size_t n = 0;
  for (const std::string& file : files())
    n += detail::parse_flight_file(read_tail(file)).dumps.size();
  return n;
}

std::vector<std::string> FlightDumps::summary() const {
  std::vector<detail::FlightDump> dumps;
  for (const std::string& file : files()) {
    detail::FlightFile parsed = detail::parse_flight_file(read_tail(file));
    for (detail::FlightDump& d : parsed.dumps) dumps.push_back(std::move(d));
  }
  return detail::summarize_flight_dumps(dumps);
}

}  // namespace tpf::cli
