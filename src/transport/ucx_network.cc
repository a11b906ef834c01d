#include "transport/ucx_network.h"

#include <poll.h>
#include <sys/mman.h>
#include <ucp/api/ucp.h>
#include <ucs/debug/log_def.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>

#include "base/memory_probe.h"
#include "tpf/error.h"
#include "transport/net_publication.h"
#include "transport/put_protocol.h"
#include "transport/rank_names.h"
#include "transport/shm_layout.h"

namespace tpf::transport {
namespace {

using Clock = std::chrono::steady_clock;

// A wait without progress polls this many times (a round of network progress each), then, with a
// core to itself, yields the core between polls for kYieldFor, then sleeps on the worker's event
// descriptor. A message often arrives within a few microseconds; past that, a yield returns at
// once where nothing else wants the core, while a sleep costs a context switch and a wake-up: on 2
// emulated hosts x 1 rank, a core each, an 8 B all_reduce that slept after its polls slept in up to
// 4 % of its calls, and they cost it 4-8 % of its time (docs/fabric.md). With more ranks than cores
// the ranks being waited for need the core: yielding to each other there made 8 hosts x 1 rank on 2
// cores 10-15 % slower than sleeping, so an oversubscribed wait sleeps after its polls.
constexpr int kSpinsBeforeYield = 64;
constexpr auto kYieldFor = std::chrono::milliseconds(1);
// A closing endpoint flushes what was sent (a send completes once buffered, not delivered).
constexpr auto kCloseFlushLimit = std::chrono::seconds(10);
constexpr auto kCancelLimit = std::chrono::seconds(2);

std::string status_text(ucs_status_t status) { return ucs_status_string(status); }

// A write into a peer's region that failed with its connection. It travels through the put
// protocol (which names no UCX type) to UcxNetwork::advance, which names the peer as it names any
// lost connection: after a notice that explains the loss, or the peer's goodbye, had its chance.
struct PutFailed {
  int peer;
  ucs_status_t status;
};

// UCX's error lines, taken in (ucx_network.h says why): a process-wide log handler, installed
// with the first network, and the lines it keeps.
class UcxErrorLines {
 public:
  static UcxErrorLines& instance() {
    static UcxErrorLines* lines = new UcxErrorLines;  // never destroyed: UCX may log at exit
    return *lines;
  }
  // Installs the handler (once) and follows the user's choice as each network is made.
  void take_them() {
    printed_.store(std::getenv("UCX_LOG_LEVEL") != nullptr, std::memory_order_relaxed);
    static std::once_flag installed;
    std::call_once(installed, [] { ucs_log_push_handler(&UcxErrorLines::handle); });
  }
  void keep(std::string line) {
    if (t_capture != nullptr) t_capture->push_back(line);
    std::lock_guard lock(mu_);
    kept_.push_back(std::move(line));
    if (kept_.size() > kKeptUcxErrors) kept_.pop_front();
  }
  std::vector<std::string> recent() {
    std::lock_guard lock(mu_);
    return {kept_.begin(), kept_.end()};
  }
  // What this thread's UCX calls logged while a Capture lives (a network being made).
  class Capture {
   public:
    Capture() : outer_(std::exchange(t_capture, &lines_)) {}
    ~Capture() { t_capture = outer_; }
    Capture(const Capture&) = delete;
    Capture& operator=(const Capture&) = delete;
    // " (UCX said: ...)", or nothing.
    std::string said() const {
      if (lines_.empty()) return {};
      std::string text = " (UCX said: ";
      for (size_t i = 0; i < lines_.size(); ++i) text += (i > 0 ? "; " : "") + lines_[i];
      return text + ")";
    }

   private:
    std::vector<std::string>* outer_;
    std::vector<std::string> lines_;
  };

 private:
  static ucs_log_func_rc_t handle(const char* file, unsigned line, const char*,
                                  ucs_log_level_t level, const ucs_log_component_config_t*,
                                  const char* format, va_list ap) {
    UcxErrorLines& self = instance();
    if (level != UCS_LOG_LEVEL_ERROR || self.printed_.load(std::memory_order_relaxed))
      return UCS_LOG_FUNC_RC_CONTINUE;
    char message[512];
    std::vsnprintf(message, sizeof message, format, ap);
    const char* base = std::strrchr(file, '/');
    self.keep(std::string(base != nullptr ? base + 1 : file) + ":" + std::to_string(line) + " " +
              message);
    return UCS_LOG_FUNC_RC_STOP;
  }
  static thread_local std::vector<std::string>* t_capture;
  std::atomic<bool> printed_{false};
  std::mutex mu_;
  std::deque<std::string> kept_;
};
thread_local std::vector<std::string>* UcxErrorLines::t_capture = nullptr;

uint64_t ucx_tag(int sender, uint64_t tag) {
  return static_cast<uint64_t>(sender) << UcxNetwork::kTagBits | tag;
}

// What `print(stream)` writes (UCX's *_print_info functions), as a string; empty if no stream.
template <class Print>
std::string printed(Print&& print) {
  char* text = nullptr;
  size_t length = 0;
  FILE* stream = ::open_memstream(&text, &length);
  if (stream == nullptr) return "";
  print(stream);
  std::fclose(stream);
  std::string out(text, length);
  std::free(text);
  return out;
}

// Whether UCX found an RDMA transport: its context lists each resource as
// "resource N : md M dev D flags -- <transport>/<device>" (UCX 1.13's print format; a format
// it does not recognise reads as TCP only, the safe choice).
bool has_rdma_transport(ucp_context_h context) {
  const std::string info = printed([&](FILE* stream) { ucp_context_print_info(context, stream); });
  static constexpr std::string_view kMarker = "flags -- ";
  for (size_t at = info.find(kMarker); at != std::string::npos; at = info.find(kMarker, at + 1)) {
    const std::string_view name = std::string_view(info).substr(at + kMarker.size(), 3);
    if (name.starts_with("rc") || name.starts_with("dc") || name.starts_with("ud")) return true;
  }
  return false;
}

}  // namespace

struct UcxNetwork::Ucx final : RemoteWriter {
  struct ErrorSink {
    Ucx* ucx;
    int rank;
  };
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  int event_fd = -1;
  // Rounds of progress that moved something, and the threads sleeping on event_fd. A thread that
  // progresses the worker may complete another thread's requests, and that thread, asleep, would
  // not hear of it (their events were taken) until its sleep ran out: so a sleeper sleeps only if
  // nothing moved since its last look, and whoever moves something wakes the sleepers.
  uint64_t generation = 0;  // under UcxNetwork::mu_, as every call into the worker
  uint64_t rounds = 0;      // advance's (mu_)
  std::atomic<int> sleepers{0};
  std::vector<ucp_ep_h> endpoints;     // by rank; null where there is none (or it was closed)
  // By rank: whether this rank connected to it (UcxNetwork::connect_locked). Stays true once the
  // endpoint is closed: a pair connects once. Read without mu_ by a transfer about to start.
  std::unique_ptr<std::atomic<bool>[]> reached;
  std::vector<ucs_status_t> failures;  // by rank: why its endpoint failed, UCS_OK if it did not
  std::vector<ErrorSink> sinks;        // by rank: the error handler's argument
  // Failure notices (see notify_failure): a receive posted per peer, and what this rank sent.
  struct NoticeSlot {
    std::vector<char> buffer;
    void* pending = nullptr;
    bool acknowledged = false;  // its ack is sent (before or when notice_locked takes it)
  };
  std::vector<NoticeSlot> notices_in;  // by rank
  // How many of those receives completed (their callback counts; a cancel counts too), and how
  // many notice_locked has looked at: every wait's round of progress asks whether a notice
  // came, and testing each peer's receive there cost a round O(peers).
  uint64_t notices_completed = 0;
  uint64_t notices_examined = 0;
  std::string notice_out;
  std::vector<void*> notices_out;  // sends in flight
  // Acknowledgements: of this rank's notice, by rank (a receive posted per peer told), and those
  // this rank sent for notices that arrived.
  std::map<int, void*> acks_in;
  std::vector<void*> acks_out;
  int self = -1;  // this rank: the sender in the tags of its acks
  std::function<std::optional<FailureRecord>(int)> peer_lost;  // NetworkConfig::peer_lost
  RankNames names;                     // NetworkConfig::names
  std::vector<std::string> process_names;  // NetworkConfig::process_names
  bool lost(int p) const { return peer_lost && peer_lost(p).has_value(); }
  // Heartbeats (send_beat / heard_from): a receive kept posted per peer listened to.
  // A beat is empty (outside a collective) or a Fingerprint (the collective the rank is in); a
  // goodbye is one byte.
  struct BeatSlot {
    Fingerprint buffer{};
    void* pending = nullptr;
    Heard heard;
  };
  std::map<int, BeatSlot> beats_in;
  struct BeatOut {
    void* request;
    std::unique_ptr<Fingerprint> in_call;  // what the send reads until it completes
  };
  std::vector<BeatOut> beats_out;  // sends in flight
  // Leaving messages (UcxNetwork::leave): one receive kept posted for any peer's; by rank, the
  // round of advance in which its message was taken (kStaying while it has not left), and the
  // failure it left after, where it named one; this rank's message and its sends in flight.
  static constexpr uint64_t kStaying = ~uint64_t{0};
  std::vector<char> leaving_in;
  void* leaving_pending = nullptr;
  std::vector<uint64_t> left_in_round;
  std::map<int, FailureRecord> left_after_failure;
  bool said_leaving = false;
  std::string leaving_out;
  std::vector<void*> leavings_out;
  bool failed = false;             // the communicator failed (notify_failure)
  // Joins (connections on first use, UcxNetwork::connect_on_first_use): one receive kept posted
  // for any peer's; by rank, the join this rank sent it (kept until the send completes), and the
  // sends in flight.
  std::vector<char> join_in;
  void* join_pending = nullptr;
  std::vector<std::string> joins_sent;
  std::vector<void*> joins_out;
  PutPublication publication;  // this rank's, where it offers put + signal
  // Put + signal (see put_protocol.h): this rank's registered region, and per rank the peer's
  // remote key (set where the pair uses put) and where its region and this rank's block are.
  std::string label;
  void* region = nullptr;
  size_t region_bytes = 0;
  ucp_mem_h region_memory = nullptr;
  std::vector<ucp_rkey_h> rkeys;
  std::vector<uint64_t> remote_bases;  // where the peer's region starts, in its process
  std::unique_ptr<PutProtocol> put_protocol;

