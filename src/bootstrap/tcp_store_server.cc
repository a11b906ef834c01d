// The TCP store server: one background thread multiplexes the listening socket, a shutdown
// eventfd and every client with poll(). All sockets are non-blocking and all state belongs to that
// thread, so a client that stalls, disconnects or sends garbage can only lose its own connection.

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bootstrap/socket.h"
#include "bootstrap/store_protocol.h"
#include "tpf/error.h"
#include "tpf/store.h"

namespace tpf {

namespace {

using bootstrap::Clock;
using bootstrap::Deadline;
using bootstrap::Socket;
namespace proto = bootstrap::store_protocol;

// Compares in time that depends only on the expected secret's length, so that response timing
// does not reveal how many leading bytes of a guess were right.
bool secrets_equal(const std::string& expected, const std::string& presented) {
  unsigned diff = expected.size() == presented.size() ? 0u : 1u;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char p = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0;
    diff |= static_cast<unsigned char>(expected[i]) ^ p;
  }
  return diff == 0;
}

// Read granularity; also bounds how much one client can make us buffer beyond a parked request.
constexpr size_t kReadChunk = size_t{256} << 10;
constexpr size_t kMaxHelloBytes = size_t{64} << 10;

struct Connection {
  Socket socket;
  std::string in;  // received bytes; [in_pos, end) not yet consumed
  size_t in_pos = 0;
  std::string out;  // bytes still to send; [out_pos, end)
  size_t out_pos = 0;
  bool authed = false;
  bool closing = false;  // send what is queued, then close
  bool dead = false;     // close at the end of this round
  bool parked = false;   // a GET waits for its key; later frames wait in `in`
  std::string parked_key;
};

struct Waiter {
  uint64_t conn_id;
  Deadline deadline;
};

}  // namespace

struct TcpStoreServer::Impl {
  std::string secret;
  bootstrap::Listener listener;
  Socket wake_fd;  // eventfd: the destructor writes it to stop the thread
  std::thread thread;

  // Everything below is touched only by the server thread.
  std::unordered_map<uint64_t, Connection> conns;
  uint64_t next_conn_id = 1;
  std::unordered_map<std::string, std::string> data;
  std::unordered_map<std::string, std::vector<Waiter>> waiters;
  std::vector<uint64_t> runnable;  // unparked connections that may hold pipelined frames

  void run();
  void serve();
  void accept_all();
  void read_from(uint64_t id, Connection& c);
  void process_input(uint64_t id, Connection& c);
  void handle_request(uint64_t id, Connection& c, std::string_view payload);
  void respond(Connection& c, const std::string& payload);
  void flush(Connection& c);
  void fail(Connection& c, const std::string& message);
  void wake_waiters(const std::string& key);
  void expire_waiters();
  void drop_waiter(uint64_t id, const std::string& key);
  int poll_timeout() const;
};

void TcpStoreServer::Impl::run() {
  try {
    serve();
  } catch (const std::exception& e) {
    // Nothing can catch from here; clients see their connections close and report it.
    std::fprintf(stderr, "tpf: store server on port %u stopped: %s\n", listener.port, e.what());
  }
}

