// The in-memory fabric of one communicator: every rank owns a shared-memory segment that all peers
// map. A segment holds the rank's control lines (step signal, doorbell, state, fingerprints) and
// its staging slots. Ranks write only their own segment and read the peers'.
//
// Collective protocol (one "step" = everyone writes its own slot, posts, waits for all, reads):
// - A step s uses slot s % 2. A rank finishes reading step s-1 before it posts step s, and writes
//   slot s % 2 for step s only after all peers posted s-1; so no slot is overwritten while read.
//   During the read phase of step s a rank may already fill slot (s+1) % 2 (all peers have posted s
//   and so finished reading step s-1 from it): pipelined algorithms use that.
// - Each post carries the operation's fingerprint; peers compare before touching data.
// Point-to-point: every ordered pair has a two-slot mailbox in the sender's segment, with a
// "sent" counter (sender's) and a "consumed" counter (receiver's).
// Eager messages (small collectives): every rank has two outbox rings, one of messages of up to
// kTinyBytes in half cache lines, one of messages of up to kEagerCapacity in runs of cache lines.
// Every line carries its own "written" flag, so a reader pays one cache miss per line and no
// separate signal. Every peer reads every message and acknowledges it through a "consumed" counter
// in its own segment; a writer waits only when its ring is full, so a broadcast root returns as
// soon as its message is written. Both sides pick the ring from the message size.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tpf/error.h"
#include "tpf/store.h"
#include "transport/peer_process.h"
#include "transport/rank_names.h"
#include "transport/shm_segment.h"
#include "transport/signal.h"
#include "transport/stopped_peers.h"

namespace tpf::transport {

// What an operation is, as compared between ranks. Plain data; the comm layer gives it meaning.
// Three words, so that a rank's step counter and both slots' fingerprints share one cache line:
// a waiting peer then takes a single cache miss to see the post and check the fingerprint.
struct Fingerprint {
  uint64_t words[3] = {0, 0, 0};
  bool operator==(const Fingerprint&) const = default;
};

// The deadline and the name of the operation being waited on, for error messages. The name is
// built only when an error needs it: operations are too short to format strings every time.
struct WaitContext {
  using Clock = std::chrono::steady_clock;
  // Either a fixed deadline, or a timeout whose clock starts at the first wait that is not
  // satisfied at once: reading the clock on every call would cost a tenth of a small broadcast,
  // and the deadline moves by at most the spin phase of that first wait (~100 us).
  static WaitContext with_deadline(Clock::time_point deadline,
                                   std::function<std::string()> describe_op);
  static WaitContext with_timeout(Clock::duration timeout,
                                  std::function<std::string()> describe_op);
  Clock::time_point deadline() const;
  std::string op_label() const { return describe_op ? describe_op() : std::string("operation"); }

  std::function<std::string()> describe_op;  // e.g. "all_reduce (sequence 7) on communicator 'w'"
  // Called while a shared-memory wait is past its spin phase, and the wait then sleeps in short
  // slices: a collective across hosts moves its network transfers on while it waits inside its
  // host (UCX over TCP sends only while someone progresses it). Empty: nothing to move.
  std::function<void()> between_polls;
  Clock::duration timeout{};
  mutable std::optional<Clock::time_point> fixed_deadline;
};

// What a failure was, as the rank that first saw it described it: the root cause. Ranks pass it
// on as data (never re-wrapped in their own messages), so every rank reports the same root.
struct FailureRecord {
  ErrorCode code = ErrorCode::internal;
  std::string message;
  // The process the failure found lost (stopped, or on a host cut off: comm/heartbeat.h), by its
  // base::this_process_token; 0 if it found none. Every process that learns the record knows
  // that process is gone, in each of its communicators (comm/process_failures.h).
  uint64_t lost_process = 0;
};

// A failure that is the loss of a process: `process` is its token (FailureRecord::lost_process).
// `rank`: its rank in the communicator, where the finder knows it before the communicator knows
// its ranks' processes (while it learns their hosts); -1 otherwise.
class ProcessLostError : public Error {
 public:
  ProcessLostError(ErrorCode code, const std::string& message, uint64_t process, int rank = -1)
      : Error(code, message), process_(process), rank_(rank) {}
  uint64_t process() const noexcept { return process_; }
  int rank() const noexcept { return rank_; }

