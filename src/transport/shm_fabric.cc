#include "transport/shm_fabric.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <sstream>
#include <string_view>
#include <thread>

#include "base/available_memory.h"
#include "base/byte_size.h"
#include "tpf/error.h"
#include "transport/asymmetric_fence.h"
#include "transport/shm_layout.h"

namespace tpf::transport {
namespace {

// What a rank publishes under "rank/<r>" once its segment exists: "<segment> <pid> <bytes>
// <can_fence>". `ok` is false for a text that does not have all four.
struct JoinInfo {
  std::string segment;
  long pid = 0;
  size_t bytes = 0;
  int can_fence = 0;
  bool ok = false;
};

std::string join_info_text(const std::string& segment, size_t bytes, bool can_fence) {
  return segment + " " + std::to_string(::getpid()) + " " + std::to_string(bytes) + " " +
         (can_fence ? "1" : "0");
}

JoinInfo parse_join_info(const std::string& text) {
  JoinInfo info;
  std::istringstream fields(text);
  fields >> info.segment >> info.pid >> info.bytes >> info.can_fence;
  info.ok = static_cast<bool>(fields);
  return info;
}

}  // namespace

std::string ShmFabric::rank_names(const std::vector<int>& ranks) const {
  std::vector<int> numbers;
  for (int r : ranks) numbers.push_back(comm_rank(r));
  return config_.names.list(numbers);
}

size_t ShmFabric::mailbox_chunk_bytes(size_t slot_bytes, int ranks) {
  constexpr size_t kMaxChunk = size_t{256} << 10, kMinChunk = size_t{4} << 10;
  constexpr size_t kMailboxes = size_t{8} << 20;  // a rank's, together
  const size_t by_slot = std::min(kMaxChunk, slot_bytes / 4);
  const size_t by_mailboxes = kMailboxes / (2 * static_cast<size_t>(std::max(ranks, 1)));
  return std::min(by_slot, std::max(kMinChunk, by_mailboxes)) / kCacheLine * kCacheLine;
}

ShmFabric::ShmFabric(FabricConfig config)
    : config_(std::move(config)), stopped_peers_(config_.size, config_.stopped_lost_after) {
  const int n = config_.size;
  if (config_.p2p_chunk_bytes == 0) {
    config_.p2p_chunk_bytes = mailbox_chunk_bytes(config_.slot_bytes, n);
  }
  control_bytes_ = round_up(round_up(sizeof(Control), kCacheLine) + sizeof(P2pControl) * n, 4096);
  eager_bytes_ = round_up(kLineRingBytes + kTinyRingBytes + kTinyFingerprintBytes, 4096);
  segment_bytes_ =
      control_bytes_ + eager_bytes_ + 2 * config_.slot_bytes + 2 * config_.p2p_chunk_bytes * n;
  segment_bytes_ = round_up(segment_bytes_, 4096);
  sent_chunks_.assign(n, 0);
  received_chunks_.assign(n, 0);
  lines_.received.assign(n, 0);
  tiny_.received.assign(n, 0);
  for (int p = 0; p < n; ++p)
    if (p != config_.rank) all_peers_.push_back(p);
  setup();
}

ShmFabric::~ShmFabric() = default;

void ShmFabric::check_room_for_segments() const {
  const std::optional<size_t> available = base::available_memory_bytes();
  if (!available) return;
  const size_t all = segment_bytes_ * static_cast<size_t>(config_.size);
  // The ranks that created theirs already took their pages from what is available now.
  const size_t made = segments_bytes(config_.segment_prefix);
  const size_t still = all > made ? all - made : 0;
  if (still <= *available) return;
  auto bytes = [](size_t b) { return base::format_bytes(static_cast<double>(b)); };
  throw Error(ErrorCode::resource,
              config_.label + ": its " + std::to_string(config_.size) +
                  " ranks on this machine need " + bytes(all) + " of shared memory (" +
                  bytes(segment_bytes_) + " each), " + bytes(still) +
                  " of it still to reserve, but the machine has " + bytes(*available) +
                  " of memory available (MemAvailable, or what its cgroup allows): start fewer "
                  "ranks on this machine, or lower TPF_SHM_BUFFER_BYTES");
}

void ShmFabric::setup() {
  const int n = config_.size, me = config_.rank;
  // Segments of this user whose creator died during its setup (SIGKILL without tpf run to sweep
  // up): nobody holds their lock any more. Live ones, of any job, are left alone.
  remove_orphan_segments(shm_user_prefix());
  check_room_for_segments();
  std::random_device entropy;
  std::ostringstream name;
  name << config_.segment_prefix << "r" << me << "-" << std::hex << entropy() << entropy()
       << ShmSegment::kOrphanSuffix;
  own_ = ShmSegment::create(name.str(), segment_bytes_,
                            config_.label + " (" + std::to_string(n) + " ranks)");
  bases_.assign(n, nullptr);
  bases_[me] = static_cast<std::byte*>(own_.data());
  Control& mine = control(me);
  mine.magic = kMagic;
  mine.rank = me;
  mine.pid = static_cast<int32_t>(::getpid());

  Store& store = *config_.store;
  peers_.resize(n);
  processes_.resize(n);
  for (int p : all_peers_) {
    const auto r = static_cast<size_t>(comm_rank(p));
    if (r < config_.pids.size() && config_.pids[r] > 0)
      processes_[p] = PeerProcess(static_cast<pid_t>(config_.pids[r]));
  }
  std::vector<std::string> peer_names(n);
  using SetupClock = std::chrono::steady_clock;
  const auto timeout =
      std::min(config_.setup_timeout, std::chrono::milliseconds(std::chrono::hours(24 * 30)));
  const auto deadline = SetupClock::now() + timeout;
  // Setup fails as soon as a rank is known dead or lost: the store's verdict, or a known pid that
  // exited. `context` says what this rank was doing.
  auto died_per_store = [&](const Error& verdict, const std::string& context) {
    return Error(ErrorCode::peer_died,
                 config_.label + ": a rank died or was found lost while creating the communicator" +
                     context + ": " + verdict.what());
  };
  auto throw_if_a_peer_exited = [&](const std::string& context) {
    for (int p : all_peers_) {
      if (processes_[p].pid() > 0 && !processes_[p].alive()) {
        throw Error(ErrorCode::peer_died,
                    config_.label + ": " +
                        died_while_creating_text(rank_name(p), processes_[p].pid(), context));
      }
    }
  };
  // The pid of peer q if it has joined (published "rank/<q>") and is not known yet (the
  // communicator gave none: FabricConfig::pids): a joined peer whose process exits is then
  // noticed by its pid.
  auto learn_pid = [&](int q) {
    if (processes_[q].pid() > 0) return;
    try {
      const JoinInfo info =
          parse_join_info(store.get("rank/" + std::to_string(q), std::chrono::milliseconds(0)));
      if (info.ok && info.pid > 0) processes_[q] = PeerProcess(static_cast<pid_t>(info.pid));
    } catch (const Error&) {
      // not published (or the store cannot say now)
    }
  };
  auto learn_joined_pids = [&] {
    for (int q : all_peers_) learn_pid(q);
  };
  // A peer that stays stopped is found lost, as in the waits of a communicator made
  // (check_stopped), instead of being waited for until the setup's deadline.
  const StoppedPeers setup_stopped(n, config_.setup_stopped_lost_after);
  auto throw_if_a_peer_is_lost = [&](const std::string& context) {
    const WaitContext ctx = WaitContext::with_timeout(
        {}, [&] { return config_.label + " (creating the communicator, " + context + ")"; });
    for (int p : all_peers_)
      if (processes_[p].pid() > 0) check_stopped(p, ctx, setup_stopped);
  };
  size_t next_to_learn = 0;  // the peer whose pid a wait's next slice asks for (wait_for_all)
  // Waits for keys that peers set (all of them, in one request: a get per peer made setting up
  // N ranks N^2 round trips to the store), in short slices: between them, a peer whose pid is
  // known and whose process has exited fails the setup at once (for stores that cannot tell a
  // death themselves). A store that can tell answers Error(peer_died) naming the job rank. While
  // some peers have not joined, each slice learns one more peer's pid, in turn: a get per slice,
  // as the get per peer in turn before 2026-12-06 (which knew the pids of the peers before the
  // one it waited for); a get per peer per slice would load the store N^2 times over.
  auto wait_for_all = [&](const std::vector<std::string>& keys,
                          const std::string& what) -> std::vector<std::string> {
    for (;;) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - SetupClock::now());
      const auto slice =
          std::clamp(left, std::chrono::milliseconds(0), std::chrono::milliseconds(100));
      try {
        return store.get_many(keys, slice);
      } catch (const RootCauseError&) {
        throw;  // another rank's failure ended the creation (comm/creation_watch.h)
      } catch (const Error& e) {
        if (e.code() == ErrorCode::peer_died) {
          throw died_per_store(e, " (waiting for " + what + ")");
        }
        if (e.code() != ErrorCode::timeout) throw;
        if (!all_peers_.empty()) learn_pid(all_peers_[next_to_learn++ % all_peers_.size()]);
        throw_if_a_peer_exited("waiting for " + what);
        throw_if_a_peer_is_lost("waiting for " + what);
        if (SetupClock::now() >= deadline) {
          std::string missing;  // the keys still missing (the store's error names one)
          size_t listed = 0;
          for (const std::string& key : keys) {
            if (store.check(key)) continue;
            if (++listed > 8) {
              missing += ", ...";
              break;
            }
            missing += (listed > 1 ? ", " : "") + key;
          }
          throw Error(ErrorCode::timeout,
                      config_.label + ": " + what + " did not happen within " +
                          std::to_string(timeout.count()) +
                          " ms while creating the communicator "
                          "(a rank may not have reached the creation, or be stuck before it; "
                          "missing: " +
                          missing + "): " + e.what());
        }
      }
    }
  };
  auto wait_for = [&](const std::string& key, const std::string& what) {
    return wait_for_all({key}, what).front();
  };

  // Rank p's published segment is gone: a survivor removed it after p died, or p's own setup
  // failed (it removes its name then) because some rank died. Name the rank that died: the store
  // may know; otherwise a pid that exits. A dying process releases its segment's lock (and may be
  // swept) a moment before its pidfd reports the exit, so deaths are looked for in slices until a
  // grace period ends; only then is the vanished segment itself the error.
  auto explain_vanished_segment = [&](int p, const Error& open_error) {
    constexpr auto kGrace = std::chrono::seconds(5);
    const auto give_up = std::min(deadline, SetupClock::now() + kGrace);
    for (;;) {
      try {
        store.get("all_mapped", std::chrono::milliseconds(0));
      } catch (const Error& verdict) {
        if (verdict.code() == ErrorCode::peer_died) throw died_per_store(verdict, "");
      }
      learn_joined_pids();
      throw_if_a_peer_exited(rank_name(p) + "'s segment: " + open_error.what());
      if (SetupClock::now() >= give_up) throw open_error;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  };

  try {
    // Registered before publishing: a peer may rely on it as soon as it sees our segment.
    const bool can_fence = config_.asymmetric_fences && register_asymmetric_fences();
    store.set("rank/" + std::to_string(me), join_info_text(own_.name(), segment_bytes_, can_fence));
    light_posts_ = can_fence;
    std::vector<std::string> joining;
    for (int p : all_peers_) joining.push_back("rank/" + std::to_string(p));
    const std::vector<std::string> joined =
        wait_for_all(joining, all_peers_.size() == 1 ? rank_name(all_peers_[0]) + " to join"
                                                     : "the other ranks to join");
    for (size_t i = 0; i < all_peers_.size(); ++i) {
      const int p = all_peers_[i];
      const JoinInfo info = parse_join_info(joined[i]);
      const std::string& segment_name = info.segment;
      const size_t bytes = info.bytes;
      light_posts_ = light_posts_ && info.can_fence == 1;
      if (!info.ok || bytes != segment_bytes_) {
        throw Error(ErrorCode::bootstrap, config_.label + ": " + rank_name(p) +
                                              " joined with a different "
                                              "configuration (segment of " +
                                              std::to_string(bytes) + " bytes, expected " +
                                              std::to_string(segment_bytes_) +
                                              "; is TPF_SHM_BUFFER_BYTES the same everywhere?)");
      }
      if (processes_[p].pid() <= 0) processes_[p] = PeerProcess(static_cast<pid_t>(info.pid));
      try {
        peers_[p] = ShmSegment::open(segment_name, segment_bytes_);
      } catch (const Error& e) {
        explain_vanished_segment(p, e);
      }
      peer_names[p] = segment_name;
      bases_[p] = static_cast<std::byte*>(peers_[p].data());
      // What this rank reads of it: all but the mailboxes, and of those the two chunks towards
      // this rank (p2p_slot). With whole segments populated, setting up 64 ranks on one 2-core
      // machine took 1.1-1.3 s instead of 0.56-0.63 (128: 4.0 s, 1.5-1.7), and the page tables
      // grew with the square of the ranks.
      peers_[p].populate(0, control_bytes_ + eager_bytes_ + 2 * config_.slot_bytes);
      peers_[p].populate(static_cast<size_t>(p2p_slot(p, me, 0) - bases_[p]),
                         2 * config_.p2p_chunk_bytes);
      // A peer writes its header before it publishes the name, so this checks we mapped the right
      // thing (same tpfabric layout, same rank).
      if (control(p).magic != kMagic || control(p).rank != p) {
        throw Error(ErrorCode::bootstrap, config_.label + ": segment " + segment_name +
                                              " published by " + rank_name(p) +
                                              " is not that rank's tpfabric segment");
      }
    }
    // Algorithm choices depend on this, so every rank takes rank 0's view.
    if (me == 0) {
      store.set("excess_ranks", std::to_string(config_.excess_ranks));
    }
    const std::string excess = wait_for("excess_ranks", "rank 0's machine report");
    excess_ranks_ = std::atoi(excess.c_str());
    // Everyone has mapped everyone: the names are no longer needed, and removing them now means a
    // rank killed later leaves nothing behind in /dev/shm.
    if (store.add("mapped", 1) == n) store.set("all_mapped", "1");
    wait_for("all_mapped", "every rank to map every segment");
  } catch (const ProcessLostError&) {
    // A peer found lost (stopped) holds its segment for as long as it stays stopped: waiting for
    // it as below would only add the bound. What it leaves is an orphan once it is ended, which
    // the next setup on this machine (or `tpf run`'s sweep) removes.
    own_.unlink();
    throw;
  } catch (...) {
    // The communicator will not exist. A peer killed during setup left its segment behind; its
    // lock goes with the process, possibly a moment after its store connection told us of the
    // death, so wait (bounded) until no peer holds a segment of this communicator any more: live
    // peers fail the same way and remove their own.
    own_.unlink();
    const auto give_up = SetupClock::now() + std::chrono::seconds(2);
    for (;;) {
      size_t held = 0;
      remove_orphan_segments(config_.segment_prefix, &held);
      if (held == 0 || SetupClock::now() >= give_up) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    throw;
  }
  own_.unlink();
  // Every name may go now, including that of a peer killed just before it removed its own.
  for (int p : all_peers_) unlink_segment_name(peer_names[p]);
}

ShmFabric::Control& ShmFabric::control(int rank) const noexcept {
  return *reinterpret_cast<Control*>(bases_[rank]);
}

std::byte* ShmFabric::slot(int rank, uint64_t step) const noexcept {
  return bases_[rank] + control_bytes_ + eager_bytes_ + (step % 2) * config_.slot_bytes;
}

std::byte* ShmFabric::p2p_slot(int owner, int peer, uint64_t k) const noexcept {
  return bases_[owner] + control_bytes_ + eager_bytes_ + 2 * config_.slot_bytes +
         (static_cast<size_t>(peer) * 2 + k % 2) * config_.p2p_chunk_bytes;
}

void ShmFabric::fence_after_post() const noexcept {
  if (light_posts_) {
    light_fence();
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

void ShmFabric::publish(std::atomic<uint64_t>& signal, uint64_t value) const noexcept {
  signal.store(value, std::memory_order_release);
  fence_after_post();
}

std::byte* ShmFabric::scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

void ShmFabric::ring_peers() noexcept {
  for (int p : all_peers_) control(p).bell.ring();
}

namespace {

FailureRecord read_record(const RecordArea& area) {
  return FailureRecord{static_cast<ErrorCode>(area.code),
                       std::string(area.text, strnlen(area.text, kReasonBytes)), area.lost_process};
}

// Copies `root` into a record area, its message cut short (and marked so) beyond its capacity.
void write_record(const FailureRecord& root, RecordArea& area) noexcept {
  static constexpr char kCut[] = " [...]";
  std::string_view message = root.message;
  size_t n = std::min(message.size(), kReasonBytes - 1);
  std::memcpy(area.text, message.data(), n);
  if (n < message.size()) std::memcpy(area.text + n - (sizeof(kCut) - 1), kCut, sizeof(kCut) - 1);
  area.text[n] = '\0';
  area.code = static_cast<int32_t>(root.code);
  area.lost_process = root.lost_process;
}

}  // namespace

void ShmFabric::check_peer(int peer, const WaitContext& ctx) const {
  Control& other = control(peer);
  uint64_t state = other.state.value.load(std::memory_order_acquire);
  if (state == kStateAborted) {
    throw Error(ErrorCode::aborted,
                ctx.op_label() + ": " + rank_name(peer) + " aborted the communicator");
  }
  if (state == kStateFailed) {
    throw RootCauseError(ctx.op_label() + ": " + rank_name(peer) + " failed earlier",
                         read_record(other.reason));
  }
  if (state == kStateLeft) {
    if (other.note.value.load(std::memory_order_acquire) != 0) {
      throw peer_left_after_failure(ctx.op_label(), rank_name(peer),
                                    read_record(other.note_reason));
    }
    throw peer_left(ctx.op_label(), rank_name(peer));
  }
}

std::optional<FailureRecord> ShmFabric::recorded_failure(int rank) const {
  const Control& c = control(rank);
  if (c.state.value.load(std::memory_order_acquire) != kStateFailed) return std::nullopt;
  return read_record(c.reason);
}

std::optional<std::pair<std::string, FailureRecord>> ShmFabric::peer_failure() const {
  for (int peer = 0; peer < config_.size; ++peer) {
    if (peer == config_.rank) continue;
    if (std::optional<FailureRecord> failure = recorded_failure(peer))
      return std::pair{rank_name(peer), std::move(*failure)};
  }
  return std::nullopt;
}

void ShmFabric::check_self(const WaitContext& ctx) const {
  std::optional<FailureRecord> failure = recorded_failure(config_.rank);
  if (!failure) return;
  throw RootCauseError(ctx.op_label() + ": " + rank_name(config_.rank) + " failed meanwhile",
                       std::move(*failure));
}

void ShmFabric::check_alive(int peer, const WaitContext& ctx) const {
  // A peer that failed (and recorded why) or left the communicator before exiting is reported by
  // check_peer, which names the root cause. Its state is read after its death was seen, when it is
  // final, so a peer that marked itself failed and then exited is never mistaken for a victim.
  if (processes_[peer].alive()) {
    check_stopped(peer, ctx);
    return;
  }
  Control& other = control(peer);
  if (other.state.value.load(std::memory_order_acquire) != kStateOk) return;
  const std::string who = rank_name(peer) + " (pid " + std::to_string(processes_[peer].pid()) + ")";
  if (other.note.value.load(std::memory_order_acquire) != 0) {
    // It failed on another communicator first, and exited because of that.
    throw RootCauseError(ctx.op_label() + ": " + who + " exited after a failure elsewhere",
                         read_record(other.note_reason));
  }
  throw Error(ErrorCode::peer_died,
              ctx.op_label() + ": " + who +
                  " died (its process exited or was killed) before completing the operation");
}

WaitContext WaitContext::with_timeout(Clock::duration timeout,
                                      std::function<std::string()> describe_op) {
  WaitContext ctx;
  ctx.describe_op = std::move(describe_op);
  ctx.timeout = timeout;
  return ctx;
}

WaitContext WaitContext::with_deadline(Clock::time_point deadline,
                                       std::function<std::string()> describe_op) {
  WaitContext ctx = with_timeout({}, std::move(describe_op));
  ctx.fixed_deadline = deadline;
  return ctx;
}

WaitContext::Clock::time_point WaitContext::deadline() const {
  if (!fixed_deadline) fixed_deadline = Clock::now() + timeout;
  return *fixed_deadline;
}

void ShmFabric::throw_mismatch(int peer, const Fingerprint& mine, const Fingerprint& theirs,
                               const WaitContext& ctx) const {
  check_peer(peer, ctx);  // a peer that aborted or failed explains the difference better
  throw Error(ErrorCode::mismatch,
              ctx.op_label() + ": ranks called different collectives: " + rank_name(config_.rank) +
                  " called " + config_.describe(mine) + " but " + rank_name(peer) + " called " +
                  config_.describe(theirs));
}

void ShmFabric::post_and_wait_all(uint64_t step, const Fingerprint& fp, const WaitContext& ctx) {
  Control& mine = control(config_.rank);
  mine.post.fp[step % 2] = fp;
  publish(mine.post.posted, step);
  ring_peers();
  auto posted = [&](int p) {
    return control(p).post.posted.load(std::memory_order_acquire) >= step;
  };
  // A peer with an eager message this rank has not read runs a small collective while this rank
  // waits in a staged one.
  auto elsewhere = [&](int p, Fingerprint* theirs) {
    return unread_message(Ring::lines, p, theirs) || unread_message(Ring::tiny, p, theirs);
  };
  wait(posted, all_peers_, ctx, fp, elsewhere);
  for (int p : all_peers_) {
    const Fingerprint& theirs = control(p).post.fp[step % 2];
    if (!(theirs == fp)) throw_mismatch(p, fp, theirs, ctx);
    // The wait looks at a peer's unread messages only while the peer is absent; one that arrived
    // first may have left a message of an earlier call that this rank never reads: two ranks
    // that each took themselves for a small broadcast's root both post and go on, and nobody
    // reads the second one's (until 2026-12-06 that passed unnoticed where it arrived here
    // first). A message of a later call may be there too (the peer passed this step already) and
    // one of this call (its next step inside a call across hosts): the sequence tells them apart.
    for (const Ring ring : {Ring::lines, Ring::tiny}) {
      Fingerprint unread;
      if (unread_message(ring, p, &unread) && unread.words[0] < fp.words[0])
        throw_mismatch(p, fp, unread, ctx);
    }
  }
}

std::byte* ShmFabric::try_send_slot(int peer) const noexcept {
  const uint64_t k = sent_chunks_[peer];
  // Chunk k reuses the slot of chunk k - 2, which the peer must have consumed.
  if (k >= 2 &&
      control(peer).p2p(config_.rank).consumed.value.load(std::memory_order_acquire) < k - 1) {
    return nullptr;
  }
  return p2p_slot(config_.rank, peer, k);
}

void ShmFabric::post_send(int peer, const Fingerprint& fp) noexcept {
  const uint64_t k = sent_chunks_[peer]++;
  P2pControl& mine = control(config_.rank).p2p(peer);
  mine.fp[k % 2].fp = fp;
  publish(mine.sent.value, k + 1);
  control(peer).p2p_bell.ring();
}

const std::byte* ShmFabric::try_recv(int peer, Fingerprint* fp) const noexcept {
  const uint64_t k = received_chunks_[peer];
  const P2pControl& theirs = control(peer).p2p(config_.rank);
  if (theirs.sent.value.load(std::memory_order_acquire) < k + 1) return nullptr;
  *fp = theirs.fp[k % 2].fp;
  return p2p_slot(peer, config_.rank, k);
}

void ShmFabric::release_recv(int peer) noexcept {
  const uint64_t k = received_chunks_[peer]++;
  publish(control(config_.rank).p2p(peer).consumed.value, k + 1);
  control(peer).p2p_bell.ring();
}

void ShmFabric::check_p2p_peer(int peer, const WaitContext& ctx) const {
  if (aborted()) {
    throw Error(ErrorCode::aborted, ctx.op_label() + ": the communicator was aborted on this rank");
  }
  check_self(ctx);
  check_alive(peer, ctx);
  check_peer(peer, ctx);
}

void ShmFabric::check_stopped(int peer, const WaitContext& ctx, const StoppedPeers& watch) const {
  const std::optional<std::chrono::milliseconds> stopped = watch.lost_for(peer, processes_[peer]);
  if (!stopped) return;
  const auto r = static_cast<size_t>(comm_rank(peer));
  const uint64_t process = r < config_.processes.size() ? config_.processes[r] : 0;
  if (config_.watched_elsewhere && config_.watched_elsewhere(process)) return;
  throw ProcessLostError(
      ErrorCode::timeout,
      ctx.op_label() + ": " +
          stopped_lost_text(rank_name(peer), processes_[peer].pid(), *stopped, watch.lost_after()),
      process);
}

std::string ShmFabric::stopped_note(std::span<const int> ranks) const {
  std::string note;
  for (int p : ranks) {
    if (!processes_[p].stopped()) continue;
    note += "; " + rank_name(p) + " (pid " + std::to_string(processes_[p].pid()) +
            ") is stopped (" + kStoppedHow + ")";
  }
  return note;
}

void ShmFabric::sleep_p2p(const std::function<bool()>& ready,
                          std::chrono::steady_clock::time_point until) {
  using Clock = std::chrono::steady_clock;
  std::chrono::microseconds longest = kMaxSleep;
  if (until != Clock::time_point::max()) {
    const auto left = std::chrono::ceil<std::chrono::microseconds>(
        std::max(until - Clock::now(), Clock::duration{}));
    longest = std::clamp(left, std::chrono::microseconds(1), kMaxSleep);
  }
  sleep_on(control(config_.rank).p2p_bell, longest, light_posts_, ready);
}

void ShmFabric::wake_p2p() noexcept { control(config_.rank).p2p_bell.ring(); }

void ShmFabric::mark_failed(const FailureRecord& root) noexcept {
  Control& mine = control(config_.rank);
  if (mine.state.value.load(std::memory_order_acquire) != kStateOk) return;
  write_record(root, mine.reason);
  mine.state.value.store(kStateFailed, std::memory_order_seq_cst);
  mine.bell.ring_always();
  mine.p2p_bell.ring_always();
  for (int p : all_peers_) {
    control(p).bell.ring_always();
    control(p).p2p_bell.ring_always();
  }
}

void ShmFabric::note_process_failure(const FailureRecord& root) noexcept {
  Control& mine = control(config_.rank);
  if (mine.note.value.load(std::memory_order_acquire) != 0) return;
  write_record(root, mine.note_reason);
  mine.note.value.store(1, std::memory_order_release);
}

void ShmFabric::leave() noexcept {
  Control& mine = control(config_.rank);
  uint64_t ok = kStateOk;
  if (!mine.state.value.compare_exchange_strong(ok, kStateLeft, std::memory_order_seq_cst)) return;
  for (int p : all_peers_) {
    control(p).bell.ring_always();
    control(p).p2p_bell.ring_always();
  }
}

void ShmFabric::abort() noexcept {
  Control& mine = control(config_.rank);
  mine.state.value.store(kStateAborted, std::memory_order_seq_cst);
  mine.bell.ring_always();
  mine.p2p_bell.ring_always();
  for (int p : all_peers_) {
    control(p).bell.ring_always();
    control(p).p2p_bell.ring_always();
  }
}

bool ShmFabric::aborted() const noexcept {
  return control(config_.rank).state.value.load(std::memory_order_acquire) == kStateAborted;
}

Error peer_left(const std::string& op_label, const std::string& who) {
  return Error(ErrorCode::mismatch,
               op_label + ": " + who +
                   " destroyed the communicator without taking part in this operation (do the "
                   "ranks make the same calls before they destroy a communicator?)");
}

RootCauseError peer_left_after_failure(const std::string& op_label, const std::string& who,
                                       FailureRecord failed_first) {
  return RootCauseError(op_label + ": " + who + " left the communicator after a failure elsewhere",
                        std::move(failed_first));
}

FailureRecord root_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return root_of(e);
  } catch (const std::exception& e) {
    return {ErrorCode::internal, e.what()};
  } catch (...) {
    return {ErrorCode::internal, "an exception of unknown type"};
  }
}

}  // namespace tpf::transport
