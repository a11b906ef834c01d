// Small process and file-descriptor helpers of the launcher (`tpf run`).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tpf::cli {

// Owns one file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.release();
    }
    return *this;
  }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

struct Pipe {
  Fd read;
  Fd write;
};

// A pipe whose ends both close on exec; throws Error(resource) naming `what` on failure.
Pipe make_pipe(const char* what);

// Writes "tpf run: <line>\n" to stderr in one write() (no stdio buffer to interleave with).
void report(const std::string& line);

// `bytes` random bytes from getrandom(), as lowercase hex.
std::string random_hex(size_t bytes);

// "SIGKILL (9)".
std::string signal_name(int sig);

// The fields of one line of /proc/PID/stat that the launcher reads.
struct ProcStat {
  pid_t pid = 0;
  char state = 0;  // R, S, D, T, t, Z, ...
  pid_t group = 0;
};
// nullopt where `line` is not such a line.
std::optional<ProcStat> parse_proc_stat(const std::string& line);
// T (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU) or t (stopped by a debugger).
bool is_stopped_state(char state);

// A process of this machine that is stopped (state T: SIGSTOP, SIGTSTP, SIGTTIN or SIGTTOU; t:
// stopped by a debugger), from /proc. It acts on no signal but SIGKILL and SIGCONT.
struct StoppedProcess {
  pid_t pid = 0;
  pid_t group = 0;  // its process group
};
// Every stopped process (one pass over /proc; empty where it cannot be read).
std::vector<StoppedProcess> stopped_processes();
// Whether `pid` is stopped (false where it is gone).
bool is_stopped(pid_t pid);

// A process that carries a job's id in its environment: TPF_JOB_ID, which tpf run gives each rank
// and which whatever a rank starts inherits, so it finds them all, flight recorder or not, before
// a rank has made a communicator as after.
struct JobProcess {
  pid_t pid = 0;
  int rank = -1;    // its TPF_RANK; -1 where it has none
  pid_t group = 0;  // its process group, where read (local_job_processes)
};
// The command that prints, for each process whose environment it may read, its entries
// TPF_JOB_ID=... and TPF_RANK=... as grep prints them ("/proc/PID/environ:ENTRY", each ended by a
// NUL). find and grep, no shell: it runs alike under ssh, whose remote shell parses the words
// again, and under a remote shell that executes them as given (ip netns exec). Its exit code
// says little: find's is 1 where a process ended while it looked, or an environment could not
// be read (another user's).
std::vector<std::string> job_environ_search(const std::string& job_id);
// The processes of job `job_id` in what that command printed, by pid.
std::vector<JobProcess> parse_job_environ_search(std::string_view printed, std::string_view job_id);
// The processes of job `job_id` on this machine, with their process groups: the same reading
// as the search's, made here (/proc/PID/environ) without a command.
std::vector<JobProcess> local_job_processes(std::string_view job_id);
// "killing 2 processes the job left running WHERE after its ranks ended: pid 4242 (rank 1), pid
// 4250 (rank 2)", by rank then pid: what the launcher says of them, on every host alike.
std::string leftovers_line(const std::string& where, std::vector<JobProcess> left);

// Path of the program execve() will run: `program` itself if it contains a '/', else the first
// executable match in $PATH. nullopt (and *error set) when there is none.
std::optional<std::string> resolve_program(const std::string& program, std::string* error);

// Unlinks /dev/shm/tpf-<uid>-<job_id>-* and reports how many there were. The fabric unlinks its
// segments as soon as every rank has mapped them; this only catches what a rank killed during
// setup left behind.
void remove_job_shm_segments(const std::string& job_id);

}  // namespace tpf::cli
