// The TCP store client: one socket, one request in flight at a time (a mutex serializes callers).
// Any transport failure drops the socket so that a late reply can never be read as the answer to
// a later request; the next call reconnects. Every deliberate close says goodbye first, so that
// the server does not take this rank for dead; only a process that dies closes without one.
// A lost report goes over a connection of its own (TcpStoreClient::report_lost), and so do the
// beats keep_alive asks for (Beats).

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <thread>

#include "bootstrap/socket.h"
#include "bootstrap/store_protocol.h"
#include "tpf/error.h"
#include "tpf/store.h"

namespace tpf {

namespace {

using bootstrap::Clock;
using bootstrap::Deadline;
using bootstrap::IoStatus;
using bootstrap::Socket;
namespace proto = bootstrap::store_protocol;

// How long past its own timeout we wait for the server to answer: a live server answers a GET at
// its deadline, so only a hung server or a dead network uses this up.
constexpr std::chrono::seconds kReplyGrace{30};
// A server that accepted the connection answers the hello at once; this bounds a wrong address
// that points at some other service which never replies.
constexpr std::chrono::seconds kHelloReplyTimeout{10};

}  // namespace

struct TcpStoreClient::Impl {
  std::string host;
  uint16_t port = 0;
  std::string secret;
  std::chrono::milliseconds connect_timeout{0};
  // How long the hello's reply may take past the connect deadline.
  std::chrono::milliseconds hello_reply_timeout = kHelloReplyTimeout;
  int job_rank = -1;
  std::mutex mutex;
  Socket socket;
  // Told by the server in its hello reply: the job rank (and pid) whose process serves the store.
  int host_rank = -1;
  int64_t host_pid = 0;
  // Set once the store's host rank is known dead: later calls fail the same way at once instead
  // of retrying to connect for connect_timeout.
  std::optional<std::string> host_died;

  // Started at the first keep_alive (Beats, below).
  class Beats;
  std::mutex beats_mutex;
  std::shared_ptr<Beats> beats;

  std::string where() const { return "store at " + bootstrap::host_port(host, port); }
  // A connection like this one's (same store, secret and rank), not connected yet.
  std::unique_ptr<Impl> sibling(int rank) const;

  void connect();
  // Best-effort goodbye, then close: the server then knows this was not a death.
  void drop() noexcept;
  // Sends one request and returns the reply payload; `what` names the operation for errors.
  std::string exchange(const std::string& payload, Deadline deadline, const std::string& what);
  [[noreturn]] void fail_transport(IoStatus status, const std::string& what);
};

std::unique_ptr<TcpStoreClient::Impl> TcpStoreClient::Impl::sibling(int rank) const {
  auto side = std::make_unique<Impl>();
  side->host = host;
  side->port = port;
  side->secret = secret;
  side->connect_timeout = connect_timeout;
  side->job_rank = rank;
  return side;
}

// The beats of Store::keep_alive, on a connection of their own: the calls' connection may be held
// for seconds by a get that waits (a rendezvous with a late rank), and a beat held behind it would
// make a healthy rank look stopped. The first token's beat and the last one's end (a beat of limit
// 0: the server stops judging) are sent by the caller, so that the store judges this rank exactly
// while a token lives; between them a thread sends one every tenth of the tightest limit asked.
// The beats are one-way (the server never answers them). A send that fails ends the beats (the
// store's failures are the calls' to report); the server then judges the silence, as it would a
// stopped process's.
class TcpStoreClient::Impl::Beats {
 public:
  explicit Beats(std::unique_ptr<Impl> link) : link_(std::move(link)) {
    link_->connect();
    thread_ = std::thread([this] { run(); });
  }
  ~Beats() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
    link_->drop();  // a goodbye: the beats' close is no death
  }
  Beats(const Beats&) = delete;
  Beats& operator=(const Beats&) = delete;