void TcpStoreServer::Impl::serve() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;  // ids[i] is the connection of fds[i + 2]
  for (;;) {
    fds.clear();
    ids.clear();
    fds.push_back({wake_fd.fd(), POLLIN, 0});
    fds.push_back({listener.socket.fd(), POLLIN, 0});
    for (auto& [id, c] : conns) {
      short events = 0;
      if (c.out_pos < c.out.size()) events |= POLLOUT;
      // A parked connection is not read (its next frame must wait for the answer), but we still
      // want to hear that the peer went away so its parked GET does not linger.
      if (!c.closing) events |= c.parked ? POLLRDHUP : (POLLIN | POLLRDHUP);
      fds.push_back({c.socket.fd(), events, 0});
      ids.push_back(id);
    }
    const int rc = ::poll(fds.data(), fds.size(), poll_timeout());
    if (rc < 0) {
      if (errno == EINTR) continue;
      throw_system_error(ErrorCode::system, "poll in store server", errno);
    }
    if (fds[0].revents != 0) return;  // shutdown requested
    if (fds[1].revents != 0) accept_all();
    for (size_t i = 0; i < ids.size(); ++i) {
      const short rev = fds[i + 2].revents;
      if (rev == 0) continue;
      auto it = conns.find(ids[i]);
      if (it == conns.end()) continue;
      Connection& c = it->second;
      if (c.dead) continue;
      if (rev & POLLOUT) flush(c);
      if (!c.dead && (rev & POLLIN)) read_from(ids[i], c);
      // Only treat hang-up as fatal when there is nothing left to read; a client may send its
      // last frame and close right away.
      if (!c.dead && (rev & (POLLERR | POLLHUP | POLLNVAL))) c.dead = true;
      if (!c.dead && c.parked && (rev & POLLRDHUP)) c.dead = true;
    }
    while (!runnable.empty()) {
      const uint64_t id = runnable.back();
      runnable.pop_back();
      auto it = conns.find(id);
      if (it != conns.end() && !it->second.dead) process_input(id, it->second);
    }
    expire_waiters();
    for (auto it = conns.begin(); it != conns.end();) {
      if (it->second.dead) {
        if (it->second.parked) drop_waiter(it->first, it->second.parked_key);
        it = conns.erase(it);
      } else {
        ++it;
      }
    }
  }
}

int TcpStoreServer::Impl::poll_timeout() const {
  if (!runnable.empty()) return 0;
  bool any = false;
  Deadline earliest{};
  for (const auto& [key, list] : waiters) {
    for (const Waiter& w : list) {
      if (!any || w.deadline < earliest) earliest = w.deadline;
      any = true;
    }
  }
  return any ? bootstrap::poll_timeout_ms(earliest) : -1;
}

void TcpStoreServer::Impl::accept_all() {
  // Bounded per round so that a connection storm cannot starve the clients already connected.
  for (int i = 0; i < 256; ++i) {
    Socket s = bootstrap::accept_tcp(listener.socket);
    if (!s.valid()) return;
    Connection c;
    c.socket = std::move(s);
    conns.emplace(next_conn_id++, std::move(c));
  }
}

void TcpStoreServer::Impl::read_from(uint64_t id, Connection& c) {
  const size_t old = c.in.size();
  c.in.resize(old + kReadChunk);
  ssize_t n;
  do {
    n = ::recv(c.socket.fd(), c.in.data() + old, kReadChunk, 0);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    c.in.resize(old);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    c.dead = true;  // orderly close, reset or any other error: this client is gone
    return;
  }
  c.in.resize(old + static_cast<size_t>(n));
  process_input(id, c);
}

void TcpStoreServer::Impl::process_input(uint64_t id, Connection& c) {
  while (!c.parked && !c.closing && !c.dead) {
    const size_t avail = c.in.size() - c.in_pos;
    if (avail < proto::kFrameHeaderBytes) break;
    const uint32_t len = proto::decode_u32(c.in.data() + c.in_pos);
    // Before the hello only a small frame is accepted, so a stranger cannot make us buffer much.
    const size_t limit = c.authed ? proto::kMaxFrameBytes : kMaxHelloBytes;
    if (len > limit) {
      fail(c, "store: frame of " + std::to_string(len) + " bytes exceeds the limit of " +
                  std::to_string(limit) + " bytes");
      break;
    }
    if (avail < proto::kFrameHeaderBytes + len) break;
    const std::string_view payload(c.in.data() + c.in_pos + proto::kFrameHeaderBytes, len);
    c.in_pos += proto::kFrameHeaderBytes + len;
    handle_request(id, c, payload);
  }
  // Compact so that consumed frames do not accumulate.
  if (c.in_pos == c.in.size()) {
    c.in.clear();
    c.in_pos = 0;
  } else if (c.in_pos > kReadChunk) {
    c.in.erase(0, c.in_pos);
    c.in_pos = 0;
  }
}

