// Knows whether a peer process (same machine) is still alive, through a pidfd: unlike kill(pid, 0)
// it notices a process that died but was not reaped yet, and it cannot be fooled by PID reuse.
#pragma once

#include <string>
#include <sys/types.h>

namespace tpf::transport {

class PeerProcess {
 public:
  PeerProcess() = default;
  explicit PeerProcess(pid_t pid);
  PeerProcess(PeerProcess&& other) noexcept;
  PeerProcess& operator=(PeerProcess&& other) noexcept;
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;
  ~PeerProcess();

  pid_t pid() const noexcept { return pid_; }
  // False once the process has exited (for any reason). Never blocks.
  bool alive() const;
  // True while the process is stopped: by a stop signal (SIGSTOP, SIGTSTP, ...) or by a tracer (a
  // debugger holding it). Reads /proc/<pid>/stat; false for an unknown peer or where that cannot
  // be read (the process has just exited: alive() says so).
  bool stopped() const;

 private:
  pid_t pid_ = 0;
  int pidfd_ = -1;
};

}  // namespace tpf::transport
