#include "bootstrap/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include "tpf/error.h"

namespace tpf::bootstrap {

namespace {

// Far enough for any real timeout, near enough that now + it cannot overflow steady_clock.
constexpr std::chrono::hours kMaxTimeout{24 * 365 * 10};

struct AddrInfoDeleter {
  void operator()(addrinfo* ai) const noexcept { freeaddrinfo(ai); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

// Resolves host:port; returns the getaddrinfo error code (0 on success).
int resolve(const std::string& host, uint16_t port, bool passive, AddrInfoPtr* out) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = AF_UNSPEC;
  if (passive) hints.ai_flags = AI_PASSIVE;
  const std::string service = std::to_string(port);
  addrinfo* result = nullptr;
  const int rc =
      getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &result);
  out->reset(result);
  return rc;
}

// Waits for `events` on fd until the deadline; false on timeout.
bool wait_fd(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, poll_timeout_ms(deadline));
    if (rc > 0) return true;
    if (rc == 0) {
      if (Clock::now() >= deadline) return false;
      continue;  // poll's timeout was clamped; keep waiting
    }
    if (errno != EINTR) throw_system_error(ErrorCode::system, "poll on socket", errno);
  }
}

// One non-blocking connect attempt. Returns 0 and fills *out on success, else the errno.
int try_connect(const addrinfo* ai, Deadline deadline, Socket* out) {
  Socket s(
      ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
  if (!s.valid()) return errno;
  int rc;
  do {
    rc = ::connect(s.fd(), ai->ai_addr, ai->ai_addrlen);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    if (errno != EINPROGRESS) return errno;
    if (!wait_fd(s.fd(), POLLOUT, deadline)) return ETIMEDOUT;
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
    if (err != 0) return err;
  }
  set_nodelay(s.fd());
  set_keepalive(s.fd());
  *out = std::move(s);
  return 0;
}

}  // namespace

Deadline deadline_after(std::chrono::milliseconds timeout) {
  if (timeout < std::chrono::milliseconds::zero()) timeout = std::chrono::milliseconds::zero();
  if (timeout > kMaxTimeout) timeout = kMaxTimeout;
  return Clock::now() + timeout;
}

int poll_timeout_ms(Deadline deadline) {
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  // Round up so that we never wake just before the deadline and spin.
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

std::string host_port(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

int Socket::release() noexcept {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void Socket::reset(int fd) noexcept {
  // close() is not retried on EINTR: on Linux the descriptor is gone either way.
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    throw_system_error(ErrorCode::system, "fcntl(O_NONBLOCK) on socket", errno);
  }
}

void set_nodelay(int fd) {
  // Store requests are tiny request/response pairs; Nagle would add delay to each.
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    throw_system_error(ErrorCode::system, "setsockopt(TCP_NODELAY)", errno);
  }
}

void set_keepalive(int fd) noexcept {
  const int one = 1, idle_s = 15, interval_s = 5, probes = 3;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
}

namespace {

bool is_loopback(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) return in6->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

}  // namespace

Listener listen_tcp(const std::string& host, uint16_t port, int backlog) {
  const bool any = host.empty() || host == "0.0.0.0";
  AddrInfoPtr addrs;
  // For "any" we ask for IPv4 explicitly so that clients dialing 127.0.0.1 always reach us.
  std::string lookup = any ? "0.0.0.0" : host;
  if (const int rc = resolve(lookup, port, true, &addrs); rc != 0) {
    throw Error(ErrorCode::bootstrap, "listen on " + host_port(host, port) +
                                          ": cannot resolve host: " + gai_strerror(rc));
  }
  int last_err = EADDRNOTAVAIL;
  for (const addrinfo* ai = addrs.get(); ai != nullptr; ai = ai->ai_next) {
    Socket s(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!s.valid()) {
      last_err = errno;
      continue;
    }
    // Lets a restarted job rebind its fixed port while old connections sit in TIME_WAIT.
    const int one = 1;
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(s.fd(), backlog) != 0) {
      last_err = errno;
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    if (::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
      throw_system_error(ErrorCode::system, "getsockname on listening socket", errno);
    }
    uint16_t bound_port = 0;
    if (bound.ss_family == AF_INET) {
      bound_port = ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
    } else if (bound.ss_family == AF_INET6) {
      bound_port = ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port);
    }
    return Listener{std::move(s), bound_port, is_loopback(bound)};
  }
  const ErrorCode code = last_err == EADDRINUSE ? ErrorCode::resource : ErrorCode::bootstrap;
  throw_system_error(
      code, "listen on " + host_port(host, port) + " (pick another port, or port 0 for a free one)",
      last_err);
}

Socket accept_tcp(const Socket& listener, int* error) {
  if (error != nullptr) *error = 0;
  for (;;) {
    const int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      Socket s(fd);
      set_nodelay(fd);
      set_keepalive(fd);
      return s;
    }
    if (errno == EINTR) continue;
    // A client that connected and reset before we accepted it is not our problem.
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED || errno == EPROTO) {
      return Socket();
    }
    // Out of descriptors or memory: the caller decides how to make room (see the store server).
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      if (error != nullptr) *error = errno;
      return Socket();
    }
    throw_system_error(ErrorCode::system, "accept on store socket", errno);
  }
}

Socket connect_tcp(const std::string& host, uint16_t port, Deadline deadline) {
  const auto start = Clock::now();
  std::chrono::milliseconds backoff{5};
  std::string last_error = "no attempt made";
  for (;;) {
    AddrInfoPtr addrs;
    const int rc = resolve(host, port, false, &addrs);
    if (rc == 0) {
      for (const addrinfo* ai = addrs.get(); ai != nullptr; ai = ai->ai_next) {
        Socket s;
        const int err = try_connect(ai, deadline, &s);
        if (err == 0) return s;
        last_error = std::strerror(err);
      }
    } else if (rc == EAI_AGAIN) {
      last_error = gai_strerror(rc);  // transient resolver trouble: retry
    } else {
      throw Error(ErrorCode::bootstrap, "connect to " + host_port(host, port) +
                                            ": cannot resolve host: " + gai_strerror(rc) +
                                            " (check the store address)");
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    // Backoff between refused attempts: the server is usually just not listening yet.
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
  const auto waited =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  throw Error(ErrorCode::bootstrap, "connect to " + host_port(host, port) + " failed within " +
                                        std::to_string(waited) + " ms: " + last_error +
                                        " (is the store server running and reachable?)");
}

IoStatus send_all(int fd, const void* data, size_t n, Deadline deadline) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t rc = ::send(fd, p, n, MSG_NOSIGNAL);
    if (rc > 0) {
      p += rc;
      n -= static_cast<size_t>(rc);
      continue;
    }
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd, POLLOUT, deadline)) return IoStatus::timeout;
      continue;
    }
    if (rc < 0 && (errno == EPIPE || errno == ECONNRESET)) return IoStatus::closed;
    throw_system_error(ErrorCode::system, "send on socket", errno);
  }
  return IoStatus::ok;
}

IoStatus recv_all(int fd, void* data, size_t n, Deadline deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t rc = ::recv(fd, p, n, 0);
    if (rc > 0) {
      p += rc;
      n -= static_cast<size_t>(rc);
      continue;
    }
    if (rc == 0) return IoStatus::closed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_fd(fd, POLLIN, deadline)) return IoStatus::timeout;
      continue;
    }
    if (errno == ECONNRESET) return IoStatus::closed;
    throw_system_error(ErrorCode::system, "recv on socket", errno);
  }
  return IoStatus::ok;
}

}  // namespace tpf::bootstrap
