// The network between hosts: tagged messages between the ranks of one communicator, over UCX's
// ucp API (the engine Open MPI, MPICH and UCC use). UCX picks the lanes: RDMA where the hardware
// has it, TCP where it does not; the transports it may use are configured here and are network
// transports only, so that ranks in network namespaces of one machine really cross their links
// (UCX would otherwise find shared memory between them and bypass the links).
//
// This header names no UCX type: ucx_network.cc is the only file that includes UCX, so another
// engine (libfabric, say) is one more class with the same interface.
//
// Wire-up: each rank publishes its UCX worker address in the communicator's store under
// "net/<rank>". It connects to the peers NetworkConfig::connect_first names while the network is
// made (their addresses in one read of the store, then a first message each way), and to any
// other peer on first use: its first send to or receive from that peer reads the peer's address
// from the store and sends a join carrying its own, with which the peer connects back (a receive
// kept posted for joins from any rank), so both ends can tell each other of failures and of
// leaving. A full mesh made up front costs a job N^2 connections and address reads where its
// collectives use the rails and the leaders' mesh: 264 ranks on 33 forced hosts of 8 on this
// 2-core machine made a communicator in 8.4-17.5 s with the mesh, 3.5-3.6 s with the first peers
// of comm/comm_impl.h (bench/net/setup_scale.sh 8 264). Open MPI's UCX layer and NCCL also
// connect on demand. TPF_NET_CONNECT=all (comm/settings.h) makes every peer a first one.
//
// Two protocols carry send() and recv(), chosen per pair of ranks (net_protocol.h):
// - tagged messages (what TCP serves best): a 64-bit UCX tag holds the sender's rank in the top
//   kRankBits bits and the caller's tag below; a receive names its peer and tag, so it matches
//   only that peer's message;
// - put + signal into registered slots (what RDMA serves best; transport/put_protocol.h): each
//   rank also publishes its region's address and remote key under "netput/<rank>". Only the
//   put peers (NetworkConfig::put_peers) get slots there; the other pairs go tagged.
// Both match messages to receives the same way, so callers cannot tell them apart. Failure
// notices and heartbeats always travel as tagged messages. Over TCP, put is for testing: UCX 1.13
// emulates puts with messages and aborts a process that must acknowledge one on an endpoint that
// has failed (docs/fabric.md), so `automatic` picks put on RDMA lanes only.
//
// Failures: endpoints use UCX's peer error mode, so a peer process that dies is reported within
// milliseconds; a receive from it would never complete by itself, so the wait cancels it and
// fails naming the rank. A stopped or unreachable peer is not detected by UCX over TCP: the
// caller's deadline bounds every wait. After a failure the network is unusable. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tpf/store.h"
#include "transport/failure_board.h"
#include "transport/net_protocol.h"
#include "transport/rank_names.h"
#include "transport/shm_fabric.h"