 private:
  uint64_t process_;
  int rank_;
};

// An operation that failed because of an earlier failure (a peer failed, or exited after one):
// reported with the root cause's code, and carrying the root so that it is recorded as such.
class RootCauseError : public Error {
 public:
  RootCauseError(const std::string& context, FailureRecord root)
      : Error(root.code, context + ": " + root.message), root_(std::move(root)) {}
  const FailureRecord& root() const noexcept { return root_; }

 private:
  FailureRecord root_;
};

// An operation waiting on `who`, a peer that destroyed the communicator (it called fewer
// operations than this rank, or left before finishing one): a mismatch in the ranks' calls, named
// at once instead of at the deadline. `failed_first`: where the peer's process met a failure on
// another communicator before it left (ShmFabric::note_process_failure), the likely reason it
// left, reported as the root cause.
Error peer_left(const std::string& op_label, const std::string& who);
RootCauseError peer_left_after_failure(const std::string& op_label, const std::string& who,
                                       FailureRecord failed_first);

// The root cause `error` reports: the root it carries where it is a consequence of an earlier
// failure, else the error itself.
inline FailureRecord root_of(const Error& error) {
  if (const auto* consequence = dynamic_cast<const RootCauseError*>(&error))
    return consequence->root();
  if (const auto* loss = dynamic_cast<const ProcessLostError*>(&error))
    return {error.code(), error.what(), loss->process()};
  return {error.code(), error.what()};
}
// The same for any exception: one that is not a tpf::Error is an internal error, with its text.
FailureRecord root_of(const std::exception_ptr& error);

struct FabricConfig {
  int rank = 0;
  int size = 1;
  size_t slot_bytes = 0;         // bytes per collective staging slot (two per rank)
  // Bytes per point-to-point mailbox slot (two per peer; whole cache lines). 0: what
  // ShmFabric::mailbox_chunk_bytes gives for slot_bytes and size.
  size_t p2p_chunk_bytes = 0;
  std::string segment_prefix;    // from shm_job_prefix() plus the communicator's unique name
  std::string label;             // communicator description for messages
  std::shared_ptr<Store> store;  // keys are private to this communicator
  std::chrono::milliseconds setup_timeout{60000};
  int excess_ranks = 0;           // this rank's count of ranks on its machine beyond the cores
  bool asymmetric_fences = true;  // membarrier-based fences where every rank can register
  // Turns a fingerprint into words for a mismatch message.
  std::function<std::string(const Fingerprint&)> describe;
  // This fabric's rank r is the communicator's rank comm_ranks[r] (a fabric of one host's ranks in
  // a communicator across hosts); empty: the same numbers. Messages name communicator ranks,
  // as `names` says (with their numbers in the job where those differ).
  std::vector<int> comm_ranks;
  RankNames names;
  // Each communicator rank's process (base::this_process_token), which a loss names; and how long
  // a peer of this host may stay stopped before a rank waiting on it finds it lost (zero: never;
  // transport/stopped_peers.h).
  std::vector<uint64_t> processes;
  // Each communicator rank's pid as it published it with its host (0: not told; empty: none),
  // so that a peer that exits or stays stopped before it publishes its segment is found. A
  // peer's pid not given here is learned from its segment's entry.
  std::vector<int64_t> pids;
  std::chrono::milliseconds stopped_lost_after{0};
  // The same while the fabric is set up, where it may differ: a communicator across hosts leaves
  // its made waits to its heartbeat, which starts only once it is made (comm/heartbeat.h).
  std::chrono::milliseconds setup_stopped_lost_after{0};
  // Whether another part of the process owns finding a process lost (a heartbeat watches it):
  // such a peer is not looked at for being stopped. Empty: none is.
  std::function<bool(uint64_t process)> watched_elsewhere;
};

class ShmFabric {
 public:
  // The chunks of a rank's point-to-point mailboxes (FabricConfig::p2p_chunk_bytes) among `ranks`
  // ranks with staging slots of `slot_bytes`: a quarter of a slot, at most 256 KiB, but smaller
  // where the mailboxes (two chunks for every rank) would pass 8 MiB together, and not below
  // 4 KiB. A segment then grows by little per rank: with 64 KiB chunks whatever the count, 512
  // ranks on one machine needed 64 MiB each, 32 GiB together, and the OOM killer ended the job.
  // Up to 64 ranks (at the default slots) the chunks are a quarter of a slot, as they always were.
  static size_t mailbox_chunk_bytes(size_t slot_bytes, int ranks);