  // How a peer whose connection failed with `status`, and which nothing else explains, is named:
  // by its pid and host too, since no rank of its host saw it die (a crashed rank alone on its
  // host is named so).
  std::string lost_text(int peer, ucs_status_t status) const {
    const std::string process = static_cast<size_t>(peer) < process_names.size()
                                    ? process_names[static_cast<size_t>(peer)] + "; "
                                    : std::string();
    return label + " lost " + names(peer) + " (" + process +
           "its process exited or its connection failed: " + status_text(status) + ")";
  }
  void* put(int peer, uint64_t offset, const void* source, size_t bytes) override {
    if (endpoints[peer] == nullptr) throw PutFailed{peer, UCS_ERR_NOT_CONNECTED};
    ucp_request_param_t param{};
    ucs_status_ptr_t started = ucp_put_nbx(endpoints[peer], source, bytes,
                                           remote_bases[peer] + offset, rkeys[peer], &param);
    if (UCS_PTR_IS_ERR(started)) throw PutFailed{peer, UCS_PTR_STATUS(started)};
    return started;
  }
  void* flush(int peer) override {
    if (endpoints[peer] == nullptr) throw PutFailed{peer, UCS_ERR_NOT_CONNECTED};
    ucp_request_param_t param{};
    ucs_status_ptr_t started = ucp_ep_flush_nbx(endpoints[peer], &param);
    if (UCS_PTR_IS_ERR(started)) throw PutFailed{peer, UCS_PTR_STATUS(started)};
    return started;
  }
  bool complete(int peer, void* handle, std::exception_ptr& failure) override {
    if (handle == nullptr) return true;
    const ucs_status_t status = ucp_request_check_status(handle);
    if (status == UCS_INPROGRESS) return false;
    ucp_request_free(handle);
    if (status != UCS_OK && !failure) failure = std::make_exception_ptr(PutFailed{peer, status});
    return true;
  }
  void abandon(int peer, void* handle) override {
    if (handle == nullptr) return;
    // A put cannot be cancelled: closing the endpoint ends it (the network is failed anyway).
    if (ucp_request_check_status(handle) == UCS_INPROGRESS) close(peer, true);
    progress_until_done(handle, Clock::now() + kCancelLimit);
    ucp_request_free(handle);
  }
  void release(void* handle) override { ucp_request_free(handle); }
  bool uses_put(int peer) const { return rkeys[peer] != nullptr; }

  static void on_endpoint_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* sink = static_cast<ErrorSink*>(arg);
    sink->ucx->failures[sink->rank] = status;
  }

  // Until UCX has nothing more to do: each round ends with a poll that finds nothing (over TCP
  // an epoll_wait), a system call the waits' loops (advance) need not pay after every arrival.
  void progress() {
    bool moved = false;
    while (ucp_worker_progress(worker) != 0) moved = true;
    if (moved) note_progress();
  }
  // Progresses until `request` is no longer in flight or `give_up` comes: whether it finished.
  bool progress_until_done(void* request, Clock::time_point give_up) {
    while (ucp_request_check_status(request) == UCS_INPROGRESS) {
      if (Clock::now() >= give_up) return false;
      progress();
    }
    return true;
  }
  // One round: the waits check their requests after each.
  void progress_once() {
    if (ucp_worker_progress(worker) != 0) note_progress();
  }
  void note_progress() {
    ++generation;
    if (sleepers.load() > 0) ucp_worker_signal(worker);
  }

