// The TCP store server: one background thread multiplexes the listening socket, a shutdown
// eventfd and every client with poll(). All sockets are non-blocking and all state belongs to that
// thread, so a client that stalls, disconnects or sends garbage can only lose its own connection.
// Strangers (connections without a valid hello) are bounded in number, in buffered bytes and in
// time; running out of descriptors pauses accepting instead of spinning on accept().

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/duration_text.h"
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
// Reads go through one scratch buffer of the server, so a connection's own buffer grows only by
// what it really sent.
constexpr size_t kReadChunk = size_t{256} << 10;
// Buffers that grew for a big request are given back once empty.
constexpr size_t kShrinkAboveBytes = size_t{1} << 20;

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
  // A GET_MANY's keys while it waits (parked on the first one missing: parked_key), and its
  // deadline, which holds for all of them.
  std::vector<std::string> parked_many;
  Deadline many_deadline{};
  // The job ranks a GET_MANY_FROM waits on, sorted (empty: any rank): only their deaths end it.
  std::vector<int> awaited_ranks;
  Deadline hello_deadline{};
  Deadline grace_end{};  // from then on a newer connection may take its place (hello_grace)
  uint64_t accepted_round = 0;
  int job_rank = -1;  // declared in the hello; -1: not a rank
  int64_t pid = 0;
  bool said_goodbye = false;
  bool peer_closed = false;  // the client closed or reset its end (not us)
  // A rank's beats (Op::beat): taken for lost at silence_end unless another beat comes first.
  std::chrono::milliseconds silence_limit{0};  // 0: not judged
  Deadline silence_end{};
};

// A rank whose connection closed without a goodbye (`reason` empty), or that a rank reported lost.
struct DeadRank {
  int rank;
  int64_t pid;  // 0: not known (no connection of the rank's open when it was reported)
  int found_by = -1;
  std::string reason;
};

struct Waiter {
  uint64_t conn_id;
  Deadline deadline;
};

}  // namespace

struct TcpStoreServer::Impl {
  std::string secret;
  StoreServerLimits limits;
  bootstrap::Listener listener;
  Socket wake_fd;  // eventfd: the destructor writes it to stop the thread
  std::thread thread;
  std::mutex lost_handler_mu;  // on_rank_lost may be called while the thread runs
  LostRankHandler lost_handler;

  // Published by the server thread at the end of each round (see stats()).
  struct {
    std::atomic<size_t> connections{0}, unauthenticated{0}, buffered_bytes{0}, peak_buffered{0},
        waiting{0};
    std::atomic<uint64_t> accepted{0}, dropped_strangers{0}, hello_timeouts{0}, accept_failures{0},
        dead_ranks{0};
  } published;

  // Everything below is touched only by the server thread.
  std::unordered_map<uint64_t, Connection> conns;
  std::set<uint64_t> strangers;  // ids of connections without a valid hello, oldest first
  uint64_t next_conn_id = 1;
  std::unordered_map<std::string, std::string> data;
  std::unordered_map<std::string, std::vector<Waiter>> waiters;
  std::vector<uint64_t> runnable;  // unparked connections that may hold pipelined frames
  std::vector<DeadRank> dead_ranks;
  std::string scratch = std::string(kReadChunk, '\0');
  uint64_t round = 0;          // poll rounds so far
  bool accept_paused = false;  // out of descriptors, or at max_connections
  Deadline accept_resume_at{};
  uint64_t accepted = 0, dropped_strangers = 0, hello_timeouts = 0, accept_failures = 0;
  size_t peak_buffered = 0;