namespace tpf::transport {

// knem and xpmem are left out of the list: UCX warns about every named transport it lacks.
inline constexpr const char* kNetworkTransports = "^posix,sysv,cma,self";
// A connection that failed is often the consequence of a failure elsewhere whose notice is on its
// way from another rank: the peer's own buffer failed the transfer and UCX closed the connection,
// or the peer crashed and its host-mates saw it. Those notify within milliseconds (1-7 ms measured
// on two hosts of two), so a rank that meets the failed connection waits this long for such a
// notice before it names the peer lost; a loss nobody explains is named this much later.
inline constexpr std::chrono::milliseconds kDefaultNoticeWait{500};

struct NetworkConfig {
  int rank = 0;
  int size = 1;
  std::vector<int> peers;        // the ranks this rank exchanges messages with (other hosts)
  // The peers connected while the network is made, each checked with a first message each way
  // (an unreachable one fails the setup, naming it); the others are connected on first use.
  // Symmetric: p lists q where q lists p. Unset: every peer.
  std::optional<std::vector<int>> connect_first;
  // Where put + signal is used: the peers given registered slots (put_protocol.h), 1 MiB each;
  // a pair uses put + signal only where each gives the other slots, and tagged messages
  // otherwise. The partners of the collectives' bulk transfers (coll::rail_partners), so that a
  // rank's slots grow with log H, not with the job. Symmetric, as connect_first. Unset: every
  // peer.
  std::optional<std::vector<int>> put_peers;
  std::shared_ptr<Store> store;  // the communicator's own (prefixed) store
  std::string label;             // "communicator 'w'", for errors
  std::chrono::milliseconds setup_timeout{30000};
  // UCX_TLS: every transport but the shared-memory ones (RDMA and TCP stay; self is not needed).
  std::string transports = kNetworkTransports;
  // UCX_NET_DEVICES: the devices to use ("all": UCX's default), from the communicator's settings
  // (UCX_NET_DEVICES, or TPF_RAIL_DEVICES by local rank).
  std::string devices = "all";
  NetProtocol protocol = NetProtocol::automatic;
  // Tagged messages up to this many bytes go eagerly, in one trip (UCX's RNDV_THRESH), unless the
  // environment sets UCX_RNDV_THRESH; 0: UCX's own threshold.
  size_t eager_bytes = 0;
  // More ranks on this machine than cores (emulated hosts of one machine count together): a wait
  // sleeps after its spin instead of yielding the core between polls (wait_all).
  bool oversubscribed = false;
  // How long a rank whose peer's connection failed waits for a notice that explains it
  // (kDefaultNoticeWait; TPF_NET_NOTICE_WAIT_S).
  std::chrono::milliseconds notice_wait = kDefaultNoticeWait;
  // The record that found rank r's process lost (a heartbeat named it, here or in another
  // communicator of this process: comm/process_failures.h), if one did: it is sent no failure
  // notice, its acknowledgement of one is not waited for, its connection closes without a flush,
  // and a wait for it ends with that cause (one that began while the network was being made,
  // which no communicator can fail yet). Empty: none is.
  std::function<std::optional<FailureRecord>(int rank)> peer_lost;
  RankNames names;  // how messages name ranks (with their numbers in the job where those differ)
  // Per rank, its process as a lost connection names it: "pid 4242 on host 'b'". Empty: by
  // rank only.
  std::vector<std::string> process_names;
};

// One transfer started on the network; finished (or failed) by UcxNetwork::wait_all.
struct NetRequest {
  void* pending = nullptr;  // UCX's request while in flight; null once complete
  int peer = -1;
  bool is_send = false;
  size_t bytes = 0;
  uint64_t received_tag = 0;  // a completed receive: the tag the sender gave (below the rank bits)
  bool via_put = false;       // put + signal: `pending` is the put protocol's op
  const void* data = nullptr;  // the caller's buffer: named where the transfer failed on it
};

class UcxNetwork {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kRankBits = 20;                                // up to 1,048,576 ranks
  static constexpr int kTagBits = 64 - kRankBits;                     // tags below 2^44
  static constexpr uint64_t kMaxTag = (uint64_t{1} << kTagBits) - 1;  // the hello
  static constexpr uint64_t kNoticeTag = kMaxTag - 1;                 // failure notices
  static constexpr uint64_t kBeatTag = kMaxTag - 2;                   // heartbeats
  static constexpr uint64_t kNoticeAckTag = kMaxTag - 3;              // "your notice arrived"
  static constexpr uint64_t kLeavingTag = kMaxTag - 4;                // leave()
  static constexpr uint64_t kJoinTag = kMaxTag - 5;                   // a connection on first use
  // The largest join: a worker address and a put publication of one block (a few hundred bytes
  // over TCP) fit many times over.
  static constexpr size_t kMaxJoinBytes = size_t{64} << 10;
  static constexpr size_t kMaxNoticeBytes = 1024;

  explicit UcxNetwork(NetworkConfig config);
  ~UcxNetwork();
  // How messages name the communicator's ranks (NetworkConfig::names).
  const RankNames& names() const noexcept { return config_.names; }
  UcxNetwork(const UcxNetwork&) = delete;
  UcxNetwork& operator=(const UcxNetwork&) = delete;

  // Start a transfer; `data` must stay valid until wait_all returns for it.
  NetRequest send(int peer, uint64_t tag, const void* data, size_t bytes);
  // `any_bits`: tag bits a message may differ in and still match (the caller checks them in
  // received_tag once the receive is complete).
  NetRequest recv(int peer, uint64_t tag, void* data, size_t bytes, uint64_t any_bits = 0);
  // Progresses until every request is complete. Throws Error(peer_died) naming the peer whose
  // connection failed, Error(timeout) at the deadline naming the peers whose transfers did not
  // finish, Error(mismatch) if a message's size differs from the receive's. On any error the
  // requests are cancelled first: none uses its buffer any more when this returns or throws.
  // `between_rounds`, if given, runs after every round of progress: the caller may start more
  // transfers there (the next sends of a window, say); it returns whether it did anything.
  void wait_all(std::span<NetRequest> requests, const WaitContext& ctx,
                const std::function<bool()>& between_rounds = nullptr);