  // Posts a receive into `buffer` for a message under `tag` from any peer (the rank bits masked
  // out): the request, or null where UCX refused it.
  void* listen_to_any(std::vector<char>& buffer, uint64_t tag) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    ucs_status_ptr_t posted =
        ucp_tag_recv_nbx(worker, buffer.data(), buffer.size(), ucx_tag(0, tag), kMaxTag, &param);
    return UCS_PTR_IS_ERR(posted) ? nullptr : posted;
  }
  // One receive kept posted for any peer's leaving message, one for any peer's join.
  void listen_for_leavers() { leaving_pending = listen_to_any(leaving_in, kLeavingTag); }
  void listen_for_joins() { join_pending = listen_to_any(join_in, kJoinTag); }
  // Listens for rank p's failure notices (UcxNetwork::notify_failure), once it is connected.
  void listen_for_notices(int p) {
    NoticeSlot& slot = notices_in[p];
    slot.buffer.resize(kMaxNoticeBytes);
    ucp_request_param_t param{};
    param.op_attr_mask =
        UCP_OP_ATTR_FLAG_NO_IMM_CMPL | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.recv = [](void*, ucs_status_t, const ucp_tag_recv_info_t*, void* completed) {
      ++*static_cast<uint64_t*>(completed);
    };
    param.user_data = &notices_completed;
    ucs_status_ptr_t posted = ucp_tag_recv_nbx(worker, slot.buffer.data(), slot.buffer.size(),
                                               ucx_tag(p, kNoticeTag), ~uint64_t{0}, &param);
    if (!UCS_PTR_IS_ERR(posted)) slot.pending = posted;
  }
  // Takes the leaving messages that arrived (after a round of progress).
  void take_leavers() {
    while (leaving_pending != nullptr) {  // null until the network is set up
      ucp_tag_recv_info_t info{};
      const ucs_status_t status = ucp_tag_recv_request_test(leaving_pending, &info);
      if (status == UCS_INPROGRESS) return;
      ucp_request_free(leaving_pending);
      leaving_pending = nullptr;
      if (status != UCS_OK) return;  // cancelled: the network is going
      const uint64_t peer = info.sender_tag >> kTagBits;
      if (peer < left_in_round.size() && left_in_round[peer] == kStaying) {
        left_in_round[peer] = rounds;
        std::optional<FailureRecord> record =
            decode_failure_record(std::string(leaving_in.data(), info.length));
        if (info.length > 0 && record) left_after_failure[static_cast<int>(peer)] = *record;
      }
      listen_for_leavers();
    }
  }
  // Whether `peer` left before this round of advance: a transfer with it still waiting now
  // will never finish. (A round later than the one that took its message: what it sent before
  // leaving came ahead of the message, and put + signal was flushed before it, so that round's
  // progress finished every transfer it would.)
  bool left_before_this_round(int peer) const { return left_in_round[peer] < rounds; }
  bool has_left(int peer) const { return left_in_round[peer] != kStaying; }
  // Hands `fail` the error of what `context` names, which waits on `peer`, a rank that left:
  // a mismatch, or the failure it left after (as the root cause).
  template <class Fail>
  void fail_left(int peer, const std::string& context, Fail&& fail) const {
    const std::string who = names(peer);
    const auto why = left_after_failure.find(peer);
    if (why != left_after_failure.end()) fail(peer_left_after_failure(context, who, why->second));
    fail(peer_left(context, who));
  }

  // Closes rank p's endpoint: flushing what was sent unless `force`, bounded either way.
  void close(int p, bool force) {
    ucp_ep_h ep = endpoints[p];
    if (ep == nullptr) return;
    endpoints[p] = nullptr;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t request = ucp_ep_close_nbx(ep, &param);
    if (request == nullptr || UCS_PTR_IS_ERR(request)) return;
    const bool done =
        progress_until_done(request, Clock::now() + (force ? kCancelLimit : kCloseFlushLimit));
    if (!done && !force) {
      ucp_request_free(request);
      endpoints[p] = ep;  // the flush did not finish: drop what is left
      close(p, true);
      return;
    }
    ucp_request_free(request);
  }

  // Closes every endpoint, the closes started together and waited for together (bounded as
  // close()'s): a flushing close is a round trip with its peer, and one after another a rank
  // waited for them in turn as it left, each on a peer busy closing its own. `force_all`: after a
  // failure (a flush may wait on a peer that is gone or cut off); otherwise only the endpoints
  // that failed are forced (those of peers known lost are closed before: ~Ucx).
  void close_all(bool force_all) {
    struct Closing {
      int peer;
      ucp_ep_h ep;
      void* request;
    };
    std::vector<Closing> flushing;
    for (size_t i = 0; i < endpoints.size(); ++i) {
      const int p = static_cast<int>(i);
      if (endpoints[i] == nullptr) continue;
      if (force_all || failures[i] != UCS_OK) {
        close(p, true);
        continue;
      }
      ucp_ep_h ep = std::exchange(endpoints[i], nullptr);
      ucp_request_param_t param{};
      ucs_status_ptr_t request = ucp_ep_close_nbx(ep, &param);
      if (request != nullptr && !UCS_PTR_IS_ERR(request)) flushing.push_back({p, ep, request});
    }
    const auto give_up = Clock::now() + kCloseFlushLimit;
    auto in_progress = [](const Closing& c) {
      return ucp_request_check_status(c.request) == UCS_INPROGRESS;
    };
    while (std::any_of(flushing.begin(), flushing.end(), in_progress) && Clock::now() < give_up) {
      progress();
    }
    for (const Closing& c : flushing) {
      const bool unfinished = in_progress(c);
      ucp_request_free(c.request);
      if (!unfinished) continue;
      endpoints[c.peer] = c.ep;  // the flush did not finish: drop what is left
      close(c.peer, true);
    }
  }

  // Whether rank p's connection stands: made, and not failed.
  bool connected(int p) const { return endpoints[p] != nullptr && failures[p] == UCS_OK; }
  // A small message of the network's own (a notice, an ack, a leaving message) to rank p, where
  // its connection stands: `bytes` at `data`, valid until the send completes, under `tag` (the
  // whole UCX tag); a send still in flight goes to `in_flight`, which the destructor settles.
  void send_own(int p, const void* data, size_t bytes, uint64_t tag,
                std::vector<void*>& in_flight) {
    if (!connected(p)) return;
    ucp_request_param_t param{};
    ucs_status_ptr_t sent = ucp_tag_send_nbx(endpoints[p], data, bytes, tag, &param);
    if (sent != nullptr && !UCS_PTR_IS_ERR(sent)) in_flight.push_back(sent);
  }

  // Tells peer p that its failure notice arrived, so it may close its connections (once).
  void acknowledge_notice(int p) {
    NoticeSlot& slot = notices_in[p];
    if (slot.acknowledged) return;
    slot.acknowledged = true;
    send_own(p, nullptr, 0, ucx_tag(self, kNoticeAckTag), acks_out);
  }
  // Acknowledges the notices that arrived whole (their takers, notice_locked, keep them): a rank
  // waiting on the network for its own notice to leave or be taken must not keep a peer that
  // failed at the same moment waiting for its acknowledgement in turn.
  void acknowledge_arrived_notices() {
    for (size_t p = 0; p < notices_in.size(); ++p) {
      const NoticeSlot& slot = notices_in[p];
      if (slot.pending != nullptr && !slot.acknowledged &&
          ucp_request_check_status(slot.pending) == UCS_OK) {
        acknowledge_notice(static_cast<int>(p));
      }
    }
  }
  // After this rank sent a failure notice: until every peer told either acknowledged it or lost
  // its connection (bounded), progressing meanwhile, which also reads what peers still send, and
  // acknowledging the notices that arrive (their takers, notice_locked, keep them): peers that
  // failed at once wait here for each other's acks (a mismatch fails every rank), and each waited
  // out the bound, 2 s, when only a wait's notice_locked acknowledged. `only`, if not empty:
  // those peers' acknowledgements alone. Never for a peer known lost, which will not answer
  // (until 2026-12-06 each survivor of a stopped rank waited the bound for it as it left).
  bool await_notice_acks(std::span<const int> only = {}) {
    const auto give_up = Clock::now() + kCancelLimit;
    auto waiting = [&] {
      acknowledge_arrived_notices();
      return std::any_of(acks_in.begin(), acks_in.end(), [&](const auto& entry) {
        const auto [peer, ack] = entry;
        return (only.empty() || std::find(only.begin(), only.end(), peer) != only.end()) &&
               ucp_request_check_status(ack) == UCS_INPROGRESS && connected(peer) && !lost(peer);
      });
    };
    while (waiting()) {
      if (Clock::now() >= give_up) return false;
      progress();
    }
    return true;
  }

  ~Ucx() override {
    await_notice_acks();
    // What is in flight to a peer known lost never completes (a join message to a stopped peer
    // connected on first use waited the bound below, 2 s): closing its endpoint ends it.
    for (size_t p = 0; p < endpoints.size(); ++p)
      if (lost(static_cast<int>(p))) close(static_cast<int>(p), true);
    put_protocol.reset();  // lets its last signals and credits go on: the closes flush them
    for (ucp_rkey_h rkey : rkeys)
      if (rkey != nullptr) ucp_rkey_destroy(rkey);
    for (NoticeSlot& slot : notices_in) {
      if (slot.pending != nullptr) ucp_request_cancel(worker, slot.pending);
    }
    const auto give_up = Clock::now() + kCancelLimit;
    auto settle = [&](void* request) {
      progress_until_done(request, give_up);
      ucp_request_free(request);
    };
    for (NoticeSlot& slot : notices_in)
      if (slot.pending != nullptr) settle(slot.pending);
    for (void* request : notices_out) settle(request);
    for (auto& [rank, request] : acks_in) {
      if (ucp_request_check_status(request) == UCS_INPROGRESS) ucp_request_cancel(worker, request);
      settle(request);
    }
    for (void* request : acks_out) settle(request);
    for (auto& [rank, slot] : beats_in) {
      if (slot.pending == nullptr) continue;
      ucp_request_cancel(worker, slot.pending);
      settle(slot.pending);
    }
    for (BeatOut& beat : beats_out) settle(beat.request);
    if (leaving_pending != nullptr) {
      ucp_request_cancel(worker, leaving_pending);
      settle(leaving_pending);
    }
    for (void* request : leavings_out) settle(request);
    if (join_pending != nullptr) {
      ucp_request_cancel(worker, join_pending);
      settle(join_pending);
    }
    for (void* request : joins_out) settle(request);
    // After a failure a flush may wait on a peer that is gone or cut off: close at once.
    close_all(failed);
    // Messages nobody will receive any more (beats and goodbyes of peers, which may arrive until
    // the endpoints are closed): take them, or UCX warns about each one at shutdown.
    std::vector<std::vector<char>> drained;  // outlives the worker: a receive given up on
    while (worker != nullptr) {              // none if the constructor failed before making it
      ucp_tag_recv_info_t info{};
      ucp_tag_message_h message = ucp_tag_probe_nb(worker, 0, 0, 1, &info);
      if (message == nullptr) break;
      std::vector<char>& buffer = drained.emplace_back(info.length);
      ucp_request_param_t param{};
      ucs_status_ptr_t request =
          ucp_tag_msg_recv_nbx(worker, buffer.data(), buffer.size(), message, &param);
      if (request != nullptr && !UCS_PTR_IS_ERR(request)) settle(request);
    }
    if (worker != nullptr) ucp_worker_destroy(worker);
    if (region_memory != nullptr) ucp_mem_unmap(context, region_memory);
    if (context != nullptr) ucp_cleanup(context);
    if (region != nullptr) ::munmap(region, region_bytes);
  }
};