  void run();
  void serve();
  void accept_all();
  // Which stranger may be dropped to make room for a new connection: one that has had a round of
  // the server to send its hello (the process is out of descriptors), or one that has had its
  // hello_grace (max_unauthenticated strangers are open).
  enum class Droppable { after_a_round, after_its_grace };
  // Drops the oldest connection without a hello if it is droppable so. False if it was not, or
  // there was none.
  bool drop_oldest_stranger(Droppable droppable);
  // Whether max_unauthenticated strangers are open and the oldest is still in its grace: the
  // listener's connections then wait in its backlog.
  bool strangers_hold_the_listener() const;
  bool connection_pending() const;
  void remove(std::unordered_map<uint64_t, Connection>::iterator it);
  // Notes a death; a rank already noted (reported lost, then killed) is kept as first noted.
  // False if it was.
  bool note_death(DeadRank death);
  // The pid a connection of `job_rank` declared, or 0.
  int64_t pid_of(int job_rank) const;
  void expire_strangers();
  // The first death among `awaited` (sorted; empty: any rank), if any.
  const DeadRank* first_death_among(const std::vector<int>& awaited) const;
  // Names `first` and the other deaths among `awaited`.
  std::string death_message(const DeadRank& first, const std::vector<int>& awaited) const;
  // The peer_died answer for a wait on `awaited`, if one of those ranks died.
  std::optional<std::string> death_answer(const std::vector<int>& awaited) const;
  // Answers every waiting request that a death now ends.
  void fail_waiters_of_dead_ranks();
  void publish_stats();
  void read_from(uint64_t id, Connection& c);
  void process_input(uint64_t id, Connection& c);
  void handle_request(uint64_t id, Connection& c, std::string_view payload);
  void respond(Connection& c, const std::string& payload);
  void flush(Connection& c);
  void fail(Connection& c, const std::string& message);
  void wake_waiters(const std::string& key);
  // A GET_MANY (c.parked_many): answers with every value once all exist, or parks on the first
  // missing one until the request's deadline; answered as a GET would be where a rank died or
  // the deadline passed (not_found names the missing key).
  void continue_get_many(uint64_t id, Connection& c);
  // Sends `payload` to a connection parked in a GET (if it still is) and lets it run again.
  void answer_parked(uint64_t conn_id, const std::string& payload);
  void expire_waiters();
  // Takes for lost each rank whose beats have stopped for their silence limit (as a lost report).
  void judge_silences();
  // Notes a rank lost (a report, a silence) and tells the lost-rank handler, once per rank.
  void note_lost(int rank, int found_by, const std::string& reason);
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
    ++round;
    const size_t deaths_before = dead_ranks.size();  // deaths and reports of this round
    if (accept_paused && Clock::now() >= accept_resume_at) accept_paused = false;
    fds.clear();
    ids.clear();
    fds.push_back({wake_fd.fd(), POLLIN, 0});
    // While paused the listener is left out: its pending connection would wake us at once.
    const bool listening = !accept_paused && !strangers_hold_the_listener();
    fds.push_back({listening ? listener.socket.fd() : -1, POLLIN, 0});
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
      if (!c.dead && (rev & (POLLERR | POLLHUP | POLLNVAL))) c.dead = c.peer_closed = true;
      if (!c.dead && c.parked && (rev & POLLRDHUP)) c.dead = c.peer_closed = true;
    }
    // After reading, so that a client accepted last round has had its hello read before a
    // shortage of descriptors picks strangers to drop.
    if (fds[1].revents != 0) accept_all();
    while (!runnable.empty()) {
      const uint64_t id = runnable.back();
      runnable.pop_back();
      auto it = conns.find(id);
      if (it != conns.end() && !it->second.dead) process_input(id, it->second);
    }
    expire_waiters();
    judge_silences();
    expire_strangers();
    for (auto it = conns.begin(); it != conns.end();) {
      auto next = std::next(it);
      if (it->second.dead) remove(it);
      it = next;
    }
    if (dead_ranks.size() != deaths_before) fail_waiters_of_dead_ranks();
    publish_stats();
  }
}

void TcpStoreServer::Impl::remove(std::unordered_map<uint64_t, Connection>::iterator it) {
  Connection& c = it->second;
  if (c.parked) drop_waiter(it->first, c.parked_key);
  // A rank whose process dies loses its connection without a goodbye; one that we closed (bad
  // request, wrong secret) or that said goodbye did not die.
  if (c.authed && c.job_rank >= 0 && c.peer_closed && !c.said_goodbye && !c.closing) {
    note_death({c.job_rank, c.pid, -1, {}});
  }
  strangers.erase(it->first);
  conns.erase(it);
  accept_paused = false;  // a descriptor is free again
}

bool TcpStoreServer::Impl::note_death(DeadRank death) {
  for (const DeadRank& known : dead_ranks)
    if (known.rank == death.rank) return false;
  dead_ranks.push_back(std::move(death));
  return true;
}