  void hold(std::chrono::milliseconds limit) {
    bool tighter = false;
    {
      std::lock_guard lock(mutex_);
      tighter = limits_.empty() || limit < *limits_.begin();
      limits_.insert(limit);
      if (tighter) send(limit);
    }
    if (tighter) changed_.notify_all();  // the thread beats at the new pace
  }
  // The thread is not woken: at its next beat it finds the limits as they are (none: it waits).
  void release(std::chrono::milliseconds limit) {
    std::lock_guard lock(mutex_);
    limits_.erase(limits_.find(limit));
    send(limits_.empty() ? std::chrono::milliseconds(0) : *limits_.begin());
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      if (limits_.empty()) {
        changed_.wait(lock);
        continue;
      }
      const std::chrono::milliseconds every =
          std::max(*limits_.begin() / 10, std::chrono::milliseconds(1));
      // Woken early by a tighter limit (whose caller beat), or to stop.
      if (changed_.wait_for(lock, every) == std::cv_status::no_timeout) continue;
      if (!limits_.empty()) send(*limits_.begin());
    }
  }

  // mutex_ held.
  void send(std::chrono::milliseconds limit) {
    if (failed_) return;
    std::string frame;
    const size_t at = proto::begin_frame(frame);
    proto::put_u8(frame, static_cast<uint8_t>(proto::Op::beat));
    proto::put_i64(frame, limit.count());
    proto::finish_frame(frame, at);
    const Deadline deadline = Clock::now() + std::max(limit / 10, std::chrono::milliseconds(100));
    failed_ = bootstrap::send_all(link_->socket.fd(), frame.data(), frame.size(), deadline) !=
              IoStatus::ok;
  }

  std::unique_ptr<Impl> link_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::multiset<std::chrono::milliseconds> limits_;
  bool stopping_ = false;
  bool failed_ = false;
  std::thread thread_;
};