UcxNetwork::UcxNetwork(NetworkConfig config)
    : config_(std::move(config)), board_(config_.store), ucx_(new Ucx) {
  UcxErrorLines::instance().take_them();
  const UcxErrorLines::Capture ucx_said;  // for the errors below
  Ucx& u = *ucx_;
  const int n = config_.size;
  u.endpoints.assign(n, nullptr);
  u.failures.assign(n, UCS_OK);
  u.left_in_round.assign(n, Ucx::kStaying);
  u.sinks.resize(n);
  u.label = config_.label;
  u.peer_lost = config_.peer_lost;
  u.names = config_.names;
  u.process_names = config_.process_names;
  u.rkeys.assign(n, nullptr);
  u.remote_bases.assign(n, 0);
  auto check = [&](ucs_status_t status, const char* call) {
    if (status != UCS_OK) {
      throw Error(ErrorCode::bootstrap,
                  config_.label + ": the network (UCX) failed to start: " + call + ": " +
                      status_text(status) + " (transports '" + config_.transports +
                      "', from TPF_NET_TRANSPORTS; devices '" + config_.devices +
                      "', from TPF_RAIL_DEVICES or UCX_NET_DEVICES, default all)" +
                      ucx_said.said());
    }
  };

  ucp_config_t* ucx_config = nullptr;
  check(ucp_config_read(nullptr, nullptr, &ucx_config), "ucp_config_read");
  const ucs_status_t tls = ucp_config_modify(ucx_config, "TLS", config_.transports.c_str());
  if (tls != UCS_OK) {
    ucp_config_release(ucx_config);
    throw Error(ErrorCode::invalid_argument, config_.label + ": UCX refused the transports '" +
                                                 config_.transports +
                                                 "' (TPF_NET_TRANSPORTS): " + status_text(tls));
  }
  const ucs_status_t devices =
      ucp_config_modify(ucx_config, "NET_DEVICES", config_.devices.c_str());
  if (devices != UCS_OK) {
    ucp_config_release(ucx_config);
    throw Error(ErrorCode::invalid_argument,
                config_.label + ": UCX refused the devices '" + config_.devices +
                    "' (TPF_RAIL_DEVICES or UCX_NET_DEVICES): " + status_text(devices));
  }
  // A setting of this network's choosing, unless the user set it (the variable): `name` as
  // ucp_config_modify takes it (a transport's own without its prefix: "CONN_NB" for TCP_CONN_NB).
  auto choose = [&](const char* variable, const char* name, const std::string& value) {
    if (std::getenv(variable) != nullptr) return;
    const ucs_status_t chosen = ucp_config_modify(ucx_config, name, value.c_str());
    if (chosen != UCS_OK) {
      ucp_config_release(ucx_config);
      std::string what = config_.label + ": UCX refused ";
      what += name;
      what += "=" + value + ": " + status_text(chosen);
      throw Error(ErrorCode::internal, what);
    }
  };
  // Messages of at least the threshold go by rendezvous (a round trip more); over TCP UCX's own
  // threshold lies between 16 and 32 KiB (docs/results/packed-one-round-64k.txt).
  if (config_.eager_bytes > 0)
    choose("UCX_RNDV_THRESH", "RNDV_THRESH", std::to_string(config_.eager_bytes + 1));
  // Connecting over TCP without blocking. UCX 1.13's blocking connect (its default) finishes
  // inside ucp_ep_create, and when the peer's process closes right then (a peer that failed and
  // left), the first send fails, the reconnect is refused, and UCX marks the endpoint failed
  // before it is whole: its own assertion aborts this process at the next progress (tcp_ep.c:478),
  // where a release UCX would destroy an endpoint still in use; and a connect to a host that
  // drops SYNs held the rank, and this network's lock, in the kernel for up to 127 s. Without
  // blocking, the endpoint is whole before its connection completes, a failure reaches the
  // endpoint's error handler, and the waits keep their deadlines and the heartbeat.
  choose("UCX_TCP_CONN_NB", "CONN_NB", "y");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  if (config_.protocol != NetProtocol::tag) params.features |= UCP_FEATURE_RMA;
  params.estimated_num_eps = config_.peers.size();
  const ucs_status_t init = ucp_init(&params, ucx_config, &u.context);
  ucp_config_release(ucx_config);
  check(init, "ucp_init");
  const bool wants_put =
      config_.protocol == NetProtocol::put ||
      (config_.protocol == NetProtocol::automatic && has_rdma_transport(u.context));

  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // the communicator serializes its calls
  check(ucp_worker_create(u.context, &worker_params, &u.worker), "ucp_worker_create");
  check(ucp_worker_get_efd(u.worker, &u.event_fd), "ucp_worker_get_efd");

  ucp_address_t* address = nullptr;
  size_t address_bytes = 0;
  check(ucp_worker_get_address(u.worker, &address, &address_bytes), "ucp_worker_get_address");
  address_ = to_hex(address, address_bytes);
  ucp_worker_release_address(u.worker, address);
  wants_put_ = wants_put;
  put_peers_ = config_.put_peers.value_or(config_.peers);
  std::sort(put_peers_.begin(), put_peers_.end());
  Store& store = *config_.store;
  // Its put publication first: a peer that reads the address finds it without a wait.
  store.set(net_put_key(config_.rank), wants_put ? publish_region() : "");
  store.set(net_address_key(config_.rank), address_);
  if (address_.size() + 1024 > kMaxJoinBytes) {  // a join: the address, a small publication
    throw Error(ErrorCode::bootstrap, config_.label + ": the network address of this rank (" +
                                          std::to_string(address_bytes) +
                                          " bytes) is too large to send to peers");
  }

  u.self = config_.rank;
  u.reached = std::make_unique<std::atomic<bool>[]>(n);
  u.notices_in.resize(n);
  u.joins_sent.resize(n);
  if (wants_put) start_put_protocol();
  const std::vector<int> first = config_.connect_first.value_or(config_.peers);
  const auto deadline = Clock::now() + config_.setup_timeout;
  // The first peers' addresses (and where put + signal is wanted, their slots) in one request: a
  // get each was a round trip per peer, N^2 for the job through one store.
  for (int p : first) check_peer(p, "connect to");
  const std::vector<Published> published_by_peers =
      read_published(first, "waiting for the network addresses of its " +
                                std::to_string(first.size()) + " first peers on other hosts");
  for (size_t i = 0; i < first.size(); ++i) {
    const int p = first[i];
    if (!connect_locked(p, published_by_peers[i].address, published_by_peers[i].put)) {
      // Its process may have exited after a failure of its own, which it recorded (as a failed
      // first message waits for a notice: NetworkConfig::notice_wait).
      const std::string what = config_.label + ": cannot reach " + config_.names(p) +
                               " over the network (UCX " + config_.transports + ")";
      if (std::optional<RootCauseError> cause =
              await_notice_locked(config_.notice_wait, [&] { return what; }))
        throw *cause;
      throw Error(ErrorCode::bootstrap, what + ": " + status_text(u.failures[p]) + ucx_said.said());
    }
  }
  u.leaving_in.resize(kMaxNoticeBytes);
  u.listen_for_leavers();
  u.join_in.resize(kMaxJoinBytes);
  u.listen_for_joins();
  // A first empty message each way: every first connection works before the communicator is
  // used.
  std::vector<NetRequest> hello;
  for (int p : first) {
    hello.push_back(send(p, kMaxTag, nullptr, 0));
    hello.push_back(recv(p, kMaxTag, nullptr, 0));
  }
  wait_all(hello, WaitContext::with_deadline(deadline, [label = config_.label] {
             return "connecting the network of " + label;
           }));
  // After the hellos: a peer that made its network and failed at once (its notice behind its
  // hello) does not fail this rank's setup.
  std::lock_guard lock(mu_);
  for (int p : first) u.listen_for_notices(p);
}

bool UcxNetwork::connect_locked(int peer, const std::string& address,
                                const std::string& put_published) {
  Ucx& u = *ucx_;
  const std::vector<unsigned char> peer_address = from_hex(address);
  if (peer_address.empty()) {
    throw Error(ErrorCode::bootstrap, config_.label + ": " + config_.names(peer) +
                                          " published a malformed network address");
  }
  u.sinks[peer] = {&u, peer};
  ucp_ep_params_t ep_params{};
  ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                         UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep_params.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
  ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep_params.err_handler = {&Ucx::on_endpoint_error, &u.sinks[peer]};
  const ucs_status_t created = ucp_ep_create(u.worker, &ep_params, &u.endpoints[peer]);
  if (created != UCS_OK) {
    u.failures[peer] = created;
    return false;
  }
  u.reached[peer].store(true, std::memory_order_release);
  if (wants_put_) use_put_with(peer, put_published);
  return true;
}