void TcpStoreServer::Impl::note_lost(int rank, int found_by, const std::string& reason) {
  // Waiters are answered at the end of the round, as for a death.
  if (!note_death({rank, pid_of(rank), found_by, reason})) return;
  LostRankHandler handler;
  {
    std::lock_guard lock(lost_handler_mu);
    handler = lost_handler;
  }
  if (handler) handler(rank, found_by, reason);
}

void TcpStoreServer::Impl::judge_silences() {
  const Deadline now = Clock::now();
  for (auto& [id, c] : conns) {
    if (c.silence_limit.count() == 0 || c.dead || now < c.silence_end) continue;
    const std::string limit = base::format_seconds(c.silence_limit);
    c.silence_limit = std::chrono::milliseconds(0);  // judged once
    note_lost(c.job_rank, -1,
              "the store heard no beat from it for " + limit +
                  " while it made a communicator (a stopped process, or its host cut off)");
  }
}

int64_t TcpStoreServer::Impl::pid_of(int job_rank) const {
  for (const auto& [id, c] : conns)
    if (c.authed && c.job_rank == job_rank) return c.pid;
  return 0;
}

bool TcpStoreServer::Impl::drop_oldest_stranger(Droppable droppable) {
  if (strangers.empty()) return false;
  auto it = conns.find(*strangers.begin());
  if (it == conns.end()) {
    strangers.erase(strangers.begin());
    return true;
  }
  if (droppable == Droppable::after_a_round ? it->second.accepted_round == round
                                            : it->second.grace_end > Clock::now()) {
    return false;
  }
  ++dropped_strangers;
  remove(it);  // closes its descriptor now, so the next accept can use it
  return true;
}

bool TcpStoreServer::Impl::strangers_hold_the_listener() const {
  if (strangers.size() < limits.max_unauthenticated) return false;
  // Ids grow with accept time and every stranger gets the same grace: the oldest's ends first.
  const auto it = conns.find(*strangers.begin());
  return it != conns.end() && it->second.grace_end > Clock::now();
}

void TcpStoreServer::Impl::expire_strangers() {
  const Deadline now = Clock::now();
  // Ids grow with accept time and every stranger gets the same timeout: the oldest expires first.
  while (!strangers.empty()) {
    auto it = conns.find(*strangers.begin());
    if (it == conns.end()) {
      strangers.erase(strangers.begin());
      continue;
    }
    if (it->second.hello_deadline > now) break;
    ++hello_timeouts;
    remove(it);
  }
}

namespace {

// Whether a wait on `awaited` (sorted; empty: any rank) waits on `rank`.
bool awaits(const std::vector<int>& awaited, int rank) {
  return awaited.empty() || std::binary_search(awaited.begin(), awaited.end(), rank);
}

}  // namespace

const DeadRank* TcpStoreServer::Impl::first_death_among(const std::vector<int>& awaited) const {
  for (const DeadRank& death : dead_ranks)
    if (awaits(awaited, death.rank)) return &death;
  return nullptr;
}

std::string TcpStoreServer::Impl::death_message(const DeadRank& first,
                                                const std::vector<int>& awaited) const {
  std::string m = "job rank " + std::to_string(first.rank);
  if (first.pid != 0) m += " (pid " + std::to_string(first.pid) + ")";
  if (first.reason.empty()) {
    m += " died: its store connection closed without a goodbye (the process exited or was "
         "killed)";
  } else {
    m += " was found lost";
    if (first.found_by >= 0) m += " by job rank " + std::to_string(first.found_by);
    m += ": " + first.reason;
  }
  std::vector<int> others;
  for (const DeadRank& death : dead_ranks) {
    if (&death != &first && awaits(awaited, death.rank)) others.push_back(death.rank);
  }
  if (!others.empty()) {
    m += "; also dead: rank";
    for (size_t i = 0; i < others.size() && i < 7; ++i) {
      m += (i > 0 ? ", " : " ") + std::to_string(others[i]);
    }
    if (others.size() > 7) m += ", ...";
  }
  return m;
}