  // The steps of wait_all, for callers that wait on several things (async point-to-point):
  // one round of progress, completing what finished (throws as wait_all does, minus the
  // deadline, which is the caller's); stopping what is in flight; sleeping until the network may
  // have news, at most `limit`, or not at all where the worker moved on since `seen_generation`
  // (another thread's progress may have completed the caller's requests).
  struct Progress {
    bool done = true;         // nothing of the requests is in flight
    bool completed = false;   // something completed in this round
    uint64_t generation = 0;  // the worker's rounds that moved something, after this one
  };
  Progress advance(std::span<NetRequest> requests, const WaitContext& ctx);
  // Moves on what UCX holds of the sends started so far, for a sender that does not wait for
  // them (a small broadcast's root, a reduce's sender: they go on). A send UCX reports done at
  // once may leave the tail of its message in UCX's buffer (over TCP, what a full socket did not
  // take), and sends queued behind it start only when the worker is progressed. Called by the
  // heartbeat thread every kPushEvery (comm/heartbeat.h) right after its round of progress
  // (advance): where sends started since its last call, it asks for a flush
  // (ucp_worker_flush_nbx), whose later rounds of progress push them on; otherwise nothing.
  void push_unsent();
  static constexpr std::chrono::milliseconds kPushEvery{20};
  // Stops the requests still in flight: cancels receives; a tagged send stops only with its
  // endpoint (closed), so where this rank has sent a failure notice, first waits (bounded) until
  // the peers it would cut acknowledged it, and cuts only the sends still in flight then. A layer
  // that leaves its transfers because of a failure found outside the network's waits calls
  // notify_failure first, or the peers it cuts blame the closed connection.
  void cancel(std::span<NetRequest> requests);
  // `also`, where given, is one more descriptor whose readability ends the sleep (a thread's
  // own stop signal: the worker's may be taken by another sleeper).
  void wait_for_news(std::chrono::milliseconds limit, uint64_t seen_generation, int also = -1);
  // Whether sends started since push_unsent's last call, or its flush is still in progress: the
  // heartbeat keeps its kPushEvery rounds until none is (a send that starts meanwhile wakes a
  // thread asleep in wait_for_news).
  bool has_unsent() const;
  // Rounds of progress taken so far (advance, by any thread): what an idle communicator costs.
  uint64_t rounds() const;
  // What a wait does between rounds of progress that completed nothing: the next round at once,
  // a few dozen times; then, with a core to itself, yields the core between rounds for a
  // millisecond; then sleeps (wait_for_news). One per wait; progress starts it over.
  class Idle {
   public:
    explicit Idle(bool oversubscribed) : oversubscribed_(oversubscribed) {}
    void progressed() {
      rounds_ = 0;
      sleep_from_.reset();
    }
    // After a round that completed nothing: true where the caller should sleep now (then
    // call slept()); otherwise it has yielded, or need not.
    bool should_sleep();
    void slept() { rounds_ = 0; }

   private:
    bool oversubscribed_;
    int rounds_ = 0;
    std::optional<Clock::time_point> sleep_from_;  // the yields' end, since the last progress
  };
  Idle idle() const { return Idle(config_.oversubscribed); }

  // Where the failures of this rank's host-mates are recorded (the host's shared memory:
  // ShmFabric::peer_failure): a rank whose connection failed takes one of them as its cause as it
  // takes a notice (await_notice_locked). A host-mate learns of a failure on another host over
  // its own connections, which a closed connection of this rank's does not cut, and records it
  // (the communicator's record_failure). Set once, before the network is used.
  using HostFailures = std::function<std::optional<std::pair<std::string, FailureRecord>>()>;
  void set_host_failures(HostFailures host_failures) { host_failures_ = std::move(host_failures); }