template <class Fail>
void UcxNetwork::explain_failed_connection_locked(int peer, const std::string& context,
                                                  Fail&& fail) {
  Ucx& u = *ucx_;
  // It closed its connections after saying it left: nothing else to wait for. (Looked at again
  // after the wait: its leaving message may come meanwhile.)
  u.take_leavers();
  if (u.has_left(peer)) u.fail_left(peer, context, fail);
  if (std::optional<RootCauseError> cause =
          await_notice_locked(config_.notice_wait, [&] { return context; }))
    fail(*cause);
  u.take_leavers();
  if (u.has_left(peer)) u.fail_left(peer, context, fail);
}

void UcxNetwork::connect_on_first_use(int peer) {
  Ucx& u = *ucx_;
  if (u.reached[peer].load(std::memory_order_acquire)) return;
  const Published published =
      read_published(std::span(&peer, 1),
                     "connecting to " + config_.names(peer) + " over the network on first use")[0];
  std::lock_guard lock(mu_);
  // Connected meanwhile (its join came, or another thread), or failed: the transfer says which.
  if (u.reached[peer].load() || u.failed) return;
  if (!connect_locked(peer, published.address, published.put)) {
    // Its process exited, perhaps because of a failure elsewhere whose notice is on its way (as
    // a send that fails waits for one: NetworkConfig::notice_wait).
    const std::string what =
        config_.label + ": connecting to " + config_.names(peer) + " on first use";
    explain_failed_connection_locked(peer, what, [](const auto& error) { throw error; });
    throw Error(ErrorCode::peer_died, what +
                                          ": it cannot be reached (its process exited or its "
                                          "network is down): " +
                                          status_text(u.failures[peer]));
  }
  u.listen_for_notices(peer);
  std::string& join = u.joins_sent[peer];
  join = address_ + '\n';
  if (wants_put_ && is_put_peer(peer)) {  // where the peer's block is, of this rank's region
    PutPublication mine = u.publication;
    std::erase_if(mine.blocks, [&](const auto& block) { return block.first != peer; });
    join += encode(mine);
  }
  u.send_own(peer, join.data(), join.size(), ucx_tag(config_.rank, kJoinTag), u.joins_out);
}

void UcxNetwork::take_joins_locked() {
  Ucx& u = *ucx_;
  while (u.join_pending != nullptr) {  // null until the network is set up
    ucp_tag_recv_info_t info{};
    const ucs_status_t status = ucp_tag_recv_request_test(u.join_pending, &info);
    if (status == UCS_INPROGRESS) return;
    ucp_request_free(u.join_pending);
    u.join_pending = nullptr;
    if (status == UCS_ERR_CANCELED) return;  // the network is going
    const uint64_t peer = info.sender_tag >> kTagBits;
    if (peer < static_cast<uint64_t>(config_.size) && !u.reached[peer].load() && !u.failed) {
      const std::string_view join(u.join_in.data(), status == UCS_OK ? info.length : 0);
      const size_t end = join.find('\n');
      // Where it fails, not this rank's transfer failed: the pair's next one does, naming the
      // peer (connect_locked records why).
      bool connected = false;
      try {
        connected = end != std::string_view::npos &&
                    connect_locked(static_cast<int>(peer), std::string(join.substr(0, end)),
                                   std::string(join.substr(end + 1)));
      } catch (const Error&) {
      }
      if (connected) {
        u.listen_for_notices(static_cast<int>(peer));
      } else if (u.failures[peer] == UCS_OK) {
        u.failures[peer] = UCS_ERR_INVALID_PARAM;  // a malformed join
      }
    }
    u.listen_for_joins();
  }
}

std::vector<UcxNetwork::Published> UcxNetwork::read_published(std::span<const int> peers,
                                                              const std::string& what) {
  std::vector<std::string> keys;
  for (int p : peers) {
    keys.push_back(net_address_key(p));
    if (wants_put_) keys.push_back(net_put_key(p));
  }
  std::vector<std::string> values;
  try {
    values = config_.store->get_many(keys, config_.setup_timeout);
  } catch (const RootCauseError&) {
    throw;  // another rank's failure, which names the communicator (comm/creation_watch.h)
  } catch (const Error& e) {
    throw Error(e.code(), config_.label + ": " + what + ": " + e.what());
  }
  const size_t per_peer = wants_put_ ? 2 : 1;
  std::vector<Published> published(peers.size());
  for (size_t i = 0; i < peers.size(); ++i) {
    published[i].address = std::move(values[i * per_peer]);
    if (wants_put_) published[i].put = std::move(values[i * per_peer + 1]);
  }
  return published;
}

std::vector<int> UcxNetwork::connected_peers() const {
  std::vector<int> connected;
  for (int p = 0; p < config_.size; ++p)
    if (ucx_->reached[p].load()) connected.push_back(p);
  return connected;
}

std::string UcxNetwork::publish_region() {
  Ucx& u = *ucx_;
  u.region_bytes = std::max<size_t>(put_peers_.size(), 1) * SlotLayout::block_bytes();
  void* region = ::mmap(nullptr, u.region_bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);  // zeroed: no signal yet
  if (region == MAP_FAILED) {
    throw Error(ErrorCode::system, config_.label + ": cannot allocate " +
                                       std::to_string(u.region_bytes) +
                                       " bytes of network slots: " + std::strerror(errno));
  }
  u.region = region;
  ucp_mem_map_params_t map{};
  map.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  map.address = u.region;
  map.length = u.region_bytes;
  auto check = [&](ucs_status_t status, const char* call) {
    if (status != UCS_OK) {
      throw Error(ErrorCode::bootstrap, config_.label + ": registering the network slots failed: " +
                                            call + ": " + status_text(status));
    }
  };
  check(ucp_mem_map(u.context, &map, &u.region_memory), "ucp_mem_map");
  void* key = nullptr;
  size_t key_bytes = 0;
  check(ucp_rkey_pack(u.context, u.region_memory, &key, &key_bytes), "ucp_rkey_pack");
  PutPublication publication;
  publication.base = reinterpret_cast<uint64_t>(u.region);
  publication.rkey.assign(static_cast<unsigned char*>(key),
                          static_cast<unsigned char*>(key) + key_bytes);
  ucp_rkey_buffer_release(key);
  for (size_t i = 0; i < put_peers_.size(); ++i)
    publication.blocks.emplace_back(put_peers_[i], PutProtocol::block_offset(i));
  u.publication = publication;
  return encode(publication);
}

void UcxNetwork::use_put_with(int peer, const std::string& published) {
  Ucx& u = *ucx_;
  // The peer uses tagged messages, or gave this rank no slots: so does the pair (where the peer
  // gave slots that this rank does not give back, it finds none here and does the same).
  if (published.empty() || !is_put_peer(peer)) return;
  const std::optional<PutPublication> p = decode_put_publication(published);
  if (!p) {
    throw Error(ErrorCode::bootstrap,
                config_.label + ": " + config_.names(peer) + " published malformed network slots");
  }
  const auto mine = std::find_if(p->blocks.begin(), p->blocks.end(),
                                 [&](const auto& block) { return block.first == config_.rank; });
  if (mine == p->blocks.end()) return;
  const ucs_status_t unpacked =
      ucp_ep_rkey_unpack(u.endpoints[peer], p->rkey.data(), &u.rkeys[peer]);
  if (unpacked != UCS_OK) {
    throw Error(ErrorCode::bootstrap, config_.label + ": cannot use the network slots of " +
                                          config_.names(peer) + ": " + status_text(unpacked));
  }
  u.remote_bases[peer] = p->base;
  u.put_protocol->reach(peer, mine->second);
}

void UcxNetwork::start_put_protocol() {
  Ucx& u = *ucx_;
  u.put_protocol = std::make_unique<PutProtocol>(
      std::span(static_cast<std::byte*>(u.region), u.region_bytes), put_peers_, u);
}

bool UcxNetwork::is_put_peer(int peer) const {
  return std::binary_search(put_peers_.begin(), put_peers_.end(), peer);
}

size_t UcxNetwork::put_slot_bytes() const { return wants_put_ ? ucx_->region_bytes : 0; }