void TcpStoreClient::Impl::drop() noexcept {
  if (!socket.valid()) return;
  std::string frame;
  const size_t at = proto::begin_frame(frame);
  proto::put_u8(frame, static_cast<uint8_t>(proto::Op::goodbye));
  proto::finish_frame(frame, at);
  // Non-blocking and not retried: a full send buffer (a hung server) must not hold us up.
  (void)!::send(socket.fd(), frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  socket.reset();
}

void TcpStoreClient::Impl::fail_transport(IoStatus status, const std::string& what) {
  drop();
  if (status == IoStatus::closed && host_rank >= 0) {
    host_died = "job rank " + std::to_string(host_rank) + " (pid " + std::to_string(host_pid) +
                "), which serves the " + where() +
                ", closed the connection: its process exited or was killed";
    throw Error(ErrorCode::peer_died, *host_died + " (during " + what + ")");
  }
  if (status == IoStatus::timeout) {
    throw Error(ErrorCode::timeout, where() + " did not answer " + what +
                                        " in time; is the store's host process (tpf run or rank "
                                        "0) alive and not overloaded?");
  }
  throw Error(ErrorCode::bootstrap, where() + " closed the connection during " + what +
                                        "; did the process hosting the store (tpf run or rank 0) "
                                        "exit?");
}

std::string TcpStoreClient::Impl::exchange(const std::string& payload, Deadline deadline,
                                           const std::string& what) {
  if (host_died) throw Error(ErrorCode::peer_died, *host_died + " (before " + what + ")");
  if (!socket.valid()) connect();
  std::string frame;
  frame.reserve(proto::kFrameHeaderBytes + payload.size());
  const size_t at = proto::begin_frame(frame);
  frame.append(payload);
  proto::finish_frame(frame, at);
  IoStatus st = bootstrap::send_all(socket.fd(), frame.data(), frame.size(), deadline);
  if (st != IoStatus::ok) fail_transport(st, what);
  char header[proto::kFrameHeaderBytes];
  st = bootstrap::recv_all(socket.fd(), header, sizeof(header), deadline);
  if (st != IoStatus::ok) fail_transport(st, what);
  const uint32_t len = proto::decode_u32(header);
  if (len == 0 || len > proto::kMaxFrameBytes) {
    drop();
    throw Error(ErrorCode::bootstrap, where() + " sent a malformed reply (" + std::to_string(len) +
                                          " bytes) to " + what + "; is it a tpfabric store?");
  }
  std::string reply(len, '\0');
  st = bootstrap::recv_all(socket.fd(), reply.data(), len, deadline);
  if (st != IoStatus::ok) fail_transport(st, what);
  return reply;
}

void TcpStoreClient::Impl::connect() {
  const Deadline connect_deadline = bootstrap::deadline_after(connect_timeout);
  socket = bootstrap::connect_tcp(host, port, connect_deadline);
  const std::string hello = proto::hello_payload(secret, job_rank, ::getpid());
  const std::string reply =
      exchange(hello, std::max(connect_deadline, Clock::now() + hello_reply_timeout), "the hello");
  proto::Reader r(reply);
  const auto status = r.u8();
  if (status == static_cast<uint8_t>(proto::Status::ok)) {
    const auto rank = r.u32();
    const auto pid = r.i64();
    if (rank && pid && r.at_end()) {
      host_rank = static_cast<int32_t>(*rank);
      host_pid = *pid;
      return;
    }
  }
  drop();
  if (status == static_cast<uint8_t>(proto::Status::auth_failed)) {
    throw Error(ErrorCode::bootstrap,
                where() + " refused this client: wrong job secret (TPF_JOB_SECRET)");
  }
  const auto message = r.str();
  throw Error(ErrorCode::bootstrap, where() +
                                        " rejected the hello: " + message.value_or("(no message)") +
                                        " (client and server from different tpfabric versions?)");
}

TcpStoreClient::TcpStoreClient(const std::string& host, uint16_t port, const std::string& secret,
                               std::chrono::milliseconds connect_timeout, int job_rank)
    : impl_(std::make_unique<Impl>()) {
  if (port == 0) {
    throw Error(ErrorCode::invalid_argument,
                "TcpStoreClient: port 0 is not a valid store port for host '" + host + "'");
  }
  if (secret.size() > proto::kMaxSecretBytes) {
    throw Error(ErrorCode::invalid_argument,
                "TcpStoreClient: the job secret (TPF_JOB_SECRET) is " +
                    std::to_string(secret.size()) + " bytes; at most " +
                    std::to_string(proto::kMaxSecretBytes) + " are accepted");
  }
  impl_->host = host;
  impl_->port = port;
  impl_->secret = secret;
  impl_->connect_timeout = connect_timeout;
  impl_->job_rank = job_rank < 0 ? -1 : job_rank;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->connect();
}

TcpStoreClient::~TcpStoreClient() {
  {
    std::lock_guard<std::mutex> lock(impl_->beats_mutex);
    impl_->beats.reset();  // the beats end here unless a token still holds them
  }
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->drop();
}

std::shared_ptr<void> TcpStoreClient::keep_alive(std::chrono::milliseconds silence_limit) {
  if (impl_->job_rank < 0 || silence_limit.count() <= 0) return nullptr;  // nobody to judge
  std::shared_ptr<Impl::Beats> beats;
  {
    std::lock_guard<std::mutex> lock(impl_->beats_mutex);
    try {
      if (!impl_->beats)
        impl_->beats = std::make_shared<Impl::Beats>(impl_->sibling(impl_->job_rank));
    } catch (const Error&) {
      // No beats (as from a store that cannot judge silence): the calls report what the store
      // does, and the next keep_alive tries again.
      return nullptr;
    }
    beats = impl_->beats;
  }
  beats->hold(silence_limit);
  // The token keeps the beats (and their thread) while it lives, even past this client.
  return {beats.get(), [beats, silence_limit](void*) { beats->release(silence_limit); }};
}

namespace {

// Request payload: op then key; callers append the rest.
std::string request(proto::Op op, const std::string& key) {
  std::string p;
  proto::put_u8(p, static_cast<uint8_t>(op));
  proto::put_str(p, key);
  return p;
}

void check_size(const std::string& key, size_t value_bytes, const char* op) {
  // Leaves room for the op byte and length fields inside the frame limit.
  if (key.size() + value_bytes + 64 > proto::kMaxFrameBytes) {
    throw Error(ErrorCode::invalid_argument, std::string("store ") + op + ": key and value are " +
                                                 std::to_string(key.size() + value_bytes) +
                                                 " bytes; the store accepts at most " +
                                                 std::to_string(proto::kMaxFrameBytes - 64) +
                                                 " bytes per request");
  }
}

}  // namespace

void TcpStoreClient::set(const std::string& key, const std::string& value) {
  check_size(key, value.size(), "set");
  std::string p = request(proto::Op::set, key);
  proto::put_str(p, value);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const std::string reply =
      impl_->exchange(p, Clock::now() + kReplyGrace, "set of key '" + key + "'");
  proto::Reader r(reply);
  if (r.u8() != static_cast<uint8_t>(proto::Status::ok)) {
    impl_->drop();
    throw Error(ErrorCode::bootstrap, impl_->where() + " refused set of key '" + key +
                                          "': " + r.str().value_or("(no message)"));
  }
}

std::string TcpStoreClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  check_size(key, 0, "get");
  if (timeout < std::chrono::milliseconds::zero()) timeout = std::chrono::milliseconds::zero();
  const Deadline deadline = bootstrap::deadline_after(timeout);
  // Send the remaining time (not the original) so the server's deadline matches ours.
  std::string p = request(proto::Op::get, key);
  proto::put_i64(p, bootstrap::poll_timeout_ms(deadline));
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const std::string reply = impl_->exchange(p, deadline + kReplyGrace, "get of key '" + key + "'");
  proto::Reader r(reply);
  const auto status = r.u8();
  if (status == static_cast<uint8_t>(proto::Status::ok)) {
    if (auto value = r.str()) return std::move(*value);
  } else if (status == static_cast<uint8_t>(proto::Status::not_found)) {
    throw Error(ErrorCode::timeout,
                impl_->where() + ": key '" + key + "' not set within " +
                    std::to_string(timeout.count()) +
                    " ms; a rank may have died or not reached this point yet (check the other "
                    "ranks, or raise the timeout)");
  } else if (status == static_cast<uint8_t>(proto::Status::peer_died)) {
    if (auto message = r.str()) {
      throw Error(ErrorCode::peer_died,
                  *message + " (" + impl_->where() + ", waiting for key '" + key + "')");
    }
  }
  impl_->drop();
  throw Error(ErrorCode::bootstrap, impl_->where() + " sent a malformed reply to get of key '" +
                                        key + "': " + r.str().value_or("(no message)"));
}