std::optional<std::string> TcpStoreServer::Impl::death_answer(
    const std::vector<int>& awaited) const {
  const DeadRank* first = first_death_among(awaited);
  if (first == nullptr) return std::nullopt;
  std::string p;
  proto::put_u8(p, static_cast<uint8_t>(proto::Status::peer_died));
  proto::put_str(p, death_message(*first, awaited));
  return p;
}

void TcpStoreServer::Impl::fail_waiters_of_dead_ranks() {
  static const std::vector<int> kAnyRank;
  for (auto it = waiters.begin(); it != waiters.end();) {
    auto& list = it->second;
    for (size_t i = 0; i < list.size();) {
      const auto cit = conns.find(list[i].conn_id);
      const std::vector<int>& awaited = cit == conns.end() ? kAnyRank : cit->second.awaited_ranks;
      const std::optional<std::string> answer = death_answer(awaited);
      if (!answer) {
        ++i;
        continue;
      }
      answer_parked(list[i].conn_id, *answer);
      list[i] = list.back();
      list.pop_back();
    }
    it = list.empty() ? waiters.erase(it) : std::next(it);
  }
}

void TcpStoreServer::Impl::publish_stats() {
  size_t buffered = scratch.capacity();
  for (const auto& [id, c] : conns) buffered += c.in.capacity() + c.out.capacity();
  peak_buffered = std::max(peak_buffered, buffered);
  published.connections.store(conns.size(), std::memory_order_relaxed);
  published.unauthenticated.store(strangers.size(), std::memory_order_relaxed);
  size_t waiting = 0;
  for (const auto& [key, list] : waiters) waiting += list.size();
  published.waiting.store(waiting, std::memory_order_relaxed);
  published.buffered_bytes.store(buffered, std::memory_order_relaxed);
  published.peak_buffered.store(peak_buffered, std::memory_order_relaxed);
  published.accepted.store(accepted, std::memory_order_relaxed);
  published.dropped_strangers.store(dropped_strangers, std::memory_order_relaxed);
  published.hello_timeouts.store(hello_timeouts, std::memory_order_relaxed);
  published.accept_failures.store(accept_failures, std::memory_order_relaxed);
  // Release: a reader that sees this round's count also sees the counters above.
  published.dead_ranks.store(dead_ranks.size(), std::memory_order_release);
}

int TcpStoreServer::Impl::poll_timeout() const {
  if (!runnable.empty()) return 0;
  bool any = false;
  Deadline earliest{};
  auto consider = [&](Deadline d) {
    if (!any || d < earliest) earliest = d;
    any = true;
  };
  for (const auto& [key, list] : waiters) {
    for (const Waiter& w : list) consider(w.deadline);
  }
  if (!strangers.empty()) {
    if (auto it = conns.find(*strangers.begin()); it != conns.end()) {
      consider(it->second.hello_deadline);
      // A held listener waits for the oldest's grace to end (once it has, the listener is polled).
      if (strangers_hold_the_listener()) consider(it->second.grace_end);
    }
  }
  if (accept_paused) consider(accept_resume_at);
  for (const auto& [id, c] : conns) {
    if (c.silence_limit.count() > 0) consider(c.silence_end);
  }
  return any ? bootstrap::poll_timeout_ms(earliest) : -1;
}