bool UcxNetwork::uses_put(int peer) {
  check_peer(peer, "ask about the protocol with");
  connect_on_first_use(peer);
  std::lock_guard lock(mu_);
  return ucx_->uses_put(peer);
}

void UcxNetwork::notify_failure(const FailureRecord& record) {
  std::lock_guard lock(mu_);
  notify_failure_locked(record);
}

void UcxNetwork::notify_failure_locked(const FailureRecord& record) {
  Ucx& u = *ucx_;
  if (!own_failure_) own_failure_ = record;
  u.failed = true;
  if (!u.notice_out.empty()) return;  // once: the first failure is the one peers should name
  board_.publish(record);             // for peers the notice cannot reach (returns at once)
  u.notice_out = encode_failure_record(record).substr(0, kMaxNoticeBytes);
  for (int p : config_.peers) {
    if (!u.connected(p) || u.lost(p)) continue;
    u.send_own(p, u.notice_out.data(), u.notice_out.size(), ucx_tag(config_.rank, kNoticeTag),
               u.notices_out);
    ucp_request_param_t ack{};
    ack.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    ucs_status_ptr_t posted =
        ucp_tag_recv_nbx(u.worker, nullptr, 0, ucx_tag(p, kNoticeAckTag), ~uint64_t{0}, &ack);
    if (!UCS_PTR_IS_ERR(posted)) u.acks_in[p] = posted;
  }
  // Push them out now: the caller may be about to exit.
  const auto give_up = Clock::now() + kCancelLimit;
  auto in_flight = [&] {
    return std::any_of(u.notices_out.begin(), u.notices_out.end(), [](void* request) {
      return ucp_request_check_status(request) == UCS_INPROGRESS;
    });
  };
  while (in_flight() && Clock::now() < give_up) {
    u.progress();
    // A notice can wait behind a send its peer does not take (data sent ahead); that peer may be
    // waiting for this rank's acknowledgement of its own notice before it fails and reads on.
    u.acknowledge_arrived_notices();
  }
}

void UcxNetwork::creation_failed() {
  std::lock_guard lock(mu_);
  ucx_->failed = true;
}

void UcxNetwork::leave(const std::optional<FailureRecord>& failed_first) {
  std::lock_guard lock(mu_);
  Ucx& u = *ucx_;
  if (u.failed || own_failure_ || u.self < 0 || u.said_leaving) return;
  u.said_leaving = true;
  u.progress();
  take_joins_locked();  // a peer that connected on first use hears of it too
  if (u.put_protocol) {
    // Puts and their signals do not queue behind tagged messages: they land first.
    ucp_request_param_t param{};
    ucs_status_ptr_t flush = ucp_worker_flush_nbx(u.worker, &param);
    if (UCS_PTR_IS_PTR(flush)) {
      u.progress_until_done(flush, Clock::now() + kCloseFlushLimit);
      ucp_request_free(flush);
    }
  }
  // A message of no bytes says only "left"; one with a record, why.
  u.leaving_out = failed_first ? encode_failure_record(*failed_first).substr(0, kMaxNoticeBytes)
                               : std::string();
  for (int p : config_.peers) {
    u.send_own(p, u.leaving_out.data(), u.leaving_out.size(), ucx_tag(u.self, kLeavingTag),
               u.leavings_out);
  }
}

bool UcxNetwork::await_failure_published(std::chrono::milliseconds limit) {
  return board_.await_published(limit);
}

bool UcxNetwork::await_notice_acks() {
  std::lock_guard lock(mu_);
  return ucx_->await_notice_acks();
}

std::optional<FailureRecord> UcxNetwork::notice_locked() {
  Ucx& u = *ucx_;
  if (u.notices_examined == u.notices_completed) return received_notice_;
  const uint64_t completed = u.notices_completed;
  bool took_one = false;  // one a round, as before: the next round looks again
  for (size_t p = 0; p < u.notices_in.size() && !took_one; ++p) {
    Ucx::NoticeSlot& slot = u.notices_in[p];
    if (slot.pending == nullptr) continue;
    ucp_tag_recv_info_t info{};
    const ucs_status_t status = ucp_tag_recv_request_test(slot.pending, &info);
    if (status == UCS_INPROGRESS) continue;
    ucp_request_free(slot.pending);
    slot.pending = nullptr;
    if (status != UCS_OK) continue;
    std::optional<FailureRecord> record =
        decode_failure_record(std::string(slot.buffer.data(), info.length));
    if (!record) continue;
    // Tells the sender it may close its connections now (see notify_failure).
    u.acknowledge_notice(static_cast<int>(p));
    received_notice_ = std::move(record);
    took_one = true;
  }
  if (!took_one) u.notices_examined = completed;
  return received_notice_;
}

UcxNetwork::~UcxNetwork() {
  // Before the worker goes: UCX releases a request freed in flight once it completes or is
  // cancelled with its endpoint.
  if (push_flush_ != nullptr) ucp_request_free(push_flush_);
}

void UcxNetwork::send_beat(int peer, const std::optional<Fingerprint>& in_call) {
  auto copy = in_call ? std::make_unique<Fingerprint>(*in_call) : nullptr;
  const void* data = copy.get();
  send_beat_message(peer, data, in_call ? sizeof(Fingerprint) : 0, std::move(copy));
}

void UcxNetwork::send_goodbye(int peer) {
  static const char kGoodbye = 1;
  send_beat_message(peer, &kGoodbye, 1, nullptr);
}

void UcxNetwork::send_beat_message(int peer, const void* data, size_t bytes,
                                   std::unique_ptr<Fingerprint> owned) {
  check_peer(peer, "send a heartbeat to");
  std::lock_guard lock(mu_);
  Ucx& u = *ucx_;
  std::erase_if(u.beats_out, [](const Ucx::BeatOut& beat) {
    if (ucp_request_check_status(beat.request) == UCS_INPROGRESS) return false;
    ucp_request_free(beat.request);
    return true;
  });
  if (!u.connected(peer)) return;
  ucp_request_param_t param{};
  ucs_status_ptr_t sent =
      ucp_tag_send_nbx(u.endpoints[peer], data, bytes, ucx_tag(config_.rank, kBeatTag), &param);
  if (sent != nullptr && !UCS_PTR_IS_ERR(sent)) u.beats_out.push_back({sent, std::move(owned)});
}

UcxNetwork::Heard UcxNetwork::heard_from(int peer) {
  check_peer(peer, "listen for heartbeats of");
  std::lock_guard lock(mu_);
  Ucx& u = *ucx_;
  u.progress();
  Ucx::BeatSlot& slot = u.beats_in[peer];
  for (;;) {  // take every beat that arrived, keeping one receive posted
    if (slot.pending == nullptr) {
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
      ucs_status_ptr_t posted = ucp_tag_recv_nbx(u.worker, &slot.buffer, sizeof slot.buffer,
                                                 ucx_tag(peer, kBeatTag), ~uint64_t{0}, &param);
      if (UCS_PTR_IS_ERR(posted)) break;
      slot.pending = posted;
    }
    ucp_tag_recv_info_t info{};
    const ucs_status_t status = ucp_tag_recv_request_test(slot.pending, &info);
    if (status == UCS_INPROGRESS) break;
    ucp_request_free(slot.pending);
    slot.pending = nullptr;
    if (status != UCS_OK) break;
    slot.heard.last = Clock::now();
    if (info.length == 1) slot.heard.gone = true;
    slot.heard.in_call.reset();
    if (info.length == sizeof slot.buffer) slot.heard.in_call = slot.buffer;
  }
  return slot.heard;
}

std::string UcxNetwork::describe_lanes(int peer) {
  check_peer(peer, "describe the lanes to");
  connect_on_first_use(peer);
  return printed([&](FILE* stream) {
    std::lock_guard lock(mu_);
    if (ucx_->endpoints[peer] != nullptr) ucp_ep_print_info(ucx_->endpoints[peer], stream);
  });
}

Error UcxNetwork::truncated(int peer, size_t bytes) const {
  return Error(ErrorCode::mismatch, config_.label + ": " + config_.names(peer) +
                                        " sent more than the " + std::to_string(bytes) +
                                        " bytes expected (do the ranks call the same operation "
                                        "with the same counts?)");
}

void UcxNetwork::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= config_.size || peer == config_.rank) {
    throw Error(ErrorCode::internal, config_.label + ": cannot " + what + " rank " +
                                         std::to_string(peer) + " over the network");
  }
}