void TcpStoreServer::Impl::handle_request(uint64_t id, Connection& c, std::string_view payload) {
  proto::Reader r(payload);
  const auto op = r.u8();
  if (!op) return fail(c, "store: empty request frame");
  const auto ok_payload = [] {
    std::string p;
    proto::put_u8(p, static_cast<uint8_t>(proto::Status::ok));
    return p;
  };

  if (!c.authed) {
    if (*op != static_cast<uint8_t>(proto::Op::hello)) {
      return fail(c, "store: the first request must be a hello (is this a tpfabric client?)");
    }
    const auto magic = r.u32();
    const auto presented = r.str();
    if (!magic || *magic != proto::kProtocolMagic || !presented || !r.at_end()) {
      return fail(c, "store: malformed hello (protocol version mismatch?)");
    }
    if (!secret.empty() && !secrets_equal(secret, *presented)) {
      std::string p;
      proto::put_u8(p, static_cast<uint8_t>(proto::Status::auth_failed));
      proto::put_str(p, "wrong job secret");
      respond(c, p);
      c.closing = true;
      if (c.out_pos == c.out.size()) c.dead = true;
      return;
    }
    c.authed = true;
    return respond(c, ok_payload());
  }

  const auto key = r.str();
  if (!key) return fail(c, "store: request without a key");
  switch (static_cast<proto::Op>(*op)) {
    case proto::Op::set: {
      auto value = r.str();
      if (!value || !r.at_end()) return fail(c, "store: malformed set request");
      data[*key] = std::move(*value);
      respond(c, ok_payload());
      return wake_waiters(*key);
    }
    case proto::Op::get: {
      const auto timeout_ms = r.i64();
      if (!timeout_ms || !r.at_end()) return fail(c, "store: malformed get request");
      if (auto it = data.find(*key); it != data.end()) {
        std::string p = ok_payload();
        proto::put_str(p, it->second);
        return respond(c, p);
      }
      if (*timeout_ms <= 0) {
        std::string p;
        proto::put_u8(p, static_cast<uint8_t>(proto::Status::not_found));
        return respond(c, p);
      }
      c.parked = true;
      c.parked_key = *key;
      waiters[*key].push_back(
          {id, bootstrap::deadline_after(std::chrono::milliseconds(*timeout_ms))});
      return;
    }
    case proto::Op::add: {
      const auto delta = r.i64();
      if (!delta || !r.at_end()) return fail(c, "store: malformed add request");
      int64_t current = 0;
      std::string& slot = data[*key];
      if (!slot.empty()) {
        const auto [end, ec] = std::from_chars(slot.data(), slot.data() + slot.size(), current);
        if (ec != std::errc() || end != slot.data() + slot.size()) {
          std::string p;
          proto::put_u8(p, static_cast<uint8_t>(proto::Status::error));
          proto::put_str(p, "store add: key '" + *key +
                                "' holds a value that is not an integer; use a separate key for "
                                "counters");
          return respond(c, p);
        }
      }
      int64_t next = 0;
      if (__builtin_add_overflow(current, *delta, &next)) {
        std::string p;
        proto::put_u8(p, static_cast<uint8_t>(proto::Status::error));
        proto::put_str(p, "store add: key '" + *key + "' would overflow int64");
        return respond(c, p);
      }
      slot = std::to_string(next);
      std::string p = ok_payload();
      proto::put_i64(p, next);
      respond(c, p);
      return wake_waiters(*key);
    }
    case proto::Op::check: {
      if (!r.at_end()) return fail(c, "store: malformed check request");
      std::string p = ok_payload();
      proto::put_u8(p, data.count(*key) ? 1 : 0);
      return respond(c, p);
    }
    case proto::Op::hello: return fail(c, "store: duplicate hello");
  }
  fail(c, "store: unknown request op " + std::to_string(*op));
}