  // Tells every peer that this rank's communicator failed (once; later calls do nothing): their
  // waits then fail at once with this record as the root cause (RootCauseError), instead of at
  // their deadlines. Best effort, bounded: a peer that cannot be reached still has its deadline.
  // This rank's own waits in progress (other threads) fail the same way. Each peer acknowledges
  // the notice when it takes it, and the destructor waits (bounded) for those acknowledgements
  // before closing the connections: closing a TCP connection with data still unread resets it,
  // and the reset can discard the notice at the peer, which would then blame this rank's exit.
  // The record also goes to the communicator's store (FailureBoard), where a rank whose
  // connection failed looks for it while it waits for a notice (await_notice_locked).
  void notify_failure(const FailureRecord& record);
  // The communicator's creation failed: nothing sent is awaited, so the destructor closes the
  // connections at once, as after a failure, instead of flushing them (a flush waits up to 10 s
  // on a peer that is stopped).
  void creation_failed();
  // Waits at most `limit` until notify_failure's record reached the store; false if it did not.
  bool await_failure_published(std::chrono::milliseconds limit);
  // Waits, bounded (2 s), until every peer notify_failure told acknowledged the notice or lost
  // its connection, acknowledging meanwhile the notices that arrive here (peers that failed at
  // the same moment wait for each other). False if the bound ran out. The destructor does this.
  bool await_notice_acks();

  // Tells every peer that this rank sends and receives nothing more (its communicator is being
  // destroyed, after its last transfer): a peer's transfer with it still waiting then fails at
  // once with Error(mismatch) naming it (peer_left: the ranks' calls differ), not at the deadline
  // or blaming the connection it closes next. `failed_first`: the failure this rank's process met
  // first on another communicator, the likely reason it leaves, which those peers report as their
  // root cause. Nothing after a failure (notify_failure told the peers). Sends only: the closes
  // in the destructor deliver the messages, behind everything this rank sent before.
  void leave(const std::optional<FailureRecord>& failed_first);

  // Heartbeats (comm/heartbeat.h): a message to `peer` carrying the collective this rank is in
  // (`in_call`, or nothing outside one), or one saying this rank is leaving (goodbye), and what
  // this rank last heard from `peer`. The first call about a peer starts listening to it (one
  // receive kept posted); heard is unset until a beat arrives.
  void send_beat(int peer, const std::optional<Fingerprint>& in_call = std::nullopt);
  void send_goodbye(int peer);
  struct Heard {
    std::optional<Clock::time_point> last;
    bool gone = false;                   // it said goodbye
    std::optional<Fingerprint> in_call;  // what its latest beat said it was in
  };
  Heard heard_from(int peer);

  // Whether transfers with `peer` use put + signal (else tagged messages); connects to it first,
  // as a transfer would, where it is not yet.
  bool uses_put(int peer);
  // The bytes of slots this rank registered for put + signal (0 where it uses tagged messages
  // only): a block of SlotLayout::block_bytes() per put peer (NetworkConfig::put_peers).
  size_t put_slot_bytes() const;

  // UCX's description of the lanes (transport and device per lane) of the endpoint to `peer`;
  // connects to it first where it is not yet.
  std::string describe_lanes(int peer);

  // The peers this rank has connected to so far (made here, or connected back on their join), in
  // rank order.
  std::vector<int> connected_peers() const;