NetRequest UcxNetwork::send(int peer, uint64_t tag, const void* data, size_t bytes) {
  check_peer(peer, "send to");
  connect_on_first_use(peer);
  std::lock_guard lock(mu_);
  NetRequest request{nullptr, peer, true, bytes};
  request.data = data;
  if (!started_since_push_.load(std::memory_order_relaxed)) {
    started_since_push_.store(true, std::memory_order_relaxed);
    if (ucx_->sleepers.load() > 0) ucp_worker_signal(ucx_->worker);  // a heartbeat asleep: push
  }
  ucp_ep_h ep = ucx_->endpoints[peer];
  if (ep == nullptr || tag > kMaxTag) {
    throw_known_failure_locked("sending to " + config_.names(peer));
    throw Error(ErrorCode::internal, config_.label + ": no network endpoint for rank " +
                                         std::to_string(peer) + " (or tag out of range)");
  }
  if (ucx_->uses_put(peer)) {
    request.via_put = true;
    request.pending = ucx_->put_protocol->send(peer, tag, data, bytes);
    return request;
  }
  ucp_request_param_t param{};
  ucs_status_ptr_t started = ucp_tag_send_nbx(ep, data, bytes, ucx_tag(config_.rank, tag), &param);
  if (UCS_PTR_IS_ERR(started)) {
    // The endpoint failed: often because the peer's communicator failed first and closed it, or
    // as the consequence of a failure elsewhere, whose notice is waited for as a failed transfer
    // waits for it (NetworkConfig::notice_wait).
    explain_failed_connection_locked(peer, config_.label + ": sending to " + config_.names(peer),
                                     [](const auto& error) { throw error; });
    throw Error(ErrorCode::peer_died,
                ucx_->lost_text(peer, UCS_PTR_STATUS(started)) + ", sending to it");
  }
  request.pending = started;  // null: done already
  return request;
}

NetRequest UcxNetwork::recv(int peer, uint64_t tag, void* data, size_t bytes, uint64_t any_bits) {
  check_peer(peer, "receive from");
  connect_on_first_use(peer);  // a receive needs no endpoint, but the peer's failures do
  std::lock_guard lock(mu_);
  NetRequest request{nullptr, peer, false, bytes};
  request.data = data;
  if (ucx_->uses_put(peer)) {
    request.via_put = true;
    request.pending = ucx_->put_protocol->recv(peer, tag, data, bytes, any_bits);
    return request;
  }
  // Always a request, never an immediate completion: UCX 1.13 does not report the length of a
  // receive that completes at once (recv_info stays untouched), and the length is checked.
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  ucs_status_ptr_t started =
      ucp_tag_recv_nbx(ucx_->worker, data, bytes, ucx_tag(peer, tag), ~any_bits, &param);
  if (UCS_PTR_IS_ERR(started)) {
    const ucs_status_t status = UCS_PTR_STATUS(started);
    if (status == UCS_ERR_MESSAGE_TRUNCATED) throw truncated(peer, bytes);
    throw_known_failure_locked("receiving from " + config_.names(peer));
    throw Error(ErrorCode::system, config_.label + ": receiving from " + config_.names(peer) +
                                       " failed: " + status_text(status));
  }
  request.pending = started;
  return request;
}

std::optional<RootCauseError> UcxNetwork::known_failure_locked(
    const std::function<std::string()>& context) {
  if (own_failure_) return RootCauseError(context() + ": the communicator failed", *own_failure_);
  if (std::optional<FailureRecord> notice = notice_locked())
    return RootCauseError(context() + ": a rank on another host failed", *notice);
  return std::nullopt;
}

std::optional<RootCauseError> UcxNetwork::host_failure(
    const std::function<std::string()>& context) const {
  if (!host_failures_) return std::nullopt;
  std::optional<std::pair<std::string, FailureRecord>> failed = host_failures_();
  if (!failed) return std::nullopt;
  return RootCauseError(context() + ": " + failed->first + " on this host failed",
                        std::move(failed->second));
}

std::optional<RootCauseError> UcxNetwork::await_notice_locked(
    std::chrono::milliseconds limit, const std::function<std::string()>& context) {
  const auto give_up = Clock::now() + limit;
  while (true) {
    ucx_->progress();
    if (std::optional<RootCauseError> failure = known_failure_locked(context)) return failure;
    if (std::optional<RootCauseError> failure = host_failure(context)) return failure;
    if (std::optional<FailureRecord> record = board_.published())  // any rank's, this host's too
      return RootCauseError(context() + ": another rank failed first", std::move(*record));
    if (Clock::now() >= give_up) return std::nullopt;
    std::this_thread::yield();  // the ranks that would notify may need this core
  }
}

void UcxNetwork::throw_known_failure_locked(const std::string& what) {
  // One round of progress: a notice may be waiting to be taken.
  if (std::optional<RootCauseError> failure = await_notice_locked(
          std::chrono::milliseconds(0), [&] { return config_.label + ": " + what; }))
    throw *failure;
}

void UcxNetwork::cancel_locked(std::span<NetRequest> requests) {
  Ucx& u = *ucx_;
  for (NetRequest& r : requests) {
    if (r.pending == nullptr || !r.via_put) continue;
    u.put_protocol->cancel(static_cast<PutProtocol::Op*>(r.pending));
    r.pending = nullptr;
  }
  // A tagged send in flight stops only with its endpoint, and closing that resets the connection,
  // which can discard at the peer a failure notice it has not read yet: the peer would then blame
  // this rank's closed connection, not the cause. Where this rank told its peers of a failure
  // (notify_failure, which the layers above call before they leave transfers in flight), the
  // peers about to be cut are waited for (bounded) until they acknowledged it; the sends that
  // complete meanwhile need no cut.
  if (!u.notice_out.empty()) {
    std::vector<int> to_cut;
    for (const NetRequest& r : requests) {
      if (r.pending != nullptr && r.is_send) to_cut.push_back(r.peer);
    }
    if (!to_cut.empty()) u.await_notice_acks(to_cut);
  }
  for (NetRequest& r : requests) {
    if (r.pending == nullptr) continue;
    if (r.is_send && ucp_request_check_status(r.pending) != UCS_INPROGRESS) {
      ucp_request_free(r.pending);
      r.pending = nullptr;
    } else if (r.is_send) {
      u.close(r.peer, true);
    } else {
      ucp_request_cancel(u.worker, r.pending);
    }
  }
  const auto give_up = Clock::now() + kCancelLimit;
  for (NetRequest& r : requests) {
    if (r.pending == nullptr) continue;
    u.progress_until_done(r.pending, give_up);
    ucp_request_free(r.pending);
    r.pending = nullptr;
  }
}

void UcxNetwork::cancel(std::span<NetRequest> requests) {
  std::lock_guard lock(mu_);
  cancel_locked(requests);
}