void TcpStoreServer::Impl::respond(Connection& c, const std::string& payload) {
  const size_t at = proto::begin_frame(c.out);
  c.out.append(payload);
  proto::finish_frame(c.out, at);
  flush(c);
}

void TcpStoreServer::Impl::flush(Connection& c) {
  while (c.out_pos < c.out.size()) {
    const ssize_t n =
        ::send(c.socket.fd(), c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_pos += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // POLLOUT resumes
    c.dead = true;
    return;
  }
  c.out.clear();
  c.out_pos = 0;
  if (c.closing) c.dead = true;
}

void TcpStoreServer::Impl::fail(Connection& c, const std::string& message) {
  std::string p;
  proto::put_u8(p, static_cast<uint8_t>(proto::Status::error));
  proto::put_str(p, message);
  c.closing = true;  // the stream is out of sync; nothing after this frame can be trusted
  respond(c, p);
}

void TcpStoreServer::Impl::wake_waiters(const std::string& key) {
  auto it = waiters.find(key);
  if (it == waiters.end()) return;
  std::vector<Waiter> list = std::move(it->second);
  waiters.erase(it);
  const std::string& value = data[key];
  for (const Waiter& w : list) {
    auto cit = conns.find(w.conn_id);
    if (cit == conns.end() || cit->second.dead || !cit->second.parked) continue;
    Connection& c = cit->second;
    c.parked = false;
    c.parked_key.clear();
    std::string p;
    proto::put_u8(p, static_cast<uint8_t>(proto::Status::ok));
    proto::put_str(p, value);
    respond(c, p);
    runnable.push_back(w.conn_id);
  }
}

void TcpStoreServer::Impl::expire_waiters() {
  const Deadline now = Clock::now();
  for (auto it = waiters.begin(); it != waiters.end();) {
    auto& list = it->second;
    for (size_t i = 0; i < list.size();) {
      if (list[i].deadline > now) {
        ++i;
        continue;
      }
      auto cit = conns.find(list[i].conn_id);
      if (cit != conns.end() && !cit->second.dead && cit->second.parked) {
        Connection& c = cit->second;
        c.parked = false;
        c.parked_key.clear();
        std::string p;
        proto::put_u8(p, static_cast<uint8_t>(proto::Status::not_found));
        respond(c, p);
        runnable.push_back(list[i].conn_id);
      }
      list[i] = list.back();
      list.pop_back();
    }
    it = list.empty() ? waiters.erase(it) : std::next(it);
  }
}

void TcpStoreServer::Impl::drop_waiter(uint64_t id, const std::string& key) {
  auto it = waiters.find(key);
  if (it == waiters.end()) return;
  auto& list = it->second;
  list.erase(
      std::remove_if(list.begin(), list.end(), [id](const Waiter& w) { return w.conn_id == id; }),
      list.end());
  if (list.empty()) waiters.erase(it);
}

TcpStoreServer::TcpStoreServer(const std::string& bind_host, uint16_t port, std::string secret)
    : impl_(std::make_unique<Impl>()) {
  impl_->secret = std::move(secret);
  impl_->listener = bootstrap::listen_tcp(bind_host, port);
  impl_->wake_fd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!impl_->wake_fd.valid()) {
    throw_system_error(ErrorCode::resource, "store server: eventfd", errno);
  }
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

TcpStoreServer::~TcpStoreServer() {
  const uint64_t one = 1;
  ssize_t n;
  do {
    n = ::write(impl_->wake_fd.fd(), &one, sizeof(one));
  } while (n < 0 && errno == EINTR);
  if (impl_->thread.joinable()) impl_->thread.join();
}

uint16_t TcpStoreServer::port() const noexcept { return impl_->listener.port; }

}  // namespace tpf
