#include "cli/process_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
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