UcxNetwork::Progress UcxNetwork::advance(std::span<NetRequest> requests, const WaitContext& ctx) {
  std::lock_guard lock(mu_);
  Ucx& u = *ucx_;
  // Every failure first stops what is still in flight, so no buffer is used once we throw. A
  // tagged send in flight is stopped by closing its endpoint, which would also cut the peer off
  // from the failure notice the communicator sends next (measured under load: the peer then
  // blamed this rank's exit, not the cause). Where that is about to happen, a failure found here
  // (not one another rank reported) is notified first; the pair is broken either way. `error` is
  // thrown as its own type: a RootCauseError thrown as an Error would lose its root, and whoever
  // relays it would relay its whole message, one more context per hop.
  auto fail = [&](const auto& error) {
    const bool cuts_a_send = std::any_of(requests.begin(), requests.end(), [](const NetRequest& r) {
      return r.pending != nullptr && r.is_send && !r.via_put;
    });
    constexpr bool reported_by_another =
        std::is_base_of_v<RootCauseError, std::decay_t<decltype(error)>>;
    if (cuts_a_send && !reported_by_another) {
      notify_failure_locked(root_of(error));
    }
    cancel_locked(requests);  // waits, bounded, until the peers it cuts took the notice
    throw error;
  };
  // A peer that destroyed its communicator (leave) while this rank still waits on it.
  auto fail_left = [&](int peer) { u.fail_left(peer, ctx.op_label(), fail); };
  // A connection to `peer` that failed: the peer, unless it said it left or a notice that comes
  // meanwhile explains the loss (NetworkConfig::notice_wait).
  auto connection_failure = [&](int peer, ucs_status_t status) {
    explain_failed_connection_locked(peer, ctx.op_label(), fail);
    return Error(ErrorCode::peer_died, ctx.op_label() + ": " + u.lost_text(peer, status));
  };
  // A transfer that failed with its connection: the caller's buffer first, which a zero-copy
  // transfer reads or writes in place (UCX over TCP meets freed or protected memory as EFAULT,
  // reports the connection failed and closes it, so the peer fails too: the notice must name
  // this rank's buffer, not the peer); else the connection.
  auto transfer_failure = [&](const NetRequest& r, ucs_status_t status) {
    if (r.data == nullptr || base::memory_readable(r.data, r.bytes) != false)
      return connection_failure(r.peer, status);
    char where[32];
    std::snprintf(where, sizeof where, "%p", r.data);
    return Error(ErrorCode::invalid_argument,
                 ctx.op_label() + ": " + config_.label + ", " + config_.names(config_.rank) +
                     ": the " + (r.is_send ? "send" : "receive") + " buffer of a transfer " +
                     (r.is_send ? "to" : "from") + " " + config_.names(r.peer) + " (" +
                     std::to_string(r.bytes) + " bytes at " + where + ") is not " +
                     (r.is_send ? "readable" : "accessible") +
                     ": freed or protected memory, where the operation needs it until it "
                     "completes");
  };
  u.progress_once();
  ++u.rounds;
  u.take_leavers();
  take_joins_locked();
  if (std::optional<RootCauseError> failure = known_failure_locked([&] { return ctx.op_label(); }))
    fail(*failure);
  if (u.put_protocol) {
    try {
      u.put_protocol->pump();
    } catch (const PutFailed& e) {
      fail(connection_failure(e.peer, e.status));
    } catch (const Error& e) {
      fail(Error(e.code(), ctx.op_label() + ": " + e.what()));
    }
  }
  auto wrong_length = [&](const NetRequest& r, size_t length) {
    return Error(ErrorCode::mismatch, ctx.op_label() + ": " + config_.names(r.peer) + " sent " +
                                          std::to_string(length) + " bytes where " +
                                          std::to_string(r.bytes) + " were expected");
  };
  Progress progress;
  for (NetRequest& r : requests) {
    if (r.pending == nullptr) continue;
    if (r.via_put) {
      auto* op = static_cast<PutProtocol::Op*>(r.pending);
      const PutProtocol::Status status = u.put_protocol->status(op);
      if (!status.done) {
        if (u.failures[r.peer] != UCS_OK) fail(transfer_failure(r, u.failures[r.peer]));
        if (u.left_before_this_round(r.peer)) fail_left(r.peer);
        progress.done = false;
        continue;
      }
      u.put_protocol->finish(op);
      r.pending = nullptr;
      r.received_tag = status.received_tag;
      progress.completed = true;
      if (status.truncated) fail(truncated(r.peer, r.bytes));
      if (!r.is_send && status.received_bytes != r.bytes)
        fail(wrong_length(r, status.received_bytes));
      continue;
    }
    ucp_tag_recv_info_t info{};
    const ucs_status_t status = r.is_send ? ucp_request_check_status(r.pending)
                                          : ucp_tag_recv_request_test(r.pending, &info);
    if (status == UCS_INPROGRESS) {
      if (u.failures[r.peer] != UCS_OK) fail(transfer_failure(r, u.failures[r.peer]));
      if (u.left_before_this_round(r.peer)) fail_left(r.peer);
      progress.done = false;
      continue;
    }
    ucp_request_free(r.pending);
    r.pending = nullptr;
    if (!r.is_send) r.received_tag = info.sender_tag & kMaxTag;
    progress.completed = true;
    if (status == UCS_ERR_MESSAGE_TRUNCATED) fail(truncated(r.peer, r.bytes));
    if (status != UCS_OK) {
      fail(transfer_failure(r, u.failures[r.peer] != UCS_OK ? u.failures[r.peer] : status));
    }
    if (!r.is_send && info.length != r.bytes) fail(wrong_length(r, info.length));
  }
  progress.generation = u.generation;
  return progress;
}

void UcxNetwork::push_unsent() {
  const bool started = started_since_push_.exchange(false, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  if (!started && push_flush_ == nullptr) return;
  push_again_ |= started;
  if (push_flush_ != nullptr) {
    if (ucp_request_check_status(push_flush_) == UCS_INPROGRESS) return;
    ucp_request_free(push_flush_);
    push_flush_ = nullptr;
  }
  if (!push_again_) return;
  push_again_ = false;
  // Done at once (null) where nothing of those sends is left; an error (a failed endpoint) is
  // for the waits to report.
  ucp_request_param_t param{};
  ucs_status_ptr_t flush = ucp_worker_flush_nbx(ucx_->worker, &param);
  if (UCS_PTR_IS_PTR(flush)) push_flush_ = flush;
}

void UcxNetwork::wait_for_news(std::chrono::milliseconds limit, uint64_t seen_generation,
                               int also) {
  {
    std::lock_guard lock(mu_);
    if (ucx_->generation != seen_generation) return;  // another thread moved something: look
    // UCS_ERR_BUSY: there are events to progress first.
    if (ucp_worker_arm(ucx_->worker) != UCS_OK) return;
    ucx_->sleepers.fetch_add(1);  // from here, whoever moves something signals the worker
  }
  pollfd fds[2] = {{ucx_->event_fd, POLLIN, 0}, {also, POLLIN, 0}};
  ::poll(fds, also >= 0 ? 2 : 1, static_cast<int>(limit.count()));
  ucx_->sleepers.fetch_sub(1);
}

uint64_t UcxNetwork::rounds() const {
  std::lock_guard lock(mu_);
  return ucx_->rounds;
}

bool UcxNetwork::has_unsent() const {
  if (started_since_push_.load(std::memory_order_relaxed)) return true;
  std::lock_guard lock(mu_);
  return push_flush_ != nullptr || push_again_;
}

bool UcxNetwork::Idle::should_sleep() {
  if (++rounds_ < kSpinsBeforeYield) return false;
  if (oversubscribed_) return true;
  const Clock::time_point now = Clock::now();
  if (!sleep_from_) sleep_from_ = now + kYieldFor;
  if (now >= *sleep_from_) return true;
  std::this_thread::yield();
  return false;
}

void UcxNetwork::wait_all(std::span<NetRequest> requests, const WaitContext& ctx,
                          const std::function<bool()>& between_rounds) {
  std::optional<Clock::time_point> deadline;
  Idle idle = this->idle();
  for (;;) {
    const Progress progress = advance(requests, ctx);
    if (progress.done) return;
    const bool news = between_rounds && between_rounds();
    if (progress.completed || news) {
      idle.progressed();
      continue;
    }
    if (!idle.should_sleep()) continue;
    // A failure a host-mate recorded ends this wait as it ends the host's shared-memory steps:
    // a rank whose transfer waits on a peer that stopped (a root sending to another host's
    // leader, say) hears of it from the host-mate that watches that peer, not over the network.
    if (std::optional<RootCauseError> failure = host_failure([&] { return ctx.op_label(); })) {
      cancel(requests);
      throw *failure;
    }
    if (std::optional<RootCauseError> lost = lost_peer_failure(requests, ctx)) {
      cancel(requests);
      throw *lost;
    }
    if (!deadline) deadline = ctx.deadline();
    if (Clock::now() >= *deadline) {
      std::vector<int> missing;
      for (const NetRequest& r : requests)
        if (r.pending != nullptr) missing.push_back(r.peer);
      std::sort(missing.begin(), missing.end());
      missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
      cancel(requests);
      throw Error(ErrorCode::timeout, ctx.op_label() + ": timed out over the network waiting for " +
                                          config_.names.list(missing) +
                                          " (stopped, unreachable, or not calling the same "
                                          "operation)");
    }
    // Until the network has news, or 1 ms passes (the deadline, and peers failed meanwhile).
    wait_for_news(std::chrono::milliseconds(1), progress.generation);
    idle.slept();
  }
}

std::optional<RootCauseError> UcxNetwork::lost_peer_failure(std::span<const NetRequest> requests,
                                                            const WaitContext& ctx) const {
  if (!config_.peer_lost) return std::nullopt;
  for (const NetRequest& r : requests) {
    if (r.pending == nullptr) continue;
    if (std::optional<FailureRecord> record = config_.peer_lost(r.peer))
      return RootCauseError(ctx.op_label() + ": " + config_.names(r.peer) + " was found lost",
                            std::move(*record));
  }
  return std::nullopt;
}

std::vector<std::string> recent_ucx_errors() { return UcxErrorLines::instance().recent(); }

void keep_ucx_error(std::string line) { UcxErrorLines::instance().keep(std::move(line)); }

}  // namespace tpf::transport