std::vector<std::string> TcpStoreClient::get_many(const std::vector<std::string>& keys,
                                                  std::chrono::milliseconds timeout) {
  return get_many_from({}, keys, timeout);
}

std::vector<std::string> TcpStoreClient::get_many_from(const std::vector<int>& awaited_ranks,
                                                       const std::vector<std::string>& keys,
                                                       std::chrono::milliseconds timeout) {
  if (keys.empty()) return {};
  for (int rank : awaited_ranks) {
    if (rank < 0) {
      throw Error(ErrorCode::invalid_argument,
                  "store get_many_from: job rank " + std::to_string(rank) + " is negative");
    }
  }
  size_t key_bytes = 4 * awaited_ranks.size();
  for (const std::string& key : keys) key_bytes += key.size() + 4;
  check_size(keys.front(), key_bytes, "get_many");
  if (timeout < std::chrono::milliseconds::zero()) timeout = std::chrono::milliseconds::zero();
  const Deadline deadline = bootstrap::deadline_after(timeout);
  std::string p;
  if (awaited_ranks.empty()) {  // any rank's death ends the wait
    proto::put_u8(p, static_cast<uint8_t>(proto::Op::get_many));
  } else {
    proto::put_u8(p, static_cast<uint8_t>(proto::Op::get_many_from));
    proto::put_u32(p, static_cast<uint32_t>(awaited_ranks.size()));
    for (int rank : awaited_ranks) proto::put_u32(p, static_cast<uint32_t>(rank));
  }
  proto::put_u32(p, static_cast<uint32_t>(keys.size()));
  for (const std::string& key : keys) proto::put_str(p, key);
  proto::put_i64(p, bootstrap::poll_timeout_ms(deadline));  // the remaining time, as get
  const std::string what = "get of " + std::to_string(keys.size()) + " keys ('" + keys.front() +
                           "'" + (keys.size() > 1 ? " and the rest)" : ")");
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const std::string reply = impl_->exchange(p, deadline + kReplyGrace, what);
  proto::Reader r(reply);
  const auto status = r.u8();
  if (status == static_cast<uint8_t>(proto::Status::ok)) {
    const auto count = r.u32();
    std::vector<std::string> values;
    while (count && values.size() < *count) {
      auto value = r.str();
      if (!value) break;
      values.push_back(std::move(*value));
    }
    if (count && *count == keys.size() && values.size() == keys.size() && r.at_end()) return values;
  } else if (status == static_cast<uint8_t>(proto::Status::not_found)) {
    const std::string missing = r.str().value_or(keys.front());
    throw Error(ErrorCode::timeout,
                impl_->where() + ": key '" + missing + "' (of " + std::to_string(keys.size()) +
                    " asked for together) not set within " + std::to_string(timeout.count()) +
                    " ms; a rank may have died or not reached this point yet (check the other "
                    "ranks, or raise the timeout)");
  } else if (status == static_cast<uint8_t>(proto::Status::peer_died)) {
    if (auto message = r.str()) {
      throw Error(ErrorCode::peer_died, *message + " (" + impl_->where() + ", waiting for " +
                                            std::to_string(keys.size()) + " keys)");
    }
  } else if (status == static_cast<uint8_t>(proto::Status::error)) {
    impl_->drop();  // the server closes the connection after an error
    throw Error(ErrorCode::bootstrap,
                impl_->where() + " refused the " + what + ": " + r.str().value_or("(no message)"));
  }
  impl_->drop();
  throw Error(ErrorCode::bootstrap, impl_->where() + " sent a malformed reply to the " + what);
}

