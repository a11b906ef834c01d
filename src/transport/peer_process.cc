#include "transport/peer_process.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>
#include <utility>

namespace tpf::transport {

PeerProcess::PeerProcess(pid_t pid) : pid_(pid) {
#ifdef SYS_pidfd_open
  pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#endif
}

PeerProcess::PeerProcess(PeerProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, 0)), pidfd_(std::exchange(other.pidfd_, -1)) {}

PeerProcess& PeerProcess::operator=(PeerProcess&& other) noexcept {
  if (this != &other) {
    if (pidfd_ >= 0) ::close(pidfd_);
    pid_ = std::exchange(other.pid_, 0);
    pidfd_ = std::exchange(other.pidfd_, -1);
  }
  return *this;
}

PeerProcess::~PeerProcess() {
  if (pidfd_ >= 0) ::close(pidfd_);
}

bool PeerProcess::alive() const {
  if (pid_ <= 0) return true;  // unknown peer: rely on deadlines
  if (pidfd_ >= 0) {
    pollfd entry{pidfd_, POLLIN, 0};
    int ready;
    do {
      ready = ::poll(&entry, 1, 0);
    } while (ready < 0 && errno == EINTR);  // a signal (the flight recorder's) is not a death
    return !(ready > 0 && (entry.revents & POLLIN));  // readable means the process has exited
  }
  // No pidfd (old kernel): the best we can do; misses unreaped zombies.
  return ::kill(pid_, 0) == 0 || errno == EPERM;
}

bool PeerProcess::stopped() const {
  if (pid_ <= 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid_) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  // "pid (command) S ...": the command may hold spaces and parentheses, the state follows the
  // last ')'. 'T': stopped by a signal; 't': stopped by its tracer.
  const size_t end_of_command = line.rfind(')');
  if (end_of_command == std::string::npos || end_of_command + 2 >= line.size()) return false;
  const char state = line[end_of_command + 2];
  return state == 'T' || state == 't';
}

}  // namespace tpf::transport
