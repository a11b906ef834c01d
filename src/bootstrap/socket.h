// Small TCP helpers for the bootstrap: an owning socket, listen, connect-with-retry and deadline-
// bounded send/recv. Sockets are non-blocking; every wait goes through poll() with a deadline so a
// dead or silent peer can never hang a rank.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tpf::bootstrap {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// now + timeout, clamped so that huge timeouts (milliseconds::max()) cannot overflow the clock.
Deadline deadline_after(std::chrono::milliseconds timeout);
// Milliseconds left until deadline, >= 0, clamped to int for poll().
int poll_timeout_ms(Deadline deadline);

// "host:port", with IPv6 literals bracketed, for messages.
std::string host_port(const std::string& host, uint16_t port);

// Owns one file descriptor and closes it exactly once.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) noexcept : fd_(fd) {}
  ~Socket() { reset(); }
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  int release() noexcept;
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

// A listening, non-blocking socket. port 0 lets the kernel pick; the chosen port is in `port`.
// An empty host or "0.0.0.0" listens on every IPv4 interface. Throws Error(resource) when the
// port is taken and Error(bootstrap) when the host does not resolve.
struct Listener {
  Socket socket;
  uint16_t port = 0;
  bool loopback = false;  // bound to 127.0.0.0/8 or ::1 only: unreachable from other hosts
};
Listener listen_tcp(const std::string& host, uint16_t port, int backlog = 128);

// Accepts one pending connection (non-blocking, TCP_NODELAY, keepalive); returns an invalid Socket
// when none is pending or none could be taken. *error (if given) is then 0 when nothing was pending
// or the pending client had already gone, or the errno that says this process is out of something
// (EMFILE, ENFILE, ENOBUFS, ENOMEM): the connection stays queued and polling the listener again
// would report it at once.
Socket accept_tcp(const Socket& listener, int* error = nullptr);

// Connects to host:port, retrying refused/unreachable attempts with a short backoff until the
// deadline (the server may start after its clients). Returns a non-blocking socket with
// TCP_NODELAY. Throws Error(bootstrap) naming host:port and the last error once time is up.
Socket connect_tcp(const std::string& host, uint16_t port, Deadline deadline);

void set_nonblocking(int fd);
void set_nodelay(int fd);
// TCP keepalive probes, so that a peer whose host vanished (no FIN, no RST) is noticed within
// about half a minute instead of never. Best effort.
void set_keepalive(int fd) noexcept;

enum class IoStatus {
  ok,       // all bytes moved
  closed,   // the peer closed (or reset) the connection
  timeout,  // the deadline passed first
};

// Move exactly n bytes, waiting with poll() while the socket would block; EINTR and partial
// transfers are retried. Other errors throw Error(system). send never raises SIGPIPE.
IoStatus send_all(int fd, const void* data, size_t n, Deadline deadline);
IoStatus recv_all(int fd, void* data, size_t n, Deadline deadline);

}  // namespace tpf::bootstrap