  explicit ShmFabric(FabricConfig config);
  ~ShmFabric();
  ShmFabric(const ShmFabric&) = delete;
  ShmFabric& operator=(const ShmFabric&) = delete;

  int rank() const noexcept { return config_.rank; }
  // The communicator's number for this fabric's rank r, and "rank N" / "ranks N, M" in it
  // (FabricConfig::names).
  int comm_rank(int r) const noexcept {
    return config_.comm_ranks.empty() ? r : config_.comm_ranks[r];
  }
  std::string rank_name(int r) const { return config_.names(comm_rank(r)); }
  std::string rank_names(const std::vector<int>& ranks) const;
  int size() const noexcept { return config_.size; }
  size_t slot_bytes() const noexcept { return config_.slot_bytes; }
  size_t p2p_chunk_bytes() const noexcept { return config_.p2p_chunk_bytes; }
  // More ranks than usable cores: waits yield at once and steps cost scheduler time.
  bool oversubscribed() const noexcept { return excess_ranks_ > 0; }
  // Ranks on this machine beyond its usable cores (0 when every rank has one), rank 0's view: the
  // all-reduce cost model charges each step per excess rank.
  int excess_ranks() const noexcept { return excess_ranks_; }

  // Collective steps.
  uint64_t begin_step() noexcept { return ++step_; }
  std::byte* slot(int rank, uint64_t step) const noexcept;
  // Posts `step` with `fp`, waits until every rank posted it, and checks their fingerprints.
  void post_and_wait_all(uint64_t step, const Fingerprint& fp, const WaitContext& ctx);

  // Eager messages (eager_messages.cc). `bytes` <= kEagerCapacity. Posting waits only for space.
  static constexpr size_t kEagerEntries = 16;  // line messages in flight per writer
  static constexpr size_t kEagerLines = 16;    // cache lines per line message
  static constexpr size_t kEagerCapacity = 32 + (kEagerLines - 1) * 56;  // bytes per message
  static constexpr size_t kEagerOneLineBytes = 32;  // a line message this small is one line
  static constexpr size_t kTinySlots = 64;          // tiny messages in flight per writer
  static constexpr size_t kTinyBytes = 16;          // bytes per tiny message
  void eager_post(const Fingerprint& fp, const void* data, size_t bytes, const WaitContext& ctx);
  // Waits until the next message of every rank in `from` is complete, and checks that it carries
  // `fp` (and therefore `bytes`).
  void eager_wait(std::span<const int> from, const Fingerprint& fp, size_t bytes,
                  const WaitContext& ctx);
  // Copies bytes [offset, offset + len) of `peer`'s waited-for message to `out`.
  void eager_read(int peer, size_t offset, size_t len, void* out) const noexcept;
  // Marks the waited-for messages of `from` consumed (their writers may reuse the entries).
  void eager_release(std::span<const int> from) noexcept;
  // Every rank but this one.
  std::span<const int> peers() const noexcept { return all_peers_; }
  // A buffer of at least `bytes` for the algorithms' own staging (reused between calls).
  std::byte* scratch(size_t bytes);