 private:
  struct Ucx;
  // Put + signal wire-up: register this rank's slots and say where they are; take a peer's.
  std::string publish_region();
  void use_put_with(int peer, const std::string& published);
  void start_put_protocol();
  bool is_put_peer(int peer) const;  // put_peers_ lists it
  // Connects to `peer` from what it published (its address, hex; its put publication, or empty
  // for tagged messages); the caller then listens for its failure notices (mu_ held, or no other
  // thread yet). False where UCX could not make the endpoint (why: its failures by rank); throws
  // if what the peer published is malformed.
  bool connect_locked(int peer, const std::string& address, const std::string& put_published);
  // A transfer with `peer` about to start: where this rank has not connected to it, reads its
  // address from the store (bounded by setup_timeout; mu_ not held, so the heartbeat and other
  // transfers go on meanwhile), connects and sends it a join.
  void connect_on_first_use(int peer);
  // Connects back to the peers whose joins arrived (mu_ held; after a round of progress).
  void take_joins_locked();
  // What `peers` published (address; put publication where this rank offers put, else empty), in
  // one request to the store, bounded by setup_timeout; an error names `what` (no lock held).
  struct Published {
    std::string address;
    std::string put;
  };
  std::vector<Published> read_published(std::span<const int> peers, const std::string& what);
  void check_peer(int peer, const char* what) const;
  void cancel_locked(std::span<NetRequest> requests);
  void notify_failure_locked(const FailureRecord& record);
  // The failure a peer announced, if one has (mu_ held).
  std::optional<FailureRecord> notice_locked();
  // A failure a rank on this host recorded, if one has (set_host_failures), as the root cause of
  // what `context()` names.
  std::optional<RootCauseError> host_failure(const std::function<std::string()>& context) const;
  // The loss of a peer that one of `requests` still waits on (NetworkConfig::peer_lost), as the
  // wait's root cause.
  std::optional<RootCauseError> lost_peer_failure(std::span<const NetRequest> requests,
                                                  const WaitContext& ctx) const;
  // The failure this rank recorded or a peer announced, if any, as the root cause of what
  // `context()` names (mu_ held). The name is built only for a failure: every network wait asks
  // on every round, and building it there took ~5 % of a 4 x 2-rank reduce_scatter's CPU.
  std::optional<RootCauseError> known_failure_locked(const std::function<std::string()>& context);
  // Waits up to `limit` for a failure known_failure_locked reports (a notice from any peer), one
  // a rank on this host recorded (host_failure), or the one the communicator's store holds
  // (board_), progressing the worker (mu_ held).
  std::optional<RootCauseError> await_notice_locked(std::chrono::milliseconds limit,
                                                    const std::function<std::string()>& context);
  // Hands `fail` what explains a failed connection to `peer`, if anything does (mu_ held): its
  // leaving message (it destroyed its communicator and closed its connections), or a failure
  // notice that comes within NetworkConfig::notice_wait; `context` names the caller in either.
  // Where it returns, nothing did, and the caller names the peer lost.
  template <class Fail>
  void explain_failed_connection_locked(int peer, const std::string& context, Fail&& fail);
  // Throws it, after taking any notice that arrived, for `what` failing at once (mu_ held): a
  // connection that failed because its peer's communicator failed first must not be blamed on
  // that peer.
  void throw_known_failure_locked(const std::string& what);
  Error truncated(int peer, size_t bytes) const;
  // A beat or goodbye of `bytes` at `data`, which `owned` (if set) keeps until the send is done.
  void send_beat_message(int peer, const void* data, size_t bytes,
                         std::unique_ptr<Fingerprint> owned);
  NetworkConfig config_;
  bool wants_put_ = false;  // this rank offers put + signal (NetworkConfig::protocol, the lanes)
  std::vector<int> put_peers_;  // NetworkConfig::put_peers, resolved: a block for each
  std::string address_;     // this rank's worker address, hex, as published and sent in joins
  FailureBoard board_;  // this communicator's first failure in its store
  std::unique_ptr<Ucx> ucx_;
  // UCX's worker runs SERIALIZED: one thread inside it at a time (collectives and point-to-point
  // transfers wait on it from different threads). Not held while sleeping on its event fd.
  mutable std::mutex mu_;
  std::optional<FailureRecord> received_notice_;
  HostFailures host_failures_;                   // set once, before the network is used
  std::optional<FailureRecord> own_failure_;     // notify_failure's record: fails this rank's waits
  std::atomic<bool> started_since_push_{false};  // a send started since push_unsent's last call
  void* push_flush_ = nullptr;                   // its flush in progress (mu_)
  bool push_again_ = false;  // sends started while that flush was in progress (mu_)
};

// UCX's error lines ("UCX  ERROR ..."). tpf's own error says what a failed connection means
// (which rank, and why), and the line UCX prints beside it ("connection establishment for socket
// fd 18 was unsuccessful") reads like a second problem. So tpf takes UCX's error lines in: a
// failure while a network is made carries those its thread met in its message ("UCX said: ..."),
// and the latest kKeptUcxErrors go into the flight recorder's dumps; none is printed. Unless the
// user set UCX_LOG_LEVEL (read as each network is made): UCX then prints its log as asked.
// Warnings (UCX's word on the user's own UCX_ variables, say) and fatal errors always print. The
// handler is the process's: another library's UCX in the process (Open MPI's) loses its error
// lines to it too, unless UCX_LOG_LEVEL is set.
inline constexpr size_t kKeptUcxErrors = 8;
// The latest UCX error lines of this process, oldest first.
std::vector<std::string> recent_ucx_errors();
// Keeps `line` among them (the log handler's own step; callable for a test).
void keep_ucx_error(std::string line);

}  // namespace tpf::transport
