#include "cli/process_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tpf/error.h"

namespace tpf::cli {

// Both ends close on exec: a rank only keeps what dup2 puts on fds 1 and 2, so the launcher sees
// EOF on a rank's output exactly when that rank (and its descendants) are gone.
Pipe make_pipe(const char* what) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw_system_error(ErrorCode::resource,
                       std::string("pipe2 for ") + what +
                           " (too many ranks for the open-file limit? see 'ulimit -n')",
                       errno);
  }
  return Pipe{Fd(fds[0]), Fd(fds[1])};
}

void report(const std::string& line) {
  std::string text = "tpf run: " + line + "\n";
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

std::string random_hex(size_t bytes) {
  std::vector<unsigned char> buf(bytes);
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ::getrandom(buf.data() + done, bytes - done, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_system_error(ErrorCode::system, "getrandom (job secret)", errno);
    }
    done += static_cast<size_t>(n);
  }
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : buf) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  std::string name = abbrev != nullptr ? std::string("SIG") + abbrev : "signal";
  return name + " (" + std::to_string(sig) + ")";
}

namespace {

// The state and process group of `pid` from this machine's /proc; nullopt where it is gone.
std::optional<ProcStat> state_and_group(long pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char text[512];
  const ssize_t n = ::read(fd, text, sizeof(text) - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  return parse_proc_stat(std::string(text, static_cast<size_t>(n)));
}

// `text` as a number of 1 to 9 decimal digits and nothing else; nullopt otherwise.
std::optional<long> small_number(std::string_view text) {
  if (text.empty() || text.size() > 9 ||
      text.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  return std::strtol(std::string(text).c_str(), nullptr, 10);
}

// Calls `take` with each of `text`'s NUL-ended records (an environment's entries, grep -z's lines).
template <class Take>
void for_each_record(std::string_view text, Take&& take) {
  while (!text.empty()) {
    const size_t end = std::min(text.find('\0'), text.size());
    take(text.substr(0, end));
    text.remove_prefix(std::min(end + 1, text.size()));
  }
}

// What a process's environment says of its job, from its entries one at a time.
struct JobEntries {
  bool in_job = false;
  int rank = -1;
  void take(std::string_view entry, std::string_view job_id) {
    constexpr std::string_view kJob = "TPF_JOB_ID=", kRank = "TPF_RANK=";
    // Whole entries only (grep matched substrings anywhere).
    if (entry.substr(0, kJob.size()) == kJob && entry.substr(kJob.size()) == job_id) {
      in_job = true;
    } else if (entry.substr(0, kRank.size()) == kRank) {
      if (const std::optional<long> r = small_number(entry.substr(kRank.size()))) {
        rank = static_cast<int>(*r);
      }
    }
  }
};

}  // namespace

// "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses, so the fields after it
// are read after its last ')'.
std::optional<ProcStat> parse_proc_stat(const std::string& line) {
  const size_t comm_end = line.rfind(')');
  if (comm_end == std::string::npos) return std::nullopt;
  long pid = 0, parent = 0, group = 0;
  char state = 0;
  if (std::sscanf(line.c_str(), "%ld (", &pid) != 1 || pid <= 0 ||
      std::sscanf(line.c_str() + comm_end + 1, " %c %ld %ld", &state, &parent, &group) != 3)
    return std::nullopt;
  return ProcStat{static_cast<pid_t>(pid), state, static_cast<pid_t>(group)};
}

bool is_stopped_state(char state) { return state == 'T' || state == 't'; }

std::vector<StoppedProcess> stopped_processes() {
  std::vector<StoppedProcess> stopped;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return stopped;
  while (const dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    const auto seen = state_and_group(pid);
    if (seen && is_stopped_state(seen->state)) stopped.push_back({seen->pid, seen->group});
  }
  ::closedir(proc);
  return stopped;
}

std::vector<std::string> job_environ_search(const std::string& job_id) {
  // -mindepth 2 -maxdepth 2: /proc/PID/environ, not the threads' under /proc/PID/task.
  return {
      "find",  "/proc",     "-mindepth", "2",  "-maxdepth", "2",  "-name", "environ",
      "-exec", "grep",      "-s",        "-z", "-H",        "-F", "-e",    "TPF_JOB_ID=" + job_id,
      "-e",    "TPF_RANK=", "{}",        "+"};
}

std::vector<JobProcess> parse_job_environ_search(std::string_view printed,
                                                 std::string_view job_id) {
  std::map<pid_t, JobEntries> seen;
  constexpr std::string_view kProc = "/proc/", kEnviron = "/environ:";
  for_each_record(printed, [&](std::string_view record) {
    // "/proc/PID/environ:ENTRY"; /proc/self and the like are the search's own processes.
    if (record.substr(0, kProc.size()) != kProc) return;
    const std::string_view rest = record.substr(kProc.size());
    const size_t pid_end = rest.find('/');
    if (pid_end == std::string_view::npos) return;
    const std::optional<long> pid = small_number(rest.substr(0, pid_end));
    if (!pid || *pid <= 0 || rest.substr(pid_end, kEnviron.size()) != kEnviron) return;
    seen[static_cast<pid_t>(*pid)].take(rest.substr(pid_end + kEnviron.size()), job_id);
  });
  std::vector<JobProcess> out;
  for (const auto& [pid, entries] : seen) {
    if (entries.in_job) out.push_back({pid, entries.rank});
  }
  return out;
}

std::vector<JobProcess> local_job_processes(std::string_view job_id) {
  std::vector<JobProcess> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (const dirent* entry = ::readdir(proc)) {
    const std::optional<long> pid = small_number(entry->d_name);
    if (!pid || *pid <= 0) continue;
    const std::string path = "/proc/" + std::to_string(*pid) + "/environ";
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // gone, or another user's
    std::string environ_text;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) environ_text.append(buf, size_t(n));
    ::close(fd);
    JobEntries entries;
    for_each_record(environ_text, [&](std::string_view entry) { entries.take(entry, job_id); });
    if (!entries.in_job) continue;
    const std::optional<ProcStat> stat = state_and_group(*pid);
    out.push_back({static_cast<pid_t>(*pid), entries.rank, stat ? stat->group : 0});
  }
  ::closedir(proc);
  return out;
}

std::string leftovers_line(const std::string& where, std::vector<JobProcess> left) {
  std::sort(left.begin(), left.end(), [](const JobProcess& a, const JobProcess& b) {
    return std::tie(a.rank, a.pid) < std::tie(b.rank, b.pid);
  });
  std::string list;
  for (const JobProcess& p : left) {
    if (!list.empty()) list += ", ";
    list += "pid " + std::to_string(p.pid);
    if (p.rank >= 0) list += " (rank " + std::to_string(p.rank) + ")";
  }
  return "killing " + std::to_string(left.size()) + (left.size() == 1 ? " process" : " processes") +
         " the job left running " + where + " after its ranks ended: " + list;
}

bool is_stopped(pid_t pid) {
  const auto seen = state_and_group(pid);
  return seen && is_stopped_state(seen->state);
}

std::optional<std::string> resolve_program(const std::string& program, std::string* error) {
  auto usable = [](const std::string& path, int* err) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      *err = errno;
      return false;
    }
    if (S_ISDIR(st.st_mode)) {
      *err = EISDIR;
      return false;
    }
    if (::access(path.c_str(), X_OK) != 0) {
      *err = errno;
      return false;
    }
    return true;
  };
  int err = 0;
  if (program.empty()) {
    *error = "the program name is empty";
    return std::nullopt;
  }
  if (program.find('/') != std::string::npos) {
    if (usable(program, &err)) return program;
    *error = "cannot run '" + program + "': " + std::strerror(err);
    return std::nullopt;
  }
  const char* path_env = std::getenv("PATH");
  std::string search = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= search.size()) {
    size_t end = search.find(':', start);
    if (end == std::string::npos) end = search.size();
    std::string dir = search.substr(start, end - start);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (usable(candidate, &err)) return candidate;
    start = end + 1;
  }
  *error = "cannot find program '" + program + "' in PATH (" + search + ")";
  return std::nullopt;
}

void remove_job_shm_segments(const std::string& job_id) {
  std::string prefix = "tpf-" + std::to_string(::getuid()) + "-" + job_id + "-";
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  int removed = 0;
  while (dirent* entry = ::readdir(dir)) {
    if (std::strncmp(entry->d_name, prefix.c_str(), prefix.size()) != 0) continue;
    if (::unlinkat(::dirfd(dir), entry->d_name, 0) == 0) ++removed;
  }
  ::closedir(dir);
  if (removed > 0) {
    report("removed " + std::to_string(removed) + " leftover shared-memory segment(s) /dev/shm/" +
           prefix + "*");
  }
}

}  // namespace tpf::cli