  // Point to point. Every ordered pair has a two-chunk mailbox; chunks are counted per pair and
  // direction. Nothing here waits: the comm layer's point-to-point engine polls these, so that a
  // rank's sends and receives progress independently of each other and of its collectives.
  // The mailbox slot for this rank's next chunk towards `peer`, or null while both are in use.
  std::byte* try_send_slot(int peer) const noexcept;
  // Publishes the chunk written into try_send_slot(peer), described by `fp`.
  void post_send(int peer, const Fingerprint& fp) noexcept;
  // The next chunk from `peer` and the sender's fingerprint of it, or null if it has not arrived.
  const std::byte* try_recv(int peer, Fingerprint* fp) const noexcept;
  // Hands the chunk try_recv(peer) returned back to its sender.
  void release_recv(int peer) noexcept;
  // Throws what keeps `peer` from ever completing a transfer with this rank: this rank aborted,
  // or the peer aborted, failed, died or was found lost (stopped).
  void check_p2p_peer(int peer, const WaitContext& ctx) const;
  // "; rank 2 (pid 4242) is stopped (...)" for those of `ranks` whose processes are stopped now,
  // "" if none: what a deadline's message adds about the peers it names.
  std::string stopped_note(std::span<const int> ranks) const;
  // Sleeps until a peer moves one of this rank's mailboxes, wake_p2p() is called, one sleep
  // slice passes (as in wait(): dead peers and deadlines are looked at between slices) or `until`
  // comes; returns at once if ready() holds once the sleep is announced (no lost wake-ups).
  void sleep_p2p(
      const std::function<bool()>& ready,
      std::chrono::steady_clock::time_point until = std::chrono::steady_clock::time_point::max());
  // Wakes sleep_p2p on this rank (from another thread of this process, after making it ready).
  void wake_p2p() noexcept;

  // Marks this rank failed: peers waiting on it fail fast, reporting `root`, and so do this
  // rank's own waits in progress (another thread of it may have found the failure: the
  // heartbeat, say).
  void mark_failed(const FailureRecord& root) noexcept;
  // Notes the first failure of this process on another communicator (kept until the segment
  // goes), so that peers who see this process exit can say why. The first note stays.
  void note_process_failure(const FailureRecord& root) noexcept;
  // The failure a peer of this rank recorded (mark_failed), if one has, with the peer's name
  // ("rank 3"; the lowest such peer): what may explain a connection of this rank's to another
  // host that failed meanwhile (UcxNetwork's wait for a notice asks it).
  std::optional<std::pair<std::string, FailureRecord>> peer_failure() const;
  // Marks this rank as gone from the communicator (unless it failed or aborted), waking the
  // peers: those waiting on it in an operation it will never join fail at once (peer_left).
  // Called as the communicator is destroyed, after its last transfer.
  void leave() noexcept;
  // Marks this rank aborted and wakes everyone, this rank's own waiters included.
  void abort() noexcept;
  bool aborted() const noexcept;