int64_t TcpStoreClient::add(const std::string& key, int64_t delta) {
  check_size(key, 0, "add");
  std::string p = request(proto::Op::add, key);
  proto::put_i64(p, delta);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const std::string reply =
      impl_->exchange(p, Clock::now() + kReplyGrace, "add to key '" + key + "'");
  proto::Reader r(reply);
  const auto status = r.u8();
  if (status == static_cast<uint8_t>(proto::Status::ok)) {
    if (auto value = r.i64()) return *value;
  } else if (status == static_cast<uint8_t>(proto::Status::error)) {
    // A semantic error (not a counter, overflow): the server keeps the connection open.
    throw Error(ErrorCode::invalid_argument,
                impl_->where() + ": " + r.str().value_or("add of key '" + key + "' failed"));
  }
  impl_->drop();
  throw Error(ErrorCode::bootstrap,
              impl_->where() + " sent a malformed reply to add of key '" + key + "'");
}

bool TcpStoreClient::check(const std::string& key) {
  check_size(key, 0, "check");
  const std::string p = request(proto::Op::check, key);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const std::string reply =
      impl_->exchange(p, Clock::now() + kReplyGrace, "check of key '" + key + "'");
  proto::Reader r(reply);
  if (r.u8() == static_cast<uint8_t>(proto::Status::ok)) {
    if (auto exists = r.u8()) return *exists != 0;
  }
  impl_->drop();
  throw Error(ErrorCode::bootstrap, impl_->where() + " sent a malformed reply to check of key '" +
                                        key + "': " + r.str().value_or("(no message)"));
}

std::vector<int> TcpStoreClient::dead_ranks() {
  std::string p;
  proto::put_u8(p, static_cast<uint8_t>(proto::Op::dead));
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const std::string reply =
      impl_->exchange(p, Clock::now() + kReplyGrace, "question of which ranks died");
  proto::Reader r(reply);
  if (r.u8() == static_cast<uint8_t>(proto::Status::ok)) {
    if (const auto count = r.u32()) {
      std::vector<int> ranks;  // not reserved from `count`: the frame bounds it, not a peer
      for (uint32_t i = 0; i < *count; ++i) {
        const auto rank = r.u32();
        if (!rank) break;
        ranks.push_back(static_cast<int32_t>(*rank));
      }
      if (ranks.size() == *count && r.at_end()) return ranks;
    }
  }
  impl_->drop();
  throw Error(ErrorCode::bootstrap, impl_->where() +
                                        " sent a malformed reply to the question of which ranks "
                                        "died (a store from an older tpfabric?)");
}

bool TcpStoreClient::report_lost(int job_rank, const std::string& reason,
                                 std::chrono::milliseconds timeout) {
  if (job_rank < 0) {
    throw Error(ErrorCode::invalid_argument,
                "store report_lost: job rank " + std::to_string(job_rank) + " is negative");
  }
  check_size(reason, 0, "report_lost");
  // A connection of its own, made and closed here: the call's own connection may be held by a
  // get that waits for the lost rank. It is no rank's (-1), so that its close is never a death.
  const std::unique_ptr<Impl> side = impl_->sibling(-1);
  side->connect_timeout = std::max(timeout, std::chrono::milliseconds(0));
  side->hello_reply_timeout = std::chrono::milliseconds(0);  // all within `timeout`
  const Deadline deadline = bootstrap::deadline_after(side->connect_timeout);
  std::string p;
  proto::put_u8(p, static_cast<uint8_t>(proto::Op::lost));
  proto::put_u32(p, static_cast<uint32_t>(job_rank));
  proto::put_u32(p, static_cast<uint32_t>(impl_->job_rank));
  proto::put_str(p, reason);
  const std::string what = "the report that job rank " + std::to_string(job_rank) + " was lost";
  side->connect();
  const std::string reply = side->exchange(p, deadline, what);
  proto::Reader r(reply);
  const auto status = r.u8();
  side->drop();
  if (status == static_cast<uint8_t>(proto::Status::ok) && r.at_end()) return true;
  throw Error(ErrorCode::bootstrap, side->where() + " refused " + what + ": " +
                                        r.str().value_or("(no message)") +
                                        " (a store from an older tpfabric?)");
}

}  // namespace tpf