bool TcpStoreServer::Impl::connection_pending() const {
  pollfd p{listener.socket.fd(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;
}

void TcpStoreServer::Impl::accept_all() {
  // Bounded per round so that a connection storm cannot starve the clients already connected.
  for (int i = 0; i < 256; ++i) {
    if (conns.size() >= limits.max_connections) {
      if (!connection_pending()) return;
      if (drop_oldest_stranger(Droppable::after_a_round)) continue;
      if (!strangers.empty()) return;
      accept_paused = true;  // until a connection closes (remove() resumes)
      accept_resume_at = bootstrap::deadline_after(limits.accept_retry);
      return;
    }
    // The rest wait in the backlog while the strangers are in their grace: a rank that connected
    // a moment ago is not cut for the next one.
    if (strangers.size() >= limits.max_unauthenticated &&
        !drop_oldest_stranger(Droppable::after_its_grace)) {
      return;
    }
    int error = 0;
    Socket s = bootstrap::accept_tcp(listener.socket, &error);
    if (!s.valid()) {
      if (error == 0) return;  // nothing (more) pending
      // accept() takes a descriptor before it looks for a connection: EMFILE may mean nothing.
      if (!connection_pending()) return;
      ++accept_failures;
      // Out of descriptors: a stranger's (one that has had a round to say hello) is the one to
      // give up. Otherwise wait for a connection to close (or accept_retry) instead of polling a
      // listener that stays readable.
      if (drop_oldest_stranger(Droppable::after_a_round)) continue;
      if (!strangers.empty()) return;  // they get their round; the next one may drop them
      accept_paused = true;
      accept_resume_at = bootstrap::deadline_after(limits.accept_retry);
      return;
    }
    ++accepted;
    Connection c;
    c.socket = std::move(s);
    c.hello_deadline = bootstrap::deadline_after(limits.hello_timeout);
    c.grace_end = bootstrap::deadline_after(limits.hello_grace);
    c.accepted_round = round;
    const uint64_t id = next_conn_id++;
    conns.emplace(id, std::move(c));
    strangers.insert(id);
  }
}

void TcpStoreServer::Impl::read_from(uint64_t id, Connection& c) {
  // Before the hello, read no more than a hello can be: a stranger's bytes beyond it are not
  // worth buffering (the frame check refuses them once the header is in).
  size_t want = kReadChunk;
  if (!c.authed) {
    const size_t cap = proto::kFrameHeaderBytes + proto::kMaxHelloBytes;
    const size_t held = c.in.size() - c.in_pos;
    want = held < cap ? cap - held : 1;
  }
  ssize_t n;
  do {
    n = ::recv(c.socket.fd(), scratch.data(), want, 0);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    // Orderly close, reset or any other error: this client is gone.
    c.dead = c.peer_closed = true;
    return;
  }
  c.in.append(scratch.data(), static_cast<size_t>(n));
  process_input(id, c);
}

void TcpStoreServer::Impl::process_input(uint64_t id, Connection& c) {
  while (!c.parked && !c.closing && !c.dead) {
    const size_t avail = c.in.size() - c.in_pos;
    if (avail < proto::kFrameHeaderBytes) break;
    const uint32_t len = proto::decode_u32(c.in.data() + c.in_pos);
    // Before the hello only a small frame is accepted, so a stranger cannot make us buffer much.
    const size_t limit = c.authed ? proto::kMaxFrameBytes : proto::kMaxHelloBytes;
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
    if (c.in.capacity() > kShrinkAboveBytes) std::string().swap(c.in);
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
    const auto job_rank = r.u32();
    const auto pid = r.i64();
    if (!magic || *magic != proto::kProtocolMagic || !presented || !job_rank || !pid ||
        !r.at_end()) {
      return fail(c,
                  "store: malformed hello (client and server from different tpfabric "
                  "versions?)");
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
    c.job_rank = static_cast<int32_t>(*job_rank);
    c.pid = *pid;
    strangers.erase(id);
    std::string p = ok_payload();
    proto::put_u32(p, static_cast<uint32_t>(limits.host_rank));
    proto::put_i64(p, static_cast<int64_t>(::getpid()));
    return respond(c, p);
  }

  if (*op == static_cast<uint8_t>(proto::Op::goodbye)) {
    if (!r.at_end()) return fail(c, "store: malformed goodbye");
    c.said_goodbye = true;
    c.closing = true;
    if (c.out_pos == c.out.size()) c.dead = true;
    return;
  }
  if (*op == static_cast<uint8_t>(proto::Op::lost)) {
    const auto job_rank = r.u32();
    const auto found_by = r.u32();
    auto reason = r.str();
    if (!job_rank || !found_by || !reason || !r.at_end() || static_cast<int32_t>(*job_rank) < 0) {
      return fail(c, "store: malformed lost report");
    }
    const int rank = static_cast<int32_t>(*job_rank);
    if (reason->empty()) reason = "(no reason given)";
    note_lost(rank, static_cast<int32_t>(*found_by), *reason);
    return respond(c, ok_payload());
  }
  if (*op == static_cast<uint8_t>(proto::Op::beat)) {
    const auto limit_ms = r.i64();
    if (!limit_ms || *limit_ms < 0 || !r.at_end()) return fail(c, "store: malformed beat");
    if (c.job_rank < 0) return;  // not a rank: nobody to take for lost
    c.silence_limit = std::chrono::milliseconds(*limit_ms);
    c.silence_end = bootstrap::deadline_after(c.silence_limit);
    return;  // no reply: the client's beat thread never reads
  }
  if (*op == static_cast<uint8_t>(proto::Op::dead)) {
    if (!r.at_end()) return fail(c, "store: malformed dead request");
    std::vector<int> ranks;
    for (const DeadRank& death : dead_ranks) ranks.push_back(death.rank);
    std::sort(ranks.begin(), ranks.end());
    std::string p = ok_payload();
    proto::put_u32(p, static_cast<uint32_t>(ranks.size()));
    for (int rank : ranks) proto::put_u32(p, static_cast<uint32_t>(rank));
    return respond(c, p);
  }
  if (*op == static_cast<uint8_t>(proto::Op::get_many) ||
      *op == static_cast<uint8_t>(proto::Op::get_many_from)) {
    std::vector<int> awaited;  // get_many_from's job ranks, sorted; empty: any rank
    if (*op == static_cast<uint8_t>(proto::Op::get_many_from)) {
      const auto ranks = r.u32();
      if (!ranks || *ranks == 0) return fail(c, "store: malformed get_many_from request");
      for (uint32_t i = 0; i < *ranks; ++i) {
        const auto rank = r.u32();
        if (!rank || static_cast<int32_t>(*rank) < 0)
          return fail(c, "store: malformed get_many_from request");
        awaited.push_back(static_cast<int32_t>(*rank));
      }
      std::sort(awaited.begin(), awaited.end());
    }
    const auto count = r.u32();
    if (!count || *count == 0) return fail(c, "store: malformed get_many request");
    std::vector<std::string> keys;  // not reserved from `count`: the frame bounds it, not a peer
    for (uint32_t i = 0; i < *count; ++i) {
      auto key = r.str();
      if (!key) return fail(c, "store: malformed get_many request");
      keys.push_back(std::move(*key));
    }
    const auto timeout_ms = r.i64();
    if (!timeout_ms || !r.at_end()) return fail(c, "store: malformed get_many request");
    c.parked_many = std::move(keys);
    c.awaited_ranks = std::move(awaited);
    c.many_deadline =
        bootstrap::deadline_after(std::chrono::milliseconds(std::max<int64_t>(*timeout_ms, 0)));
    return continue_get_many(id, c);
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
      c.awaited_ranks.clear();  // a get waits on any rank
      // The key may never come: the rank that would set it may be the dead one.
      if (std::optional<std::string> died = death_answer(c.awaited_ranks)) return respond(c, *died);
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
    case proto::Op::goodbye:        // handled above
    case proto::Op::get_many:       // handled above
    case proto::Op::lost:           // handled above
    case proto::Op::get_many_from:  // handled above
    case proto::Op::dead:           // handled above
    case proto::Op::beat:           // handled above
      break;
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
    c.dead = c.peer_closed = true;
    return;
  }
  c.out.clear();
  c.out_pos = 0;
  if (c.out.capacity() > kShrinkAboveBytes) std::string().swap(c.out);
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
  std::string p;
  proto::put_u8(p, static_cast<uint8_t>(proto::Status::ok));
  proto::put_str(p, data[key]);
  for (const Waiter& w : list) {
    auto cit = conns.find(w.conn_id);
    if (cit == conns.end() || cit->second.dead || !cit->second.parked) continue;
    Connection& c = cit->second;
    if (c.parked_many.empty()) {
      answer_parked(w.conn_id, p);
      continue;
    }
    c.parked = false;
    c.parked_key.clear();
    continue_get_many(w.conn_id, c);
    if (!c.parked) runnable.push_back(w.conn_id);
  }
}

void TcpStoreServer::Impl::continue_get_many(uint64_t id, Connection& c) {
  auto answer = [&](std::string payload) {
    c.parked_many.clear();
    respond(c, payload);
  };
  for (const std::string& key : c.parked_many) {
    if (data.count(key) != 0) continue;
    // The key may never come (see get).
    if (std::optional<std::string> died = death_answer(c.awaited_ranks)) return answer(*died);
    std::string p;
    if (Clock::now() >= c.many_deadline) {
      proto::put_u8(p, static_cast<uint8_t>(proto::Status::not_found));
      proto::put_str(p, key);
      return answer(std::move(p));
    }
    c.parked = true;
    c.parked_key = key;
    waiters[key].push_back({id, c.many_deadline});
    return;
  }
  std::string p;
  proto::put_u8(p, static_cast<uint8_t>(proto::Status::ok));
  proto::put_u32(p, static_cast<uint32_t>(c.parked_many.size()));
  for (const std::string& key : c.parked_many) {
    const std::string& value = data[key];
    if (p.size() + 4 + value.size() > proto::kMaxFrameBytes) {
      const size_t count = c.parked_many.size();
      c.parked_many.clear();
      return fail(c, "store: the values of a get_many of " + std::to_string(count) +
                         " keys exceed the " + std::to_string(proto::kMaxFrameBytes) +
                         "-byte reply limit");
    }
    proto::put_str(p, value);
  }
  answer(std::move(p));
}

void TcpStoreServer::Impl::answer_parked(uint64_t conn_id, const std::string& payload) {
  auto cit = conns.find(conn_id);
  if (cit == conns.end() || cit->second.dead || !cit->second.parked) return;
  Connection& c = cit->second;
  c.parked = false;
  c.parked_key.clear();
  c.parked_many.clear();
  respond(c, payload);
  runnable.push_back(conn_id);
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
        std::string p;
        proto::put_u8(p, static_cast<uint8_t>(proto::Status::not_found));
        if (!c.parked_many.empty()) proto::put_str(p, c.parked_key);  // which one (get_many)
        c.parked = false;
        c.parked_key.clear();
        c.parked_many.clear();
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

TcpStoreServer::TcpStoreServer(const std::string& bind_host, uint16_t port, std::string secret,
                               StoreServerLimits limits)
    : impl_(std::make_unique<Impl>()) {
  impl_->secret = std::move(secret);
  impl_->limits = limits;
  impl_->limits.max_unauthenticated = std::max<size_t>(1, limits.max_unauthenticated);
  impl_->limits.max_connections = std::max<size_t>(1, limits.max_connections);
  // Every rank of a job connects at once: a backlog as long as the kernel allows (somaxconn)
  // keeps their handshakes from being dropped and retried a second later.
  impl_->listener = bootstrap::listen_tcp(bind_host, port, SOMAXCONN);
  if (impl_->secret.empty() && !impl_->listener.loopback) {
    throw Error(
        ErrorCode::bootstrap,
        "store server: refusing to serve the rendezvous store on " +
            bootstrap::host_port(bind_host.empty() ? "0.0.0.0" : bind_host, impl_->listener.port) +
            " without a job secret: anyone who reaches that port could read and write "
            "the job's keys. Set TPF_JOB_SECRET to the same random value on every rank "
            "(e.g. export TPF_JOB_SECRET=$(openssl rand -hex 16)), or listen on "
            "127.0.0.1");
  }
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

void TcpStoreServer::on_rank_lost(LostRankHandler handler) {
  std::lock_guard lock(impl_->lost_handler_mu);
  impl_->lost_handler = std::move(handler);
}

TcpStoreServer::Stats TcpStoreServer::stats() const {
  const auto& p = impl_->published;
  Stats s;
  s.dead_ranks = p.dead_ranks.load(std::memory_order_acquire);
  s.connections = p.connections.load(std::memory_order_relaxed);
  s.unauthenticated = p.unauthenticated.load(std::memory_order_relaxed);
  s.waiting = p.waiting.load(std::memory_order_relaxed);
  s.buffered_bytes = p.buffered_bytes.load(std::memory_order_relaxed);
  s.peak_buffered_bytes = p.peak_buffered.load(std::memory_order_relaxed);
  s.accepted = p.accepted.load(std::memory_order_relaxed);
  s.dropped_strangers = p.dropped_strangers.load(std::memory_order_relaxed);
  s.hello_timeouts = p.hello_timeouts.load(std::memory_order_relaxed);
  s.accept_failures = p.accept_failures.load(std::memory_order_relaxed);
  return s;
}

}  // namespace tpf