 private:
  struct Control;
  struct EagerLine;
  struct TinySlot;
  enum class Ring { lines, tiny };
  // What this rank knows of one of its eager rings and of the peers' rings of the same kind.
  struct RingState {
    uint64_t sent = 0;               // messages this rank posted
    uint64_t space = 0;              // messages every peer is known to have consumed
    std::vector<uint64_t> received;  // messages consumed from each peer
  };
  static Ring ring_for(size_t bytes) noexcept {
    return bytes <= kTinyBytes ? Ring::tiny : Ring::lines;
  }
  RingState& ring_state(Ring ring) noexcept { return ring == Ring::tiny ? tiny_ : lines_; }
  const RingState& ring_state(Ring ring) const noexcept {
    return ring == Ring::tiny ? tiny_ : lines_;
  }
  Control& control(int rank) const noexcept;
  // What `rank` recorded when it was marked failed (mark_failed), if it was.
  std::optional<FailureRecord> recorded_failure(int rank) const;
  std::byte* p2p_slot(int owner, int peer, uint64_t k) const noexcept;
  EagerLine* line_entry(int owner, uint64_t k) const noexcept;
  TinySlot* tiny_slot(int owner, uint64_t k) const noexcept;
  Fingerprint* tiny_fingerprint(int owner, uint64_t k) const noexcept;
  std::atomic<uint64_t>& consumed_signal(Ring ring, int reader, int writer) const noexcept;
  // Waits until every peer consumed message `needed - 1` of this rank's `ring`.
  void wait_for_ring_space(Ring ring, uint64_t needed, const WaitContext& ctx);
  // Peer's next unread message on `ring` is fully written: for the line ring, its first line and
  // the `lines` that a message carrying `fp` has (a different fingerprint counts as complete, so
  // that it is reported rather than waited for).
  bool message_complete(Ring ring, int peer, const Fingerprint& fp, size_t lines) const noexcept;
  // The fingerprint of peer's next unread message on `ring`, if it has been written.
  bool unread_message(Ring ring, int peer, Fingerprint* fp) const noexcept;
  // Orders this rank's posted signals before the doorbell checks that follow (a full fence, or a
  // compiler barrier when sleepers pay with heavy_fence()).
  void fence_after_post() const noexcept;
  // Stores a signal value that peers poll, then fence_after_post().
  void publish(std::atomic<uint64_t>& signal, uint64_t value) const noexcept;
  // Waits until arrived(p) holds for every p in `awaited`. In the slow path: abort, dead and
  // failed peers; a peer that has not arrived but shows a signal of another operation
  // (elsewhere(p, &its_fingerprint)) is a mismatch against `mine`; the deadline, naming the peers
  // that have not arrived.
  template <class Arrived, class Elsewhere>
  void wait(Arrived&& arrived, std::span<const int> awaited, const WaitContext& ctx,
            const Fingerprint& mine, Elsewhere&& elsewhere);
  // The same, for waits where no other operation can show up (point to point, ring space).
  template <class Arrived>
  void wait(Arrived&& arrived, std::span<const int> awaited, const WaitContext& ctx);
  [[noreturn]] void throw_mismatch(int peer, const Fingerprint& mine, const Fingerprint& theirs,
                                   const WaitContext& ctx) const;
  // Throw if the peer aborted or failed (check_peer) or if its process is gone or found lost
  // (check_alive).
  void check_peer(int peer, const WaitContext& ctx) const;
  void check_alive(int peer, const WaitContext& ctx) const;
  // Throws the peer's loss once `watch` (stopped_peers_ by default: config_.stopped_lost_after)
  // has seen it stopped long enough (transport/stopped_peers.h), unless another part of the
  // process owns finding it.
  void check_stopped(int peer, const WaitContext& ctx) const {
    check_stopped(peer, ctx, stopped_peers_);
  }
  void check_stopped(int peer, const WaitContext& ctx, const StoppedPeers& watch) const;
  // Throws the root cause if this rank was marked failed (mark_failed) while it waited.
  void check_self(const WaitContext& ctx) const;
  void ring_peers() noexcept;
  void setup();
  // Fails (Error(resource)) where the segments of this fabric's ranks not created yet would not fit
  // in the memory the machine has left (base::available_memory_bytes): tmpfs would hand out its
  // pages until the OOM killer ended some process, whichever it picks.
  void check_room_for_segments() const;

  FabricConfig config_;
  size_t control_bytes_ = 0;
  size_t segment_bytes_ = 0;
  size_t eager_bytes_ = 0;
  int excess_ranks_ = 0;
  bool light_posts_ = false;  // every rank registered for asymmetric fences
  uint64_t step_ = 0;
  RingState lines_, tiny_;
  Ring waited_ring_ = Ring::lines;  // the ring of the messages eager_wait waited for
  size_t waited_lines_ = 1;         // lines of the last line messages waited for
  std::vector<std::byte> scratch_;
  std::vector<uint64_t> sent_chunks_;      // per peer; touched only by the point-to-point engine
  std::vector<uint64_t> received_chunks_;  // per peer; likewise
  ShmSegment own_;
  std::vector<ShmSegment> peers_;  // index = rank (own rank's entry is empty)
  std::vector<std::byte*> bases_;  // mapped base of every rank's segment
  std::vector<PeerProcess> processes_;
  StoppedPeers stopped_peers_;
  std::vector<int> all_peers_;
};

}  // namespace tpf::transport
