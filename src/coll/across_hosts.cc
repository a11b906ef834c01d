#include "coll/across_hosts.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <functional>
#include <memory_resource>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "base/call_arena.h"
#include "coll/reduce_kernels.h"
#include "tpf/error.h"

namespace tpf::coll {

std::byte* HostScratch::get(size_t slot, size_t bytes) {
  if (slot >= slabs_.size()) slabs_.resize(slot + 1);
  Slab& slab = slabs_[slot];
  if (slab.bytes < bytes) {
    slab.data.reset();  // release the old slab before taking the larger one
    slab.data.reset(new std::byte[bytes]);
    slab.bytes = bytes;
  }
  return slab.data.get();
}

void UncomparedCalls::add(const transport::Fingerprint& call) {
  for (uint64_t word : call.words) {  // splitmix64's finalizer: every bit of every word counts
    uint64_t z = (digest_ ^ word) + 0x9e3779b97f4a7c15;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    digest_ = z ^ (z >> 31);
  }
}

uint64_t UncomparedCalls::take() { return std::exchange(digest_, 0); }

namespace {

using transport::NetRequest;

// Network tags: the operation's sequence number, a stage of the algorithm and a chunk number, so
// messages of successive operations, of the stages of one and of the chunks of one transfer
// never match each other; the top tag bit stays clear (it marks point-to-point messages,
// comm/net_p2p.h). Sequence numbers wrap after 2^27 operations: messages that far apart are
// never in flight together.
constexpr int kChunkBits = 12;
constexpr int kStageBits = 4;
constexpr uint64_t kSequenceMask =
    (uint64_t{1} << (transport::UcxNetwork::kTagBits - 1 - kStageBits - kChunkBits)) - 1;
enum Stage : uint64_t {
  kFingerprint = 0,
  kFirst = 1,
  kSecond = 2,
  kCheckpoint = 3,
  kAcknowledgement = 4,  // RootedCredit's
  kAhead = 5,            // data a leader sent before the fingerprints agree (leaders_send_ahead)
  kPair = 6              // halving-doubling's pair of hosts: a partial result in, the result out
};
// Every chunk of a transfer has a tag of its own (network_cost.h cuts transfers).
static_assert(kNetworkMaxChunks <= size_t{1} << kChunkBits);
uint64_t tag_of(uint64_t sequence, Stage stage, size_t chunk = 0) {
  return ((sequence & kSequenceMask) << kStageBits | stage) << kChunkBits | chunk;
}
// The leaders' stamps of the checkpoint at operation `sequence` (kCheckpointEvery).
uint64_t checkpoint_tag(uint64_t sequence) { return tag_of(sequence, kCheckpoint); }

// Messages between leaders that carry the fingerprint alone (post_messages' sizes and fill).
constexpr auto kNoPayload = [](int) { return size_t{0}; };
constexpr auto kNoFill = [](int, std::byte*, size_t) {};
constexpr auto kNoPayloadFill = [](std::byte*, size_t) {};  // gather_packed's

// Scratch slots (HostScratch): fixed ones, then two per host.
enum Slot : size_t {
  kHostData = 0,
  kOwnPart = 1,
  kCombined = 2,
  kCombineTemp = 3,
  kGathered = 4,
  kPerHost = 5
};
size_t from_slot(int host) { return kPerHost + 2 * static_cast<size_t>(host); }
size_t to_slot(int host) { return kPerHost + 2 * static_cast<size_t>(host) + 1; }

// memcpy, but an empty copy may name null pointers (empty buffers of zero-count calls), and a copy
// onto itself (an in-place call's own block) is skipped.
void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
}

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto* pa = static_cast<const std::byte*>(a);
  const auto* pb = static_cast<const std::byte*>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

// Whether communicator ranks `ranks` (ascending) are consecutive: their blocks of a buffer with
// one block per rank are then one contiguous range.
bool consecutive(const std::vector<int>& ranks) {
  return ranks.empty() || ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size());
}

// A position's neighbours among `hosts` positions, rooted at position 0: down the binomial tree
// where `tree`, else straight (the root linked with every other position, each of them with the
// root; the root's parent is itself, unused). In the tree position p hears from p minus its lowest
// set bit and passes on to p + 2^j for every 2^j below that bit (the root: below the top), the
// farthest first, so that the hosts with the most below them start passing on first. Built in
// place: the children live inline up to 32 (a tree's always; a straight root's on up to 33 hosts).
struct TreeLinks {
  TreeLinks(int position, int hosts, bool tree) : children(&arena) {
    if (!tree) {
      if (position != 0) return;
      children.reserve(static_cast<size_t>(hosts - 1));
      for (int p = 1; p < hosts; ++p) children.push_back(p);
      return;
    }
    children.reserve(std::bit_width(static_cast<unsigned>(hosts)));  // at least the children
    int reach = 1;
    while (reach < hosts && (position & reach) == 0) reach *= 2;
    if (position != 0) parent = position - reach;
    for (int step = reach / 2; step >= 1; step /= 2)
      if (position + step < hosts) children.push_back(position + step);
  }
  TreeLinks(const TreeLinks&) = delete;
  TreeLinks& operator=(const TreeLinks&) = delete;

  base::CallArena<32 * sizeof(int)> arena;
  int parent = 0;
  std::pmr::vector<int> children;
};
// The positions at and below `position` in that tree: [position, subtree_end(position, hosts)).
int subtree_end(int position, int hosts) {
  return position == 0 ? hosts : std::min(position + (position & -position), hosts);
}

// Shared-memory steps pipelined with the network work on pieces of whole chunks, at least this
// large: each step synchronizes the host's ranks, which costs context switches when they
// outnumber the cores (measured: per-chunk steps made a 4 x 2-rank reduce_scatter 0.68 of the
// link instead of 0.86 unpipelined).
constexpr size_t kMinPieceBytes = size_t{4} << 20;

// How a transfer of `count` elements is cut for pipelining: every chunk is its own message.
struct Chunks {
  size_t count = 0;
  size_t per_chunk = 1;
  size_t number = 1;  // a transfer of nothing is one empty message
  size_t begin(size_t c) const { return std::min(count, c * per_chunk); }
  size_t length(size_t c) const { return std::min(count, begin(c) + per_chunk) - begin(c); }
  // Chunks [first, last) as one range of elements.
  size_t span_length(size_t first, size_t last) const { return begin(last) - begin(first); }
};

// At most this many sends to one peer in flight; later ones wait in a queue and start as earlier
// ones complete. UCX over TCP interleaves the messages queued to a peer, so with every chunk posted
// at once the first ones complete late and the pipeline behind them stalls (measured, 4 hosts x 2
// ranks, 64 MiB: reduce_scatter 0.72 of the link with all chunks posted at once, all_reduce 0.72
// with every segment posted ahead against 0.96 with one).
constexpr size_t kSendWindow = 2;

// How many segments ahead of the results it has back a reduce's root sends, where it owns no
// slice (reduce_in_slices). The owners' sends are paced by their combining, which waits for every
// host's part; the root's were paced by nothing, so it kept its windows full and its slices
// queued in every owner's link ahead of the other hosts' parts that the combining waited for.
// Measured, 64 MiB on 4 emulated hosts at 500 Mb/s: 0.84-0.96 of the link unpaced, 0.98-0.99
// paced (docs/fabric.md). 8 rather than 1-3, which did as well on idle cores: beside other work
// the results come back late (two busy processes beside 4 x 2: lead 2 0.81-0.94, 8 0.90-0.96).
constexpr size_t kRootLeadSegments = 8;

// How the per-rail forms of all_reduce and broadcast cut `count` elements over `rails` rails, in
// `segments` segments: each segment starts at a multiple of the rail count and splits into one
// equal part per rail; the count % rails trailing elements (the tail) go with the last rail's part
// of the last segment, right after it.
struct RailSegments {
  size_t count, rails, segments;
  size_t whole() const { return count / rails; }  // elements per rail outside the tail
  size_t tail() const { return count - whole() * rails; }
  bool last(size_t s) const { return s + 1 == segments; }
  size_t per_part(size_t s) const { return whole() * (s + 1) / segments - whole() * s / segments; }
  size_t segment_begin(size_t s) const { return rails * (whole() * s / segments); }
  // Rail l's part of segment s: [part_begin(s, l), + part_length(s, l)).
  size_t part_begin(size_t s, size_t l) const { return segment_begin(s) + l * per_part(s); }
  size_t part_length(size_t s, size_t l) const {
    return per_part(s) + (last(s) && l + 1 == rails ? tail() : 0);
  }
};

// Which hosts combine which slice of a reduction across hosts (reduce_in_slices and
// reduce_per_rail): owner k combines slice k from every host in host order. all_reduce's owners
// are all H hosts (each link carries 2 (H-1) / H of the data each way). reduce's, from 3 hosts on,
// are the H-1 hosts other than the root's, which only sends its partial result and receives the
// result: every link carries the data once each way, wherever the root is (were the root's host
// an owner too, its link would receive 2 (H-1) / H: 0.66 of the link on 4 hosts, measured). On 2
// hosts the root's host owns the whole segment: its link receives the other host's data once
// either way, and no result makes a second trip back (2 emulated hosts x 1 at 100 Gb/s, 128 KiB:
// 45 us against 55-63 with a slice each; docs/results/senders-ahead.txt). Its core then combines
// the whole buffer, which on a link faster than a core combines (about 1 MiB and up at 100 Gb/s
// by the cost model's 10 GB/s) may bound a large reduce: not measured on such a link.
struct SliceOwners {
  std::vector<int> hosts;     // hosts[k] combines slice k
  std::vector<int> slice_of;  // the slice host h combines, or -1
  // `root_host`: the root's host of a reduce, -1 for all_reduce.
  SliceOwners(int host_count, int root_host) : slice_of(static_cast<size_t>(host_count), -1) {
    const bool root_owns_all = root_host >= 0 && host_count == 2;
    for (int h = 0; h < host_count; ++h) {
      if (h == root_host ? host_count > 2 : root_owns_all) continue;
      slice_of[h] = static_cast<int>(hosts.size());
      hosts.push_back(h);
    }
  }
  int count() const { return static_cast<int>(hosts.size()); }
};

// The transfers of one collective: receives start at once, sends through a window per peer
// (kSendWindow), refilled whenever the collective waits or calls progress(). If the collective
// leaves by an exception, cancels what is still in flight, so the network touches none of its
// buffers after.
class InFlight {
 public:
  InFlight(transport::UcxNetwork& network, const transport::WaitContext& ctx)
      : network_(network), ctx_(ctx), requests_(&arena_), started_(&arena_), peers_(&arena_) {
    requests_.reserve(kReserved);  // one allocation for a small collective's transfers
    started_.reserve(kReserved);
  }
  ~InFlight() {
    for (NetRequest& request : requests_) {
      if (request.pending != nullptr) network_.cancel(std::span<NetRequest>(&request, 1));
    }
  }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

  // Start (or queue) a transfer; returns its index for wait().
  size_t send(int peer, uint64_t tag, const void* data, size_t bytes) {
    Peer& to = peer_of(peer);
    if (to.queued.empty() && to.in_flight.size() < kSendWindow) {  // room: start it now
      const size_t index = add(network_.send(peer, tag, data, bytes), true);
      if (requests_[index].pending != nullptr) to.in_flight.push_back(index);
      return index;
    }
    const size_t index = add(NetRequest{nullptr, peer, true, bytes}, false);
    to.queued.push_back({index, tag, data});
    refill();
    return index;
  }
  size_t recv(int peer, uint64_t tag, void* data, size_t bytes) {
    return add(network_.recv(peer, tag, data, bytes), true);
  }
  void wait(size_t index) {
    auto refill_windows = [this] { return refill(); };
    while (!started_[index]) {  // a send queued behind its peer's window: let that move first
      const Peer& peer = peer_of(requests_[index].peer);
      network_.wait_all(one(peer.in_flight.front()), ctx_, refill_windows);
      refill();
    }
    network_.wait_all(one(index), ctx_, refill_windows);
  }
  // Waits for the `count` requests from `first` on: one transfer's chunks, which post_chunks
  // numbers one after the other. Those already complete (a send UCX took at once, a receive an
  // earlier wait saw arrive) need no wait of their own, each a round of network progress (an
  // epoll_wait over TCP) on the collective's critical path. What UCX still holds of a send it
  // reported done (over TCP, the tail a full socket did not take) is pushed on by the
  // communicator's heartbeat thread (UcxNetwork::push_unsent) where nothing here waits again.
  void wait_run(size_t first, size_t count) {
    for (size_t i = first; i < first + count; ++i)
      if (!started_[i] || requests_[i].pending != nullptr) wait(i);
  }
  void wait_all() { wait_run(0, requests_.size()); }
  // One round of network progress without waiting: moves queued data on while the caller works
  // on shared memory (UCX over TCP sends only what the socket takes when nobody progresses it).
  void progress() {
    network_.advance({}, ctx_);
    refill();
  }

 private:
  struct Queued {
    size_t index;
    uint64_t tag;
    const void* data;
  };
  // A first-in first-out queue in the transfers' arena.
  template <class T>
  class Fifo {
   public:
    explicit Fifo(std::pmr::memory_resource* arena) : items_(arena) {}
    bool empty() const { return head_ == items_.size(); }
    size_t size() const { return items_.size() - head_; }
    const T& front() const { return items_[head_]; }
    void push_back(const T& item) { items_.push_back(item); }
    void pop_front() { ++head_; }

   private:
    std::pmr::vector<T> items_;
    size_t head_ = 0;
  };
  struct Peer {
    int rank;
    Fifo<size_t> in_flight;  // oldest first
    Fifo<Queued> queued;
  };

  // The peer's queues, made at its first send (a collective sends to a few peers: a list).
  Peer& peer_of(int rank) {
    for (Peer& peer : peers_)
      if (peer.rank == rank) return peer;
    return peers_.emplace_back(Peer{rank, Fifo<size_t>(&arena_), Fifo<Queued>(&arena_)});
  }

  static constexpr size_t kReserved = 8;
  size_t add(NetRequest request, bool started) {
    requests_.push_back(request);
    started_.push_back(started);
    return requests_.size() - 1;
  }
  std::span<NetRequest> one(size_t index) { return {&requests_[index], 1}; }
  // Retires completed sends and starts queued ones while windows have room; returns whether it
  // did either.
  bool refill() {
    bool news = false;
    for (Peer& peer : peers_) {
      while (!peer.in_flight.empty()) {
        NetRequest& oldest = requests_[peer.in_flight.front()];
        if (oldest.pending != nullptr) network_.advance(one(peer.in_flight.front()), ctx_);
        if (oldest.pending != nullptr) break;
        peer.in_flight.pop_front();
        news = true;
      }
      while (peer.in_flight.size() < kSendWindow && !peer.queued.empty()) {
        const Queued next = peer.queued.front();
        peer.queued.pop_front();
        requests_[next.index] =
            network_.send(peer.rank, next.tag, next.data, requests_[next.index].bytes);
        started_[next.index] = true;
        peer.in_flight.push_back(next.index);
        news = true;
      }
    }
    return news;
  }

  transport::UcxNetwork& network_;
  const transport::WaitContext& ctx_;
  // Every container below lives in this arena, inline for a small collective's few transfers
  // (the heap beyond): the malloc and free of each showed in the per-call profile.
  base::CallArena<2048> arena_;
  // Appended to by send() and recv() only, never during a wait (whose refills start queued
  // sends in place), so the span of one element a wait hands the network stays valid.
  std::pmr::vector<NetRequest> requests_;
  std::pmr::vector<uint8_t> started_;  // a flag per request (vector<bool>'s bit inserts cost more)
  std::pmr::vector<Peer> peers_;       // in the order the collective first sent to them
};

// Throws `error`, a failure this rank found outside its network waits (which do this themselves),
// after telling the ranks on the other hosts: the collective's transfers still in flight stop as
// it unwinds, a tagged send by closing its connection, and the notice must be out before (the
// network then waits until the peers it cuts took it), or they would blame the closed connection.
// The communicator records the failure afterwards and notifies nobody twice.
template <class E>
[[noreturn]] void fail_across_hosts(transport::UcxNetwork& network, const E& error) {
  network.notify_failure(transport::root_of(error));
  throw error;
}

// The error of a leader (of `g`, in the call `ctx` names) whose call `mine` differs from the call
// `theirs` of host h's leader.
Error call_mismatch(const HostGroup& g, const transport::WaitContext& ctx,
                    const transport::Fingerprint& mine, int h,
                    const transport::Fingerprint& theirs) {
  const int my_host = g.hosts.host_of(g.rank);
  const transport::RankNames& names = g.network.names();
  return Error(ErrorCode::mismatch, ctx.op_label() + ": ranks called different collectives: " +
                                        names.with_host(g.rank, g.hosts.key(my_host)) + " called " +
                                        describe_fingerprint(mine) + ", " +
                                        names.with_host(g.hosts.ranks_on(h)[0], g.hosts.key(h)) +
                                        " called " + describe_fingerprint(theirs));
}

// Throws where host h's stamp `theirs` differs from this leader's `mine`, both taken in this call
// or, where `checkpoint` says so, at that checkpoint. A stamp's digest covers the operations since
// the leader's previous stamp, at most the kCheckpointEvery before it.
void check_stamp(const HostGroup& g, const transport::WaitContext& ctx, const CallStamp& mine,
                 const CallStamp& theirs, int h, std::optional<uint64_t> checkpoint) {
  if (theirs == mine) return;
  if (theirs.call != mine.call)
    fail_across_hosts(g.network, call_mismatch(g, ctx, mine.call, h, theirs.call));
  const int my_host = g.hosts.host_of(g.rank);
  const transport::RankNames& names = g.network.names();
  fail_across_hosts(
      g.network,
      Error(ErrorCode::mismatch,
            ctx.op_label() + ": ranks called different collectives before " +
                (checkpoint ? "operation " + std::to_string(*checkpoint) : "this one") + ": " +
                names.with_host(g.rank, g.hosts.key(my_host)) + " and " +
                names.with_host(g.hosts.ranks_on(h)[0], g.hosts.key(h)) +
                " differ on a small broadcast, reduce, gather or scatter that did not wait "
                "for every host, among the " +
                std::to_string(kCheckpointEvery) +
                " operations before it (its root, count or type)"));
}

// Waits for the stamp of every other host's leader at the checkpoint of operation `at`, in the
// order of the hosts from the next one, and compares each with the one this leader sent there
// (UncomparedCalls::checkpoint). A leader more than kCheckpointLag operations behind is waited
// for; one that called something else fails this one with a mismatch. Leaders only.
void compare_checkpoint_stamps(const HostGroup& g, uint64_t at, const transport::WaitContext& ctx) {
  const int hosts = g.hosts.hosts(), mine = g.hosts.host_of(g.rank);
  std::vector<CallStamp> theirs(hosts);
  std::vector<size_t> arrivals(hosts);
  InFlight flight(g.network, ctx);  // ends before `theirs`, which it may still write into
  for (int k = 1; k < hosts; ++k) {
    const int h = (mine + k) % hosts;
    arrivals[h] =
        flight.recv(g.hosts.ranks_on(h)[0], checkpoint_tag(at), &theirs[h], sizeof(CallStamp));
  }
  for (int k = 1; k < hosts; ++k) {
    const int h = (mine + k) % hosts;
    flight.wait(arrivals[h]);
    check_stamp(g, ctx, g.uncompared.checkpoint(), theirs[h], h, at);
  }
}

// Waits for the acknowledgement `awaited` from leader `peer` (RootedCredit) and compares the count
// it carries with this leader's. Leaders only.
void await_acknowledgement(const HostGroup& g, int peer, const RootedCredit::Awaited& awaited,
                           const transport::WaitContext& ctx) {
  uint64_t through = 0;
  InFlight flight(g.network, ctx);  // ends before `through`
  flight.wait(
      flight.recv(peer, tag_of(awaited.sequence, kAcknowledgement), &through, sizeof through));
  if (through != awaited.through) {
    fail_across_hosts(
        g.network,
        Error(ErrorCode::mismatch,
              ctx.op_label() + ": " + g.network.names()(peer) + " acknowledged " +
                  std::to_string(through) + " bytes of the small rooted calls from " +
                  g.network.names()(g.rank) + ", which sent it " + std::to_string(awaited.through) +
                  " by then (do the ranks call the same operations with the same counts?)"));
  }
  g.credit.acknowledged(peer);
}

// One collective across hosts: what every algorithm below needs to know about the layout.
class HostCollective {
 public:
  HostCollective(const HostGroup& group, const OpDesc& desc, uint64_t sequence,
                 const transport::WaitContext& ctx, const CollectiveTuning& tuning)
      : g_(group),
        d_(desc),
        sequence_(sequence),
        ctx_(ctx),
        local_ctx_(ctx),
        tuning_(tuning),
        elem_(dtype_size(desc.dtype)),
        me_(group.rank),
        host_(group.hosts.host_of(group.rank)),
        local_rank_(group.hosts.local_rank(group.rank)) {
    // One deadline for the network and the shared-memory waits: the clock starts now.
    local_ctx_.fixed_deadline = ctx.deadline();
  }

  void run() {
    if (is_leader()) checkpoint();
    switch (d_.kind) {
      case OpKind::all_reduce: return all_reduce();
      case OpKind::reduce: return reduce();
      case OpKind::broadcast: return broadcast();
      case OpKind::all_gather: return all_gather();
      case OpKind::reduce_scatter: return reduce_scatter();
      case OpKind::all_to_all: return all_to_all();
      case OpKind::gather: return gather();
      case OpKind::scatter: return scatter();
      case OpKind::barrier: return barrier();
      case OpKind::send:
      case OpKind::recv: break;
    }
    throw Error(ErrorCode::internal, std::string(op_kind_name(d_.kind)) +
                                         " is not a collective: it goes through P2pTransfer");
  }

 private:
  int hosts() const { return g_.hosts.hosts(); }
  int leader(int host) const { return g_.hosts.ranks_on(host)[0]; }
  bool is_leader() const { return local_rank_ == 0; }
  const std::vector<int>& ranks_on(int host) const { return g_.hosts.ranks_on(host); }
  // Every host's ranks are consecutive: each host's blocks of a buffer of one block per rank lie
  // together (the usual layout).
  bool hosts_consecutive() const {
    for (int h = 0; h < hosts(); ++h)
      if (!consecutive(ranks_on(h))) return false;
    return true;
  }
  // Whether the leaders' reduce_scatter, all_gather and all_to_all of blocks of `block` elements
  // pipeline their steps inside the hosts with the network: where every host's blocks lie
  // together, or else (interleaved hosts) from blocks of `interleaved_min_bytes`, since a host's
  // blocks then take a step inside the host each (for_each_place); smaller blocks would take
  // many small steps, and go through scratch in the unpipelined forms instead.
  bool pipelines_inside_hosts(size_t block, size_t interleaved_min_bytes) const {
    return hosts_consecutive() || bytes(block) >= interleaved_min_bytes;
  }
  // Whether all_to_all per rail moves the blocks of a host whose ranks lie apart one by one (a
  // step inside the host, and network messages, of their own) rather than packed.
  bool apart_blocks_travel_alone(size_t block) const {
    return bytes(block) >= kInterleavedPerRailAllToAllMinBlockBytes;
  }
  // The other hosts, from the next one round. Sending in this order, each host receives from one
  // host at a time (measured: 4 hosts x 2 ranks, all_gather 0.40 of the link when every host
  // sent to host 0 first).
  std::vector<int> others_from_next() const {
    std::vector<int> others;
    for (int k = 1; k < hosts(); ++k) others.push_back((host_ + k) % hosts());
    return others;
  }
  // This host has one rank: its shared-memory phases are identities and are skipped.
  bool alone() const { return ranks_on(host_).size() == 1; }
  // The layout's rails: the ranks on each host where every host has as many, else 1 (the
  // leaders' one rail).
  int rails() const { return g_.hosts.uniform() ? static_cast<int>(ranks_on(0).size()) : 1; }
  // The rails the per-rail forms may take: the layout's where each has links of its own (each
  // rank's network devices its own) or TPF_NET_ALGO=per_rail says so, else the leaders' one.
  // Measured with one link per host, per rail was 0.77-1.19x the leaders' speed (docs/fabric.md):
  // its gain is the links.
  int usable_rails() const {
    const bool told = tuning_.forced_network == NetworkAlgorithm::per_rail;
    return told || g_.hosts.rails_have_own_links() ? rails() : 1;
  }
  // The rank on host h with this rank's local rank: its peer on its rail.
  int rail_peer(int h) const { return ranks_on(h)[local_rank_]; }
  // The root of a rooted collective leads its host: it is then the host's representative and
  // talks to the other leaders itself.
  bool root_leads() const { return g_.hosts.local_rank(d_.root) == 0; }
  // The rank of a rooted collective that talks to the network for its host: the root on the
  // root's host (so its data needs no extra hop), the leader elsewhere.
  int representative_local_rank(int host) const {
    return host == g_.hosts.host_of(d_.root) ? g_.hosts.local_rank(d_.root) : 0;
  }
  // That rank as a communicator rank.
  int representative(int host) const { return ranks_on(host)[representative_local_rank(host)]; }
  // Whether host leaders that only send their data in this call (a gather's or a reduce's other
  // host) send it before the fingerprints agree, and compare them before they return: on two
  // hosts, where the leaders exchange fingerprints directly. The data's stage is then kAhead,
  // which a receiver posts only once the fingerprints agree, or into scratch, so a call that does
  // not match never lands in a caller's buffer. One step sooner at the root, measured on 2
  // emulated hosts; on 4 a gather's root, whose receives wait for its check, took the other
  // leaders' data no sooner (docs/results/senders-ahead.txt).
  bool leaders_send_ahead() const { return hosts() == 2; }

  // The cost model's choice for all_reduce or broadcast (coll/network_cost.h), made by every rank
  // from the same size, host count and settings (shared: comm/settings_agreement.h); remembered
  // for the fingerprint, a second guard.
  NetworkAlgorithm choose_network(Collective op) {
    const bool leads = op != Collective::broadcast || root_leads();
    network_ = g_.choices.get(op, bytes(d_.count), leads, [&] {
      return choose_network_algorithm(op, bytes(d_.count), hosts(), tuning_.forced_network,
                                      tuning_.network_cost, usable_rails(), leads);
    });
    return *network_;
  }
  // A vector of `n` value-initialized elements for this call only, in its arena (arena_).
  template <class T>
  std::pmr::vector<T> per_call(size_t n = 0) {
    return std::pmr::vector<T>(n, T{}, &arena_);
  }
  // Reductions across several steps add; an average divides once at the end.
  ReduceOp partial_op() const { return d_.op == ReduceOp::avg ? ReduceOp::sum : d_.op; }
  uint64_t tag(Stage stage, size_t chunk = 0) const { return tag_of(sequence_, stage, chunk); }
  size_t bytes(size_t count) const { return count * elem_; }
  std::byte* at(void* base, size_t elements) const {
    return static_cast<std::byte*>(base) + elements * elem_;
  }
  const std::byte* at(const void* base, size_t elements) const {
    return static_cast<const std::byte*>(base) + elements * elem_;
  }
  std::byte* scratch(size_t slot, size_t count) const { return g_.scratch.get(slot, bytes(count)); }

  // How a transfer is cut (network_cost.h: the cost model counts the same chunks).
  Chunks chunks_of(size_t count) const {
    return {count, network_chunk_elems(count, elem_), network_chunk_count(count, elem_)};
  }
  // The broadcast chain's cut (chain_chunk_elems: smaller chunks the more hops they cross).
  Chunks chain_chunks_of(size_t count) const {
    const size_t per_chunk =
        chain_chunk_elems(count, elem_, hosts(), chain_cut(tuning_.network_cost));
    return {count, per_chunk, chunks_of_size(count, per_chunk)};
  }
  // Calls piece(first, last) for consecutive runs of chunks [first, last) of at least
  // kMinPieceBytes: the unit of the shared-memory steps pipelined with the network.
  template <class Piece>
  void for_each_piece(const Chunks& chunks, Piece&& piece) const {
    const size_t per_piece = std::max<size_t>(1, kMinPieceBytes / bytes(chunks.per_chunk));
    for (size_t first = 0; first < chunks.number; first += per_piece)
      piece(first, std::min(chunks.number, first + per_piece));
  }
  // Posts a transfer of `count` elements at `data` to or from `peer`, chunk by chunk; returns the
  // index of its first chunk's request (the others follow).
  size_t post_send(InFlight& flight, int peer, Stage stage, const void* data, size_t count) {
    return post_chunks(count, [&](size_t c, size_t begin, size_t length) {
      return flight.send(peer, tag(stage, c), at(data, begin), bytes(length));
    });
  }
  size_t post_recv(InFlight& flight, int peer, Stage stage, void* data, size_t count) {
    return post_recv(flight, peer, stage, data, chunks_of(count));
  }
  size_t post_recv(InFlight& flight, int peer, Stage stage, void* data, const Chunks& chunks) {
    return post_chunks(chunks, [&](size_t c, size_t begin, size_t length) {
      return flight.recv(peer, tag(stage, c), at(data, begin), bytes(length));
    });
  }
  // A transfer of `blocks` blocks of `block` elements, each block cut on its own (`block`'s
  // chunks), so that each can land in a place of its own; at most kNetworkMaxChunks chunks in all
  // (their tags), so with many blocks each is cut into fewer, larger chunks.
  Chunks block_chunks_of(size_t block, size_t blocks) const {
    const size_t most_per_block =
        std::max<size_t>(1, kNetworkMaxChunks / std::max<size_t>(blocks, 1));
    const size_t per_chunk =
        std::max(network_chunk_elems(block, elem_), (block + most_per_block - 1) / most_per_block);
    return {block, per_chunk, chunks_of_size(block, per_chunk)};
  }
  // Calls start(i, chunk, begin, length) for every chunk of each of `blocks` blocks cut by
  // `per_block` (block_chunks_of): `chunk` numbers them across the blocks, for their tags.
  template <class Start>
  void post_blocks(size_t blocks, const Chunks& per_block, Start&& start) {
    for (size_t i = 0; i < blocks; ++i)
      for (size_t c = 0; c < per_block.number; ++c)
        start(i, i * per_block.number + c, per_block.begin(c), per_block.length(c));
  }
  template <class Start>
  size_t post_chunks(size_t count, Start&& start) {
    return post_chunks(chunks_of(count), start);
  }
  template <class Start>
  size_t post_chunks(const Chunks& chunks, Start&& start) {
    const size_t first = start(0, chunks.begin(0), chunks.length(0));
    for (size_t c = 1; c < chunks.number; ++c) start(c, chunks.begin(c), chunks.length(c));
    return first;
  }

  // A collective on this host's shared memory, described in local ranks. Its steps compare the
  // whole call (run_operation), so a rank that differs from its host-mates in a field the step
  // inside the host does not show (the root of a reduce or gather on another host) still fails
  // with a mismatch, as on one host; the leaders compare the hosts' calls. A failure found there
  // goes to the other hosts before this collective's network transfers stop (fail_across_hosts).
  void local(const OpDesc& desc) {
    try {
      run_operation(g_.local, desc, collective_fingerprint(d_, sequence_), local_ctx_, tuning_);
    } catch (...) {
      g_.network.notify_failure(transport::root_of(std::current_exception()));
      throw;
    }
  }
  // While it lives, this collective's shared-memory steps move `flight`'s transfers on as they
  // wait: where every rank of a host talks to the network (per rail), a rank that waits for its
  // host's slowest would otherwise stall its own flows, and with them its peers on other hosts.
  class ProgressInsideHost {
   public:
    ProgressInsideHost(HostCollective& c, InFlight& flight) : c_(c) {
      c_.local_ctx_.between_polls = [&flight] { flight.progress(); };
    }
    ~ProgressInsideHost() { c_.local_ctx_.between_polls = nullptr; }
    ProgressInsideHost(const ProgressInsideHost&) = delete;
    ProgressInsideHost& operator=(const ProgressInsideHost&) = delete;

   private:
    HostCollective& c_;
  };
  OpDesc local_desc(OpKind kind, size_t count, int root, const void* send, void* recv,
                    ReduceOp op = ReduceOp::sum) const {
    OpDesc desc = d_;
    desc.kind = kind;
    desc.count = count;
    desc.root = root;
    desc.send = send;
    desc.recv = recv;
    desc.op = op;
    return desc;
  }

  // The leaders tell each other which collective they are in before any data moves: different
  // calls on different hosts fail as a mismatch instead of waiting for messages never sent.
  void compare_fingerprints_across_hosts() {
    if (!is_leader()) return;
    Fingerprints fingerprints;
    gather_packed(fingerprints, 0, kNoPayloadFill, kNoPayload);
  }
  // The exchange of compare_fingerprints_across_hosts in two halves, so that a collective can
  // send its data along with its fingerprint (exchange_packed, broadcast_one_round). Leaders
  // only. The sends read `mine` or scratch in place (a send may start later, behind its peer's
  // window) and the receives land in `theirs` or scratch: a Fingerprints stays where it is, and
  // outlives its InFlight; no copies or moves. A message may carry a payload after the
  // fingerprint; `carried[h]` is where host h's payload landed.
  struct Fingerprints {
    Fingerprints() : theirs(&arena), received(&arena), landed(&arena), carried(&arena) {}
    Fingerprints(const Fingerprints&) = delete;
    Fingerprints& operator=(const Fingerprints&) = delete;
    base::CallArena<1024> arena;  // the vectors' memory (a malloc each showed per call)
    CallStamp mine{};             // what this leader's messages start with (across_hosts.h)
    std::pmr::vector<CallStamp> theirs;
    std::pmr::vector<size_t> received;      // per host: the request of its fingerprint
    std::pmr::vector<std::byte*> landed;    // per host whose message carries a payload: the message
    std::pmr::vector<const void*> carried;  // per host whose message carries a payload: the payload
  };
  void post_fingerprints(InFlight& flight, Fingerprints& f) {
    post_messages(flight, f, kNoPayload, kNoFill, kNoPayload);
  }
  // This leader's message to host h carries out_bytes(h) bytes that fill(h, where, bytes) writes;
  // host h's message carries in_bytes(h) bytes (0: the fingerprint alone).
  template <class OutBytes, class Fill, class InBytes>
  void post_messages(InFlight& flight, Fingerprints& f, OutBytes&& out_bytes, Fill&& fill,
                     InBytes&& in_bytes) {
    stamp(f);
    for (int h = 0; h < hosts(); ++h) {
      if (h == host_) continue;
      const size_t in_payload = in_bytes(h);
      void* in = &f.theirs[h];
      if (in_payload > 0) {
        in = f.landed[h] = g_.scratch.get(from_slot(h), sizeof f.mine + in_payload);
        f.carried[h] = f.landed[h] + sizeof f.mine;
      }
      f.received[h] = flight.recv(leader(h), tag(kFingerprint), in, sizeof f.mine + in_payload);
      const size_t out_payload = out_bytes(h);
      const void* message = &f.mine;
      if (out_payload > 0) {
        std::byte* packed = g_.scratch.get(to_slot(h), sizeof f.mine + out_payload);
        std::memcpy(packed, &f.mine, sizeof f.mine);
        fill(h, packed + sizeof f.mine, out_payload);
        message = packed;
      }
      flight.send(leader(h), tag(kFingerprint), message, sizeof f.mine + out_payload);
    }
  }
  // This leader's stamp in `f`, and room for the others'.
  void stamp(Fingerprints& f) {
    f.mine.call = call_fingerprint();
    f.mine.earlier = g_.uncompared.take();
    f.theirs.assign(hosts(), {});
    f.received.assign(hosts(), 0);
    f.landed.assign(hosts(), nullptr);
    f.carried.assign(hosts(), nullptr);
  }
  // Waits for every other leader's fingerprint (not for the sends) and throws on a difference.
  void check_fingerprints(InFlight& flight, Fingerprints& f) {
    for (int h = 0; h < hosts(); ++h) {
      if (h == host_) continue;
      flight.wait(f.received[h]);
      if (f.landed[h] != nullptr) std::memcpy(&f.theirs[h], f.landed[h], sizeof f.mine);
      coll::check_stamp(g_, ctx_, f.mine, f.theirs[h], h, std::nullopt);
    }
  }
  // Host h's message [stamp | payload], forwarded to this leader by the rounds: where it landed
  // and its payload in `f`, its stamp compared with this leader's.
  void take_message(Fingerprints& f, int h, std::byte* message) const {
    f.landed[h] = message;
    f.carried[h] = message + sizeof f.mine;
    std::memcpy(&f.theirs[h], message, sizeof f.mine);
    coll::check_stamp(g_, ctx_, f.mine, f.theirs[h], h, std::nullopt);
  }

  // The leaders' checkpoints (kCheckpointEvery), at the start of every operation of a leader:
  // at a checkpoint it sends every other leader its stamp and goes on; kCheckpointLag operations
  // later it waits for theirs and compares. The stamp's call is the operation's own, before the
  // algorithm's choices (which its own fingerprints compare, where it has them). Leaders only.
  void checkpoint() {
    const uint64_t phase = sequence_ % kCheckpointEvery;
    if (phase == 0) {
      send_checkpoint_stamp();
    } else if (phase == kCheckpointLag) {
      compare_checkpoint_stamps(g_, sequence_ - kCheckpointLag, ctx_);
    }
  }
  void send_checkpoint_stamp() {
    const CallStamp stamp{collective_fingerprint(d_, sequence_), g_.uncompared.take()};
    g_.uncompared.set_checkpoint(stamp);
    InFlight flight(g_.network, ctx_);
    for (int h : others_from_next()) {
      flight.send(leader(h), checkpoint_tag(sequence_), &stamp, sizeof stamp);
    }
    flight.wait_all();  // a tagged send's buffer is free at once, mostly; a put's after its flush
  }
  // Throws where the call at the start of host h's `message` differs from this leader's `call`
  // (the messages of the calls that do not wait: a call's fingerprint, then its data).
  void check_leading_call(const std::byte* message, int h,
                          const transport::Fingerprint& call) const {
    transport::Fingerprint theirs;
    std::memcpy(&theirs, message, sizeof theirs);
    if (theirs != call) fail_across_hosts(g_.network, call_mismatch(call, h, theirs));
  }
  // The messages of the rooted calls whose senders do not wait, on the pair's credit
  // (RootedCredit): a message to leader `peer` goes once the window has room for it, after the
  // acknowledgements it lacks, oldest first.
  void send_on_credit(InFlight& flight, int peer, const void* message, size_t bytes) {
    while (const std::optional<RootedCredit::Awaited> awaited =
               g_.credit.awaited_before(peer, bytes)) {
      await_acknowledgement(g_, peer, *awaited, ctx_);
    }
    flight.send(peer, tag(kFingerprint), message, bytes);
    g_.credit.sent(peer, sequence_, bytes);
  }
  // Such a message of `bytes` from leader `peer` was taken: where it crossed a multiple of the
  // pair's quantum, sends `peer` the pair's count, from `through` (which outlives `flight`).
  void acknowledge(InFlight& flight, int peer, size_t bytes, uint64_t& through) {
    const std::optional<uint64_t> count = g_.credit.received(peer, bytes);
    if (!count) return;
    through = *count;
    flight.send(peer, tag(kAcknowledgement), &through, sizeof through);
  }
  // This call's fingerprint, with the choices made for it that leaders must agree on.
  transport::Fingerprint call_fingerprint() const {
    transport::Fingerprint call = collective_fingerprint(d_, sequence_);
    if (network_) call = with_network_algorithm(call, *network_);
    if (gather_ring_) call = with_gather_exchange(call, *gather_ring_);
    return call;
  }
  Error call_mismatch(const transport::Fingerprint& mine, int h,
                      const transport::Fingerprint& theirs) const {
    return coll::call_mismatch(g_, ctx_, mine, h, theirs);
  }

  // Small collectives in one network round: every leader's message to every other leader carries
  // its fingerprint and the data that leader needs (post_messages' out_bytes, fill, in_bytes),
  // one message per pair of leaders instead of a fingerprint round before the data. Returns once
  // every message arrived and the fingerprints agree; f.carried[h] holds host h's data (in
  // scratch, so a mismatch touches no caller's buffer). Leaders only.
  template <class OutBytes, class Fill, class InBytes>
  void exchange_packed(Fingerprints& f, OutBytes&& out_bytes, Fill&& fill, InBytes&& in_bytes) {
    InFlight flight(g_.network, ctx_);  // ends before `f`, which it may still write into
    post_messages(flight, f, out_bytes, fill, in_bytes);
    check_fingerprints(flight, f);
    // And the sends: a send still in flight when `flight` goes would be cancelled, which closes
    // its connection. (A send completes once its buffer is free: a tagged one mostly at once,
    // a put one after its flush, no later than the other leader's message arrives here.)
    flight.wait_all();
  }
  // The same number of bytes to or from every host (exchange_packed's and gather_packed's sizes).
  static auto same_for_all(size_t bytes) {
    return [bytes](int) { return bytes; };
  }
  // gather_packed's fill: a copy of `data` into its one message.
  static auto copy_to(const void* data) {
    return [data](std::byte* to, size_t bytes) { copy_bytes(to, data, bytes); };
  }
  // What every leader needs from every other one: its stamp and a payload it sends alike to all
  // (`my_bytes` that fill_mine(where, bytes) writes; host h's is in_bytes(h) bytes). Directly
  // (exchange_packed: one round, a message to and from every other leader) or, where the cost
  // model finds the messages dearer than the rounds (leaders_gather_in_rounds), in ceil(log2 H)
  // rounds (gather_in_rounds). Returns as exchange_packed does. Leaders only.
  template <class FillMine, class InBytes>
  void gather_packed(Fingerprints& f, size_t my_bytes, FillMine&& fill_mine, InBytes&& in_bytes) {
    if (leaders_gather_in_rounds(hosts(), tuning_.network_cost)) {
      return gather_in_rounds(f, my_bytes, fill_mine, in_bytes);
    }
    exchange_packed(
        f, same_for_all(my_bytes), [&](int, std::byte* to, size_t n) { fill_mine(to, n); },
        in_bytes);
  }
  // Bruck et al.'s all-gather between the leaders (IEEE TPDS 8(11), 1997): position i of one
  // buffer holds the message (stamp, then payload) of host (this host + i) mod H, position 0 this
  // leader's own; in round k each leader sends its first min(2^k, H - 2^k) messages, in one
  // message, to the leader 2^k hosts before it and receives as many from the one 2^k after it,
  // into position 2^k. Every leader gets every other leader's stamp, as in the direct exchange,
  // and compares them all. Round 0's messages are the direct exchange's between neighbours (same
  // tag and size), so leaders that chose differently (their calls, and with them their payloads,
  // differ) see a wrong size or stamp instead of waiting for each other.
  template <class FillMine, class InBytes>
  void gather_in_rounds(Fingerprints& f, size_t my_bytes, FillMine&& fill_mine,
                        InBytes&& in_bytes) {
    stamp(f);
    const int hcount = hosts();
    auto host_at = [&](int position) { return (host_ + position) % hcount; };
    auto offset = per_call<size_t>(static_cast<size_t>(hcount) + 1);  // of each position
    for (int i = 0; i < hcount; ++i)
      offset[i + 1] = offset[i] + sizeof f.mine + (i == 0 ? my_bytes : in_bytes(host_at(i)));
    std::byte* gathered = g_.scratch.get(kGathered, offset[hcount]);
    std::memcpy(gathered, &f.mine, sizeof f.mine);
    fill_mine(gathered + sizeof f.mine, my_bytes);
    InFlight flight(g_.network, ctx_);  // ends before `f`, which points into `gathered`
    // Round k carries positions [reach, reach + min(reach, H - reach)), reach = 2^k.
    auto carried_end = [&](int reach) { return reach + std::min(reach, hcount - reach); };
    auto arrivals = per_call<size_t>();
    for (int reach = 1, k = 0; reach < hcount; reach *= 2, ++k) {
      arrivals.push_back(flight.recv(leader(host_at(reach)), tag(kFingerprint, k),
                                     gathered + offset[reach],
                                     offset[carried_end(reach)] - offset[reach]));
    }
    // Round k sends positions [0, min(2^k, H - 2^k)), which rounds before it filled: each round
    // waits for the previous one's arrival, so all of them are here.
    for (int reach = 1, k = 0; reach < hcount; reach *= 2, ++k) {
      if (k > 0) flight.wait(arrivals[k - 1]);
      const int to = leader((host_ - reach + hcount) % hcount);
      flight.send(to, tag(kFingerprint, k), gathered, offset[carried_end(reach) - reach]);
    }
    flight.wait(arrivals.back());
    for (int i = 1; i < hcount; ++i) take_message(f, host_at(i), gathered + offset[i]);
    flight.wait_all();  // the sends, as exchange_packed
  }
  // What a small reduce_scatter or all_to_all exchanges between the leaders: each sends every
  // other one a block of its own, pair_bytes(from, to) bytes (at most `largest_pair`) that
  // fill(to, where, bytes) writes. Directly (exchange_packed) or, where the cost model finds the
  // messages dearer than the rounds and the bytes they add (leaders_exchange_in_rounds), in
  // ceil(log2 H) rounds (exchange_in_rounds). Returns as exchange_packed does. Leaders only.
  template <class PairBytes, class Fill>
  void exchange_blocks(Fingerprints& f, size_t largest_pair, PairBytes&& pair_bytes, Fill&& fill) {
    if (leaders_exchange_in_rounds(hosts(), largest_pair, tuning_.network_cost)) {
      return exchange_in_rounds(f, pair_bytes, fill);
    }
    exchange_packed(
        f, [&](int h) { return pair_bytes(host_, h); }, fill,
        [&](int h) { return pair_bytes(h, host_); });
  }
  // Bruck et al.'s all-to-all between the leaders (the index algorithm, IEEE TPDS 8(11), 1997),
  // in gather_in_rounds' direction: position i (0 < i < H) holds a block [stamp | payload] bound
  // for the host i before the one it came from, at first this leader's own for host (this - i)
  // mod H. In round k each leader sends the positions whose i has bit k set, in one message, to
  // the leader 2^k hosts before it and takes as many from the one 2^k after it into the same
  // positions: a block moves by the set bits of its distance, and after the last round position
  // i holds host (this + i)'s block for this host, with that leader's stamp, so every leader
  // compares every other's as in the direct exchange. Every leader computes every message's size
  // from the pair sizes (what position i of leader q holds before round k came from host
  // q + (i mod 2^k)); a leader in another call sends a message of another size or stamp.
  template <class PairBytes, class Fill>
  void exchange_in_rounds(Fingerprints& f, PairBytes&& pair_bytes, Fill&& fill) {
    stamp(f);
    const int hcount = hosts();
    auto wrap = [hcount](int h) { return (h % hcount + hcount) % hcount; };
    // The size of the block at position i of host q's leader before the round that reaches 2^k.
    auto block_bytes = [&](int q, int i, int reach) {
      const int from = wrap(q + (i & (reach - 1)));
      return sizeof f.mine + pair_bytes(from, wrap(from - i));
    };
    auto round_bytes = [&](int q, int reach) {
      size_t total = 0;
      for (int i = reach; i < hcount; ++i)
        if ((i & reach) != 0) total += block_bytes(q, i, reach);
      return total;
    };
    // Scratch: this leader's blocks, then each round's message out and message in.
    size_t total = 0;
    auto own = per_call<size_t>(static_cast<size_t>(hcount));
    auto out = per_call<size_t>(), in = per_call<size_t>();
    for (int i = 1; i < hcount; ++i) {
      own[i] = total;
      total += block_bytes(host_, i, 1);
    }
    for (int reach = 1; reach < hcount; reach *= 2) {
      out.push_back(total);
      total += round_bytes(host_, reach);
      in.push_back(total);
      total += round_bytes(wrap(host_ + reach), reach);
    }
    std::byte* base = g_.scratch.get(kGathered, total);
    auto position = per_call<std::byte*>(static_cast<size_t>(hcount));
    for (int i = 1; i < hcount; ++i) {
      position[i] = base + own[i];
      std::memcpy(position[i], &f.mine, sizeof f.mine);
      const int to = wrap(host_ - i);
      fill(to, position[i] + sizeof f.mine, pair_bytes(host_, to));
    }
    InFlight flight(g_.network, ctx_);  // ends before `f`, which points into `base`
    auto arrivals = per_call<size_t>();
    for (int reach = 1, k = 0; reach < hcount; reach *= 2, ++k) {
      const int from = wrap(host_ + reach);
      arrivals.push_back(
          flight.recv(leader(from), tag(kFingerprint, k), base + in[k], round_bytes(from, reach)));
    }
    // Once round k's message is here, its positions are what it carried.
    auto take = [&](int reach, int k) {
      flight.wait(arrivals[k]);
      std::byte* next = base + in[k];
      for (int i = reach; i < hcount; ++i) {
        if ((i & reach) == 0) continue;
        position[i] = next;
        next += block_bytes(wrap(host_ + reach), i, reach);
      }
    };
    int reach = 1, k = 0;
    for (; reach < hcount; reach *= 2, ++k) {
      if (k > 0) take(reach / 2, k - 1);
      std::byte* message = base + out[k];
      std::byte* next = message;
      for (int i = reach; i < hcount; ++i) {
        if ((i & reach) == 0) continue;
        const size_t n = block_bytes(host_, i, reach);
        std::memcpy(next, position[i], n);
        next += n;
      }
      flight.send(leader(wrap(host_ - reach)), tag(kFingerprint, k), message,
                  static_cast<size_t>(next - message));
    }
    take(reach / 2, k - 1);
    for (int i = 1; i < hcount; ++i) take_message(f, wrap(host_ + i), position[i]);
    flight.wait_all();  // the sends, as exchange_packed
  }
  // A fill for exchange_packed: host h's ranks' blocks of `full` (one block per communicator
  // rank), in local order.
  auto blocks_for_host(const void* full, size_t block) const {
    return [this, full, block](int h, std::byte* to, size_t) {
      const std::vector<int>& theirs = ranks_on(h);
      for (size_t i = 0; i < theirs.size(); ++i)
        copy_bytes(at(to, i * block), at(full, theirs[i] * block), bytes(block));
    };
  }
  // Whether a collective whose largest message between leaders carries `bytes` of data goes in
  // one round (exchange_packed). Every rank decides from the same call and host layout; hosts
  // that still disagree (different counts) see a message of the wrong size: a mismatch.
  bool packs(size_t bytes) const { return bytes <= network_packed_bytes(collective_of(d_.kind)); }
  // The number of ranks on the largest host.
  size_t largest_host() const {
    size_t largest = 0;
    for (int h = 0; h < hosts(); ++h) largest = std::max(largest, ranks_on(h).size());
    return largest;
  }

  // dst = the reduction of parts[0], ..., parts[H-1] (one per host, in host order), an average
  // divided. dst may be any of the parts.
  void combine_hosts(void* dst, std::span<const void* const> parts, size_t count) {
    combine_in_order(dst, parts, count, /*last=*/true);
  }
  // dst = the reduction of `parts` in their order; an average is divided where this is the `last`
  // combining of these elements. dst may be any of the parts.
  void combine_in_order(void* dst, std::span<const void* const> parts, size_t count, bool last) {
    if (count == 0) return;  // the parts of an empty call may be null
    bool clash = false;      // reduce_n lets dst alias the first part only
    for (size_t h = 1; h < parts.size(); ++h)
      clash |= overlap(dst, bytes(count), parts[h], bytes(count));
    void* out = clash ? scratch(kCombineTemp, count) : dst;
    reduce_n(d_.dtype, partial_op(), out, parts.data(), static_cast<int>(parts.size()), count);
    if (last && d_.op == ReduceOp::avg) divide_n(d_.dtype, out, count, g_.hosts.ranks());
    copy_bytes(dst, out, bytes(count));
  }

  // A reduction's part that arrives at this rank from every other host's leader: `count`
  // elements each (stage kFirst, into scratch), chunk by chunk. Receives are posted before any
  // send of the collective: a windowed send waits for its peer's receive.
  struct Arrivals {
    Chunks chunks;
    std::vector<const std::byte*> from;  // per host
    std::vector<size_t> first;           // per host: the request of its first chunk
  };
  // `sender(h)`: the rank of host h that sends (its leader, unless per rail).
  template <class Sender>
  Arrivals expect_parts(InFlight& flight, size_t count, Sender&& sender) {
    Arrivals arrivals{chunks_of(count), std::vector<const std::byte*>(hosts()),
                      std::vector<size_t>(hosts())};
    for (int h = 0; h < hosts(); ++h) {
      if (h == host_) continue;
      std::byte* into = scratch(from_slot(h), count);
      arrivals.from[h] = into;
      arrivals.first[h] = post_recv(flight, sender(h), kFirst, into, count);
    }
    return arrivals;
  }
  Arrivals expect_parts(InFlight& flight, size_t count) {
    return expect_parts(flight, count, [this](int h) { return leader(h); });
  }
  // Waits for chunk c from every host and combines it, in host order with this host's own part
  // (`own`, the whole part), into `dst` (the whole result).
  void combine_arrived(InFlight& flight, const Arrivals& arrivals, size_t c, const void* own,
                       void* dst) {
    std::vector<const void*> parts(hosts());
    const size_t begin = arrivals.chunks.begin(c);
    for (int h = 0; h < hosts(); ++h) {
      if (h != host_) flight.wait(arrivals.first[h] + c);
      parts[h] = h == host_ ? at(own, begin) : at(arrivals.from[h], begin);
    }
    combine_hosts(at(dst, begin), parts, arrivals.chunks.length(c));
  }

  // Blocks of `ranks` (communicator ranks) from a buffer of one block per communicator rank:
  // where they lie (consecutive ranks) or packed into scratch slot `slot`.
  const void* blocks_of(const void* full, const std::vector<int>& ranks, size_t block,
                        size_t slot) const {
    if (consecutive(ranks)) return at(full, ranks.empty() ? 0 : ranks[0] * block);
    std::byte* out = scratch(slot, ranks.size() * block);
    for (size_t i = 0; i < ranks.size(); ++i)
      copy_bytes(at(out, i * block), at(full, ranks[i] * block), bytes(block));
    return out;
  }
  // Where to receive the blocks of `ranks` into a buffer of one block per communicator rank:
  // in place (consecutive ranks) or in scratch slot `slot`, unpacked by place_blocks.
  void* landing_for(void* full, const std::vector<int>& ranks, size_t block, size_t slot) const {
    if (consecutive(ranks)) return at(full, ranks.empty() ? 0 : ranks[0] * block);
    return scratch(slot, ranks.size() * block);
  }
  // Elements [begin, begin + count) of host h's blocks in its local order (what h's leader sends
  // or is sent), in the parts that lie together in a buffer of one block per communicator rank:
  // span(place, element, length) for each, `place` where it lies in such a buffer, `element`
  // where it starts among h's blocks. One part where h's ranks are consecutive, else one per
  // block touched.
  template <class Span>
  void for_each_place(int h, size_t begin, size_t count, Span&& span) const {
    const size_t block = d_.count;
    const std::vector<int>& theirs = ranks_on(h);
    if (consecutive(theirs)) return span(theirs[0] * block + begin, begin, count);
    for (size_t done = 0; done < count;) {
      const size_t element = begin + done;
      const size_t length = std::min(block - element % block, count - done);
      span(theirs[element / block] * block + element % block, element, length);
      done += length;
    }
  }
  // The blocks of `ranks`, packed in local order, to their places in a buffer of one block per
  // communicator rank.
  void place_blocks(void* full, const void* packed, const std::vector<int>& ranks,
                    size_t block) const {
    for (size_t i = 0; i < ranks.size(); ++i)
      copy_bytes(at(full, ranks[i] * block), at(packed, i * block), bytes(block));
  }

  void all_reduce() {
    switch (choose_network(Collective::all_reduce)) {
      case NetworkAlgorithm::one_shot: return all_reduce_one_shot();
      case NetworkAlgorithm::per_rail: return reduce_per_rail(/*to_everyone=*/true);
      case NetworkAlgorithm::halving_doubling: return all_reduce_halving_doubling();
      case NetworkAlgorithm::tree:  // broadcast's only: never chosen here (network_cost.h)
      case NetworkAlgorithm::pipelined: return reduce_in_slices(/*to_everyone=*/true);
    }
  }

  // all_reduce by recursive halving and doubling between the leaders (network_cost.h): after the
  // fingerprint round, each host's partial result at its leader (a reduce in shared memory into
  // the leader's output), the leaders' rounds (halve_and_double), and a broadcast in shared
  // memory from the leader. Nothing overlaps the network: the model takes it for small messages
  // only (halving_doubling_messages_are_small).
  void all_reduce_halving_doubling() {
    const size_t n = d_.count;
    compare_fingerprints_across_hosts();
    if (alone()) {
      copy_bytes(d_.recv, d_.send, bytes(n));
    } else {
      local(local_desc(OpKind::reduce, n, 0, d_.send, d_.recv, partial_op()));
    }
    if (is_leader()) halve_and_double(d_.recv, n);
    if (!alone()) local(local_desc(OpKind::broadcast, n, 0, d_.recv, d_.recv));
  }

  // The leaders' rounds of halving_doubling on `result`, this host's partial result, which it
  // leaves holding the whole result. A host paired with the one before it (HalvingDoubling) hands
  // its partial result to it and gets the result back. The others take part in log2 P rounds of
  // the reduce-scatter: in round k, with the leader at position v XOR 2^k, each keeps one half of
  // the range both hold (the lower half where bit k of v is 0), sends the other and combines
  // what arrives for its half, the lower positions' partial result first: the positions'
  // partial results combine as a balanced binary tree in position order, and so the hosts'
  // (a pair's first: its even host's before its odd one's), each element once, on one leader.
  // Then the all-gather undoes the rounds, last first, each leader sending the range it holds
  // and receiving its partner's into place. Every transfer is cut in chunks (chunks_of), combined
  // as they arrive.
  void halve_and_double(void* result, size_t n) {
    const HalvingDoubling shape(hosts());
    const int position = shape.position_of(host_);
    InFlight flight(g_.network, ctx_);
    if (position < 0) {  // an odd host of a pair: the even one, host_ - 1, works for both
      const int even = leader(host_ - 1);
      const Chunks chunks = chunks_of(n);
      flight.wait_run(post_send(flight, even, kPair, result, n), chunks.number);
      // Posted once the send is done: the result lands where the partial result was.
      flight.wait_run(post_recv(flight, even, kPair, result, chunks), chunks.number);
      return;
    }
    const bool paired = position < shape.pairs();
    if (paired) {  // the odd host's partial result, after this one's
      const Arrival pair = expect(flight, leader(host_ + 1), kPair, n);
      combine_as_it_arrives(flight, pair, result, /*mine_first=*/true, /*last=*/false);
    }
    struct Range {
      size_t begin = 0, count = 0;
    };
    struct Round {
      int partner = 0;
      Range kept, given;
    };
    std::array<Round, 32> rounds{};
    Range range{0, n};
    for (int k = 0; k < shape.rounds(); ++k) {
      const int bit = 1 << k;
      const bool lower = (position & bit) == 0;
      const size_t half = range.count / 2;
      const Range low{range.begin, half}, high{range.begin + half, range.count - half};
      Round& round = rounds[static_cast<size_t>(k)];
      round = {leader(shape.host_at(position ^ bit)), lower ? low : high, lower ? high : low};
      const Arrival theirs = expect(flight, round.partner, kFirst, round.kept.count);
      const size_t sent = post_send(flight, round.partner, kFirst, at(result, round.given.begin),
                                    round.given.count);
      combine_as_it_arrives(flight, theirs, at(result, round.kept.begin), lower,
                            /*last=*/k + 1 == shape.rounds());
      flight.wait_run(sent, chunks_of(round.given.count).number);
      range = round.kept;
    }
    for (int k = shape.rounds() - 1; k >= 0; --k) {
      const Round& round = rounds[static_cast<size_t>(k)];
      const Chunks in = chunks_of(round.given.count);
      const size_t arrival =
          post_recv(flight, round.partner, kSecond, at(result, round.given.begin), in);
      const size_t sent =
          post_send(flight, round.partner, kSecond, at(result, round.kept.begin), round.kept.count);
      flight.wait_run(arrival, in.number);
      flight.wait_run(sent, chunks_of(round.kept.count).number);
    }
    if (paired) {
      flight.wait_run(post_send(flight, leader(host_ + 1), kPair, result, n), chunks_of(n).number);
    }
  }

  // A transfer of `count` elements from a peer, posted in chunks into scratch (kHostData).
  struct Arrival {
    Chunks chunks;
    const std::byte* data = nullptr;
    size_t first = 0;  // its first chunk's request
  };
  Arrival expect(InFlight& flight, int peer, Stage stage, size_t count) {
    std::byte* into = scratch(kHostData, count);
    const Chunks chunks = chunks_of(count);
    return {chunks, into, post_recv(flight, peer, stage, into, chunks)};
  }
  // Combines each chunk of `theirs` into `mine` as it arrives: mine = mine op theirs where
  // `mine_first`, else theirs op mine.
  void combine_as_it_arrives(InFlight& flight, const Arrival& theirs, void* mine, bool mine_first,
                             bool last) {
    for (size_t c = 0; c < theirs.chunks.number; ++c) {
      flight.wait(theirs.first + c);
      std::byte* own = at(mine, theirs.chunks.begin(c));
      const void* parts[2] = {own, at(theirs.data, theirs.chunks.begin(c))};
      if (!mine_first) std::swap(parts[0], parts[1]);
      combine_in_order(own, parts, theirs.chunks.length(c), last);
    }
  }

  // The smallest slice of a pipelined all_reduce under these settings (network_cost.h).
  size_t min_slice_bytes() const { return all_reduce_min_slice_bytes(tuning_.network_cost); }
  // Segment s of `cut`, each rail's part of it in place on the rail's rank, reaches every rank of
  // the host: an all-gather in shared memory, in place, and in the last segment a broadcast of the
  // tail from the last rail.
  void gather_rails_inside(const RailSegments& cut, size_t s) {
    local(local_desc(OpKind::all_gather, cut.per_part(s), 0,
                     at(d_.recv, cut.part_begin(s, static_cast<size_t>(local_rank_))),
                     at(d_.recv, cut.segment_begin(s))));
    if (cut.last(s) && cut.tail() > 0) {
      const size_t tail_begin = cut.count - cut.tail();
      local(local_desc(OpKind::broadcast, cut.tail(), static_cast<int>(cut.rails) - 1,
                       at(d_.recv, tail_begin), at(d_.recv, tail_begin)));
    }
  }

  // all_reduce, and reduce to a root, per rail (every host has L >= 2 ranks; network_cost.h), in
  // segments, pipelined like reduce_in_slices: segment s is reduce-scattered inside the host
  // (local rank l gets the host's partial result of part l) while part l of segment s-1 crosses
  // the network between the ranks of rail l and segment s-2 is all-gathered inside every host
  // (reduce: gathered to the root, on the root's host only). Between the ranks of a rail, the
  // rail's part is cut into slices as reduce_in_slices cuts a segment between representatives
  // (SliceOwners): owner k's rank combines slice k from every host in host order and sends the
  // result to every other host (all_reduce) or to the root's (reduce; where that host owns no
  // slice, its ranks send at most kRootLeadSegments ahead of the results they have back). The
  // reduction order is the leaders' (local order inside each host, then host order), so the bits
  // are those of the other algorithms. Segments start at multiples of L so that each splits into
  // L equal parts; the last segment's n % L trailing elements go with the last rail (a reduce to
  // it inside the host; at the end a broadcast from it). all_reduce works in the caller's output;
  // reduce in scratch (only the root has an output), each rank's parts one after the other: 1/L
  // of the buffer. The fingerprint round stays between the leaders: ranks of other rails that
  // called something else fail in the host's first shared-memory step, which their leader left.
  void reduce_per_rail(bool to_everyone) {
    compare_fingerprints_across_hosts();
    const size_t n = d_.count;
    const int hcount = hosts();
    const int root_host = to_everyone ? -1 : g_.hosts.host_of(d_.root);
    const SliceOwners owners(hcount, root_host);
    const int owner_count = owners.count();
    const int my_slice = owners.slice_of[host_];
    const bool gets_results = to_everyone || host_ == root_host;
    const size_t rails = static_cast<size_t>(this->rails());
    const size_t rail = static_cast<size_t>(local_rank_);
    const bool last_rail = rail + 1 == rails;
    const RailSegments cut{n, rails,
                           all_reduce_segments(bytes(n / rails), owner_count, min_slice_bytes())};
    const size_t segments = cut.segments, tail = cut.tail();
    // This rank's part of segment s (the last rail's part of the last segment followed by the
    // tail).
    std::byte* parts_here =
        to_everyone ? nullptr : scratch(kCombined, cut.whole() + (last_rail ? tail : 0));
    auto part = [&](size_t s) {
      return to_everyone ? at(d_.recv, cut.part_begin(s, rail))
                         : at(parts_here, cut.segment_begin(s) / rails);
    };
    // Slice k of this rank's part of segment s.
    auto slice_offset = [&](size_t s, int k) {
      return cut.part_length(s, rail) * static_cast<size_t>(k) / static_cast<size_t>(owner_count);
    };
    auto slice_length = [&](size_t s, int k) {
      return slice_offset(s, k + 1) - slice_offset(s, k);
    };
    auto slice = [&](size_t s, int k) { return part(s) + bytes(slice_offset(s, k)); };
    InFlight flight(g_.network, ctx_);
    const ProgressInsideHost progress_inside(*this, flight);
    // Where this host owns a slice: that slice of every segment from every other host (into
    // scratch, at offset mine[s]). Where this host gets the result: every other slice's result
    // from its owner, where this host's partial of it was (it cannot arrive before the owner has
    // that partial).
    std::vector<size_t> mine(segments + 1, 0);
    for (size_t s = 0; s < segments && my_slice >= 0; ++s) {
      mine[s + 1] = mine[s] + slice_length(s, my_slice);
    }
    std::vector<std::byte*> from(hcount, nullptr);
    std::vector<size_t> arrivals(static_cast<size_t>(hcount) * segments);      // [s * H + h]
    std::vector<size_t> results(static_cast<size_t>(owner_count) * segments);  // [s * K + k]
    for (int h = 0; h < hcount && my_slice >= 0; ++h) {
      if (h == host_) continue;
      from[h] = scratch(from_slot(h), mine[segments]);
      for (size_t s = 0; s < segments; ++s) {
        arrivals[s * hcount + h] = flight.recv(rail_peer(h), tag(kFirst, s), at(from[h], mine[s]),
                                               bytes(slice_length(s, my_slice)));
      }
    }
    for (int k = 0; k < owner_count && gets_results; ++k) {
      if (k == my_slice) continue;
      for (size_t s = 0; s < segments; ++s) {
        results[s * owner_count + k] = flight.recv(rail_peer(owners.hosts[k]), tag(kSecond, s),
                                                   slice(s, k), bytes(slice_length(s, k)));
      }
    }
    const std::vector<int> others = others_from_next();
    std::vector<int> other_owners;
    for (int h : others) {
      if (owners.slice_of[h] >= 0) other_owners.push_back(h);
    }
    std::vector<const void*> parts(hcount);
    for (size_t step = 0; step < segments + 2; ++step) {
      if (step < segments) {  // reduce-scatter segment `step` inside the host, send its slices
        const size_t s = step;
        if (gets_results && my_slice < 0 && s >= kRootLeadSegments) {
          for (int k = 0; k < owner_count; ++k) {
            flight.wait(results[(s - kRootLeadSegments) * owner_count + k]);
          }
        }
        local(local_desc(OpKind::reduce_scatter, cut.per_part(s), 0,
                         at(d_.send, cut.segment_begin(s)), part(s), partial_op()));
        if (cut.last(s) && tail > 0) {
          local(local_desc(OpKind::reduce, tail, static_cast<int>(rails) - 1, at(d_.send, n - tail),
                           last_rail ? part(s) + bytes(cut.per_part(s)) : nullptr, partial_op()));
        }
        for (int h : other_owners) {
          const int k = owners.slice_of[h];
          flight.send(rail_peer(h), tag(kFirst, s), slice(s, k), bytes(slice_length(s, k)));
        }
      }
      if (my_slice >= 0 && step >= 1 && step <= segments) {  // combine segment step-1's slice
        const size_t s = step - 1;
        for (int h = 0; h < hcount; ++h) {
          if (h != host_) flight.wait(arrivals[s * hcount + h]);
          parts[h] = h == host_ ? slice(s, my_slice) : at(from[h], mine[s]);
        }
        std::byte* combined = slice(s, my_slice);
        combine_hosts(combined, parts, slice_length(s, my_slice));
        for (int h : others) {
          if (!to_everyone && h != root_host) continue;
          flight.send(rail_peer(h), tag(kSecond, s), combined, bytes(slice_length(s, my_slice)));
        }
      }
      if (gets_results && step >= 2) {  // segment step-2 is complete on this rail
        const size_t s = step - 2;
        for (int k = 0; k < owner_count; ++k) {
          if (k != my_slice) flight.wait(results[s * owner_count + k]);
        }
        if (to_everyone) {
          gather_rails_inside(cut, s);
        } else {
          gather_rails_to_root(cut, s, part(s));
        }
      }
    }
    flight.wait_all();
  }
  // reduce per rail's last step on the root's host: segment s, each rail's part of it at `part`
  // on the rail's rank, gathered to the root; in the last segment the tail, after the last
  // rail's part, broadcast from it (the ranks other than the root and the last rail take their
  // copies into scratch).
  void gather_rails_to_root(const RailSegments& cut, size_t s, std::byte* part) {
    const bool root = me_ == d_.root;
    const int local_root = g_.hosts.local_rank(d_.root);
    local(local_desc(OpKind::gather, cut.per_part(s), local_root, part,
                     root ? at(d_.recv, cut.segment_begin(s)) : nullptr));
    if (!cut.last(s) || cut.tail() == 0) return;
    const int last_rail = static_cast<int>(cut.rails) - 1;
    std::byte* after_part = part + bytes(cut.per_part(s));
    std::byte* into = root                       ? at(d_.recv, cut.count - cut.tail())
                      : local_rank_ == last_rail ? after_part
                                                 : scratch(kOwnPart, cut.tail());
    local(local_desc(OpKind::broadcast, cut.tail(), last_rail, after_part, into));
  }

  // all_reduce in one network round (the cost model picks it for small messages; chunked as every
  // transfer): each leader sends its host's partial result, with its fingerprint, to every other
  // leader, and combines all of them in host order (every leader the same bits). The data lands in
  // scratch and is combined only once the fingerprints agree, so a mismatch touches no caller's
  // buffer. One round instead of three (fingerprints, reduce-scatter, all-gather): measured 8 B on
  // 2 emulated hosts, 212 us before.
  void all_reduce_one_shot() {
    const size_t n = d_.count;
    const void* partial = d_.send;
    if (!alone()) {
      local(local_desc(OpKind::reduce, n, 0, d_.send, d_.recv, partial_op()));
      partial = d_.recv;
    }
    if (is_leader() && packs(bytes(n))) {
      Fingerprints fingerprints;
      gather_packed(fingerprints, bytes(n), copy_to(partial), same_for_all(bytes(n)));
      fingerprints.carried[host_] = partial;
      combine_hosts(d_.recv, fingerprints.carried, n);
    } else if (is_leader()) {
      Fingerprints fingerprints;  // outlives `flight`, which cancels what is pending into it
      InFlight flight(g_.network, ctx_);
      post_fingerprints(flight, fingerprints);
      std::vector<const void*> parts(hosts());
      for (int h = 0; h < hosts(); ++h) {
        if (h == host_) {
          parts[h] = partial;
          continue;
        }
        std::byte* from = scratch(from_slot(h), n);
        post_recv(flight, leader(h), kFirst, from, n);
        parts[h] = from;
      }
      for (int h : others_from_next()) post_send(flight, leader(h), kFirst, partial, n);
      check_fingerprints(flight, fingerprints);
      flight.wait_all();
      combine_hosts(d_.recv, parts, n);
    }
    if (!alone()) local(local_desc(OpKind::broadcast, n, 0, d_.recv, d_.recv));
  }

  // In one round where the other hosts' partial results pack together and the cost model prices
  // the root's link taking them all no dearer than the slices (reduce_in_one_round); otherwise per
  // rail where the rails may carry it (goes_per_rail), else between the representatives, whose
  // slices cross each link about once.
  void reduce() {
    if (reduce_in_one_round(bytes(d_.count), hosts(), tuning_.network_cost)) {
      return reduce_one_round();
    }
    if (goes_per_rail()) {
      return reduce_per_rail(/*to_everyone=*/false);
    }
    reduce_in_slices(/*to_everyone=*/false);
  }

  // A small reduce in one network round, as small gather goes: each leader's fingerprint message
  // to the root's leader carries its host's partial result (to_root_packed; on many hosts up a
  // binomial tree of the leaders, each message its subtree's partial results), and the root's
  // leader combines them in host order once the calls agree, so a mismatch touches no caller's
  // buffer. Where the root does not lead its host, its leader hands the result over by a
  // shared-memory broadcast. One round instead of three (fingerprints, slices to their owners,
  // results to the root): 2.1-2.9x faster at 8 B to 2 KiB on 2, 4 and 8 emulated hosts of one
  // rank (docs/fabric.md).
  void reduce_one_round() {
    const size_t n = d_.count;
    const int root_host = g_.hosts.host_of(d_.root);
    const bool root_host_here = host_ == root_host;
    // The host's partial result at its leader: the caller's input on a host of one rank, else
    // reduced into the root's output (a leading root) or scratch.
    void* combined = me_ == d_.root ? d_.recv : scratch(kCombined, n);
    const void* partial = d_.send;
    if (!alone()) {
      local(local_desc(OpKind::reduce, n, 0, d_.send, is_leader() ? combined : nullptr,
                       partial_op()));
      partial = combined;
    }
    if (is_leader()) {
      std::pmr::vector<const void*> parts = to_root_packed(partial, same_for_all(bytes(n)));
      if (root_host_here) {
        parts[host_] = partial;
        combine_hosts(combined, parts, n);
      }
    }
    if (alone()) return;
    // A root that does not lead its host gets the result by a broadcast from its leader. The
    // other ranks do not wait for their leader's comparison: a mismatch fails them at their next
    // wait (a barrier here measured 21-51 us a call against 13-23 but one point without, 2
    // emulated hosts x 2 ranks, 8 B .. 2 KiB; docs/fabric.md).
    if (root_host_here && !root_leads()) {
      void* into = me_ == d_.root ? d_.recv : combined;  // a non-root's copy lands in scratch
      local(local_desc(OpKind::broadcast, n, 0, combined, into));
    }
  }

  // all_reduce, and reduce to a root, in segments, pipelined: segment s is reduced inside the
  // host (to its representative: the root on the root's host, the leader elsewhere) while
  // segment s-1 crosses the network and (all_reduce) segment s-2 is broadcast inside the host.
  // Between the representatives, each segment is reduce-scattered over the slice owners
  // (SliceOwners): owner k's representative combines slice k from every host, in host order, as
  // the slices arrive, and sends the result at once to every other host (all_reduce) or to the
  // root (reduce). A root that owns no slice sends at most kRootLeadSegments ahead of the results
  // it has back. Segments are as many as keep each slice at least
  // all_reduce_min_slice_bytes (one segment when small). Running the local reduce further ahead
  // was slower (4 hosts x 2 ranks: 0.95 of the link with three segments ahead, 0.98 with one).
  void reduce_in_slices(bool to_everyone) {
    const size_t n = d_.count;
    const int hcount = hosts();
    const int root_host = to_everyone ? -1 : g_.hosts.host_of(d_.root);
    // all_reduce goes between the leaders; reduce between the representatives.
    auto rep = [&](int h) { return to_everyone ? leader(h) : representative(h); };
    const int local_root = g_.hosts.local_rank(rep(host_));
    const bool on_network = me_ == rep(host_);
    const bool has_result = to_everyone || me_ == d_.root;
    const SliceOwners owners(hcount, root_host);
    const std::vector<int>& slice_of = owners.slice_of;
    const int owner_count = owners.count();
    const int my_slice = slice_of[host_];
    // A reduce on two hosts, where the root's host combines everything: the other host's leader
    // sends ahead (leaders_send_ahead), and the root posts its receives (into scratch) before its
    // own check, so the data does not wait as an unexpected message.
    const bool ahead = !to_everyone && leaders_send_ahead();
    const Stage data_stage = ahead ? kAhead : kFirst;
    const bool sends_ahead = ahead && on_network && my_slice < 0;
    Fingerprints fingerprints;  // outlives `flight`, which cancels what is pending into it
    if (!ahead) compare_fingerprints_across_hosts();
    const size_t segments = all_reduce_segments(bytes(n), owner_count, min_slice_bytes());
    // Slice k of segment s starts at slice_begin(s, k); slice_begin(s, owners) is where segment
    // s + 1 starts.
    auto slice_begin = [&](size_t s, int k) {
      const size_t first = n * s / segments;
      const size_t length = n * (s + 1) / segments - first;
      return first + length * static_cast<size_t>(k) / static_cast<size_t>(owner_count);
    };
    auto slice_length = [&](size_t s, int k) { return slice_begin(s, k + 1) - slice_begin(s, k); };
    // The host's partial result at its representative (the caller's input itself when the host
    // has one rank), and where the combined slices go: the caller's output where it has one,
    // else scratch (a representative that is not the root of a reduce).
    void* result = has_result ? d_.recv : on_network ? scratch(kCombined, n) : nullptr;
    const void* partial = alone() ? d_.send : result;
    auto segment = [&](size_t s, OpKind kind) {  // this host's part of segment s
      const size_t first = slice_begin(s, 0);
      const size_t count = slice_begin(s, owner_count) - first;
      std::byte* out = result == nullptr ? nullptr : at(result, first);
      if (kind == OpKind::reduce) {
        local(local_desc(kind, count, local_root, at(d_.send, first), out, partial_op()));
      } else {
        local(local_desc(kind, count, local_root, out, out));
      }
    };
    InFlight flight(g_.network, ctx_);
    if (sends_ahead) post_fingerprints(flight, fingerprints);
    // The representative's receives, all posted at once: where this host owns a slice, that
    // slice of every segment from every other host (into scratch, at offset `mine[s]`); where
    // this rank has the output, each slice's result from its owner. A result lands where this
    // host's part of that slice was: it cannot arrive before its owner has that part.
    std::vector<size_t> mine(segments + 1, 0);
    std::vector<std::byte*> from(hcount, nullptr);
    std::vector<size_t> arrivals(static_cast<size_t>(hcount) * segments);      // [s * H + h]
    std::vector<size_t> results(static_cast<size_t>(owner_count) * segments);  // [s * K + k]
    if (on_network) {
      for (size_t s = 0; s < segments && my_slice >= 0; ++s) {
        mine[s + 1] = mine[s] + slice_length(s, my_slice);
      }
      for (int h = 0; h < hcount && my_slice >= 0; ++h) {
        if (h == host_) continue;
        from[h] = scratch(from_slot(h), mine[segments]);
        for (size_t s = 0; s < segments; ++s) {
          arrivals[s * hcount + h] = flight.recv(rep(h), tag(data_stage, s), at(from[h], mine[s]),
                                                 bytes(slice_length(s, my_slice)));
        }
      }
      for (int k = 0; k < owner_count && has_result; ++k) {
        if (k == my_slice) continue;
        for (size_t s = 0; s < segments; ++s) {
          results[s * owner_count + k] =
              flight.recv(rep(owners.hosts[k]), tag(kSecond, s), at(d_.recv, slice_begin(s, k)),
                          bytes(slice_length(s, k)));
        }
      }
    }
    if (ahead && !sends_ahead) compare_fingerprints_across_hosts();
    // The other hosts from the next one on, so that the hosts do not all send to one first.
    const std::vector<int> others = on_network ? others_from_next() : std::vector<int>{};
    std::vector<int> other_owners;
    for (int h : others) {
      if (slice_of[h] >= 0) other_owners.push_back(h);
    }
    std::vector<const void*> parts(hcount);
    for (size_t step = 0; step < segments + 2; ++step) {
      if (step < segments) {  // reduce segment `step` inside the host and send its slices
        const size_t s = step;
        if (on_network && has_result && my_slice < 0 && s >= kRootLeadSegments) {
          for (int k = 0; k < owner_count; ++k) {
            flight.wait(results[(s - kRootLeadSegments) * owner_count + k]);
          }
        }
        if (!alone()) segment(s, OpKind::reduce);
        for (int h : other_owners) {
          flight.send(rep(h), tag(data_stage, s), at(partial, slice_begin(s, slice_of[h])),
                      bytes(slice_length(s, slice_of[h])));
        }
      }
      if (on_network && my_slice >= 0 && step >= 1 && step <= segments) {
        const size_t s = step - 1;  // combine segment step-1's slice and send it on
        for (int h = 0; h < hcount; ++h) {
          if (h != host_) flight.wait(arrivals[s * hcount + h]);
          parts[h] = h == host_ ? at(partial, slice_begin(s, my_slice)) : at(from[h], mine[s]);
        }
        void* combined = at(result, slice_begin(s, my_slice));
        combine_hosts(combined, parts, slice_length(s, my_slice));
        for (int h : others) {
          if (!to_everyone && h != root_host) continue;
          flight.send(rep(h), tag(kSecond, s), combined, bytes(slice_length(s, my_slice)));
        }
      }
      if (to_everyone && step >= 2) {  // segment step-2 is complete: broadcast it inside the host
        const size_t s = step - 2;
        for (int k = 0; k < owner_count && on_network; ++k) {
          if (k != my_slice) flight.wait(results[s * owner_count + k]);
        }
        if (!alone()) segment(s, OpKind::broadcast);
      }
    }
    if (sends_ahead) check_fingerprints(flight, fingerprints);
    flight.wait_all();
  }

  // A pipelined chain across hosts, starting at the root's host: the root sends its data in
  // chunks to the next host's leader, which forwards each chunk as it arrives while the later
  // ones are still coming (every link carries the data once, so the per-link rate does not drop
  // with the number of hosts), the chunks cut for the hops they cross (chain_chunk_elems); then
  // each host broadcasts from its representative.
  void broadcast() {
    switch (choose_network(Collective::broadcast)) {
      case NetworkAlgorithm::one_shot: return broadcast_one_round();
      case NetworkAlgorithm::per_rail: return broadcast_per_rail();
      case NetworkAlgorithm::tree: return broadcast_tree();
      case NetworkAlgorithm::halving_doubling:  // all_reduce's only: never chosen here
      case NetworkAlgorithm::pipelined: break;
    }
    compare_fingerprints_across_hosts();
    const size_t n = d_.count;
    const int root_host = g_.hosts.host_of(d_.root);
    const int position = (host_ - root_host + hosts()) % hosts();  // along the chain
    const bool in_chain = me_ == d_.root || (is_leader() && host_ != root_host);
    if (in_chain) {
      const int next = position + 1 < hosts() ? leader((host_ + 1) % hosts()) : -1;
      const int previous = position == 1 ? d_.root : leader((host_ - 1 + hosts()) % hosts());
      const Chunks chunks = chain_chunks_of(n);
      const void* data = me_ == d_.root ? d_.send : d_.recv;
      InFlight flight(g_.network, ctx_);
      const size_t first =
          me_ == d_.root ? 0 : post_recv(flight, previous, kFirst, d_.recv, chunks);
      for (size_t c = 0; c < chunks.number; ++c) {
        if (me_ != d_.root) flight.wait(first + c);
        if (next >= 0) {
          flight.send(next, tag(kFirst, c), at(data, chunks.begin(c)), bytes(chunks.length(c)));
        }
      }
      flight.wait_all();
    }
    broadcast_inside_hosts();
  }

  // The leaders' broadcasts end here: each host broadcasts from its representative, which has the
  // data (on a host of one rank, the root copies its own).
  void broadcast_inside_hosts() {
    const size_t n = d_.count;
    if (alone()) {
      if (me_ == d_.root) copy_bytes(d_.recv, d_.send, bytes(n));
      return;
    }
    const void* source = me_ == d_.root ? d_.send : d_.recv;
    local(local_desc(OpKind::broadcast, n, representative_local_rank(host_), source, d_.recv));
  }

  // broadcast per rail (every host has L >= 2 ranks; network_cost.h): rail l carries part l of
  // every segment along the chain of hosts from the root's, so a host's L links carry the data
  // once between them. On the root's host, segment s is broadcast in shared memory from the root
  // and local rank l sends part l on to its rail's rank on the next host; down the chain, rank l
  // forwards part l as it arrives, and once every rail's part of segment s is in, the host
  // all-gathers it in place. The shared-memory steps overlap the transfers of other segments.
  void broadcast_per_rail() {
    compare_fingerprints_across_hosts();
    const int hcount = hosts();
    const int position = (host_ - g_.hosts.host_of(d_.root) + hcount) % hcount;  // along the chain
    const int next = position + 1 < hcount ? rail_peer((host_ + 1) % hcount) : -1;
    const int previous = position > 0 ? rail_peer((host_ - 1 + hcount) % hcount) : -1;
    const size_t rails = static_cast<size_t>(this->rails());
    const size_t rail = static_cast<size_t>(local_rank_);
    const RailSegments cut{d_.count, rails,
                           all_reduce_segments(bytes(d_.count / rails), 1, min_slice_bytes())};
    InFlight flight(g_.network, ctx_);
    const ProgressInsideHost progress_inside(*this, flight);
    std::vector<size_t> arrivals(cut.segments);
    for (size_t s = 0; previous >= 0 && s < cut.segments; ++s) {
      arrivals[s] = flight.recv(previous, tag(kFirst, s), at(d_.recv, cut.part_begin(s, rail)),
                                bytes(cut.part_length(s, rail)));
    }
    const int local_root = g_.hosts.local_rank(d_.root);
    for (size_t s = 0; s < cut.segments; ++s) {
      if (previous < 0) {  // the root's host: the whole segment, tail included, from the root
        const size_t begin = cut.segment_begin(s);
        const size_t end = cut.last(s) ? cut.count : cut.segment_begin(s + 1);
        const void* source = at(me_ == d_.root ? d_.send : d_.recv, begin);
        local(local_desc(OpKind::broadcast, end - begin, local_root, source, at(d_.recv, begin)));
      } else {
        flight.wait(arrivals[s]);
      }
      if (next >= 0) {
        flight.send(next, tag(kFirst, s), at(d_.recv, cut.part_begin(s, rail)),
                    bytes(cut.part_length(s, rail)));
      }
      if (previous >= 0) gather_rails_inside(cut, s);
    }
    flight.wait_all();
  }

  // broadcast in one network round (the cost model picks it for small messages): the root sends its
  // data to every other host's leader while the leaders exchange fingerprints; a leader copies the
  // data (landed in scratch) into the caller's buffer only once the fingerprints agree, then each
  // host broadcasts from its representative. One network latency instead of two (fingerprints, then
  // the chain). Small, from a root that leads its host, the data follows the root's call in one
  // message and the root does not wait (broadcast_unacknowledged).
  void broadcast_one_round() {
    const size_t n = d_.count;
    const int root_host = g_.hosts.host_of(d_.root);
    const bool receives = is_leader() && host_ != root_host;  // the data, from the root
    if (root_leads() && packs(bytes(n))) {
      // Small, from a host leader: the data follows the root's call, and the root goes on.
      if (is_leader()) broadcast_unacknowledged(root_host);
    } else {
      Fingerprints fingerprints;  // outlives `flight`, which cancels what is pending into it
      InFlight flight(g_.network, ctx_);
      std::byte* landed = nullptr;
      if (is_leader()) post_fingerprints(flight, fingerprints);
      if (receives) {
        landed = scratch(kHostData, n);
        post_recv(flight, d_.root, kFirst, landed, n);
      }
      if (me_ == d_.root) {
        for (int h : others_from_next()) post_send(flight, leader(h), kFirst, d_.send, n);
      }
      if (is_leader()) check_fingerprints(flight, fingerprints);
      flight.wait_all();
      if (receives) copy_bytes(d_.recv, landed, bytes(n));
    }
    broadcast_inside_hosts();
  }

  // broadcast down a binomial tree of the hosts from the root's (the cost model picks it for mid
  // sizes on 3 or more hosts: ceil(log2 H) hops of the whole buffer, where one round sends H - 1
  // copies through the root's link and the chain's chunks cross H - 1 hops). Each leader sends to
  // its children one after the other, farthest first, each once the one before has taken the
  // buffer (sent at once, they would share the link and all finish late). Every other leader
  // receives into scratch, passes the buffer on as soon as it is in, and copies it into the
  // caller's buffer once its call is known to agree:
  // - where the root leads its host, as a small broadcast whose root does not wait
  //   (broadcast_unacknowledged): the root's call goes down the tree ahead of the data, each
  //   leader compares it with its own before passing anything on, and the calls' digest goes
  //   with the next fingerprint exchange or checkpoint stamp;
  // - where the root does not lead, the leaders exchange fingerprints beside the data and
  //   compare them before the copy.
  // A leader in another call fails (on the call it received, the fingerprints, or a message
  // longer than its own: a mismatch too) and its failure notice reaches those waiting on it.
  // Then each host broadcasts from its representative.
  void broadcast_tree() {
    const size_t n = d_.count;
    const int hcount = hosts();
    const int root_host = g_.hosts.host_of(d_.root);
    auto host_at = [&](int position) { return (root_host + position) % hcount; };
    const TreeLinks links((host_ - root_host + hcount) % hcount, hcount, /*tree=*/true);
    const bool receives = is_leader() && host_ != root_host;
    const bool fingerprints_beside_data = !root_leads();
    const transport::Fingerprint call = call_fingerprint();
    if (!fingerprints_beside_data && is_leader()) g_.uncompared.add(call);
    const size_t chunks = chunks_of(n).number;
    // Outlive `flight`, which cancels what is pending into them.
    Fingerprints fingerprints;
    transport::Fingerprint roots{};
    InFlight flight(g_.network, ctx_);
    if (fingerprints_beside_data && is_leader()) post_fingerprints(flight, fingerprints);
    std::byte* landed = nullptr;
    if (receives) {
      landed = scratch(kHostData, n);
      const int parent = links.parent == 0 ? d_.root : leader(host_at(links.parent));
      const size_t roots_call = fingerprints_beside_data
                                    ? 0
                                    : flight.recv(parent, tag(kFingerprint), &roots, sizeof roots);
      const size_t arrival = post_recv(flight, parent, kFirst, landed, n);
      if (!fingerprints_beside_data) {
        flight.wait(roots_call);
        if (roots != call) fail_across_hosts(g_.network, call_mismatch(call, root_host, roots));
      }
      flight.wait_run(arrival, chunks);
    }
    if (me_ == d_.root || receives) {
      const void* data = me_ == d_.root ? d_.send : landed;
      for (int child : links.children) {
        const int to = leader(host_at(child));
        if (!fingerprints_beside_data) flight.send(to, tag(kFingerprint), &call, sizeof call);
        flight.wait_run(post_send(flight, to, kFirst, data, n), chunks);
      }
    }
    if (fingerprints_beside_data && is_leader()) check_fingerprints(flight, fingerprints);
    flight.wait_all();
    if (receives) copy_bytes(d_.recv, landed, bytes(n));
    broadcast_inside_hosts();
  }

  // A small broadcast from a host leader, whose root does not wait (kCheckpointEvery):
  // the root sends its call's fingerprint and the data to every other leader, or down a binomial
  // tree of the leaders where the cost model says so (rooted_in_tree: each leader passes the
  // root's message on to its children once it has it), and returns once its sends are done; each
  // leader compares the root's call with its own and takes the data. So a mismatch fails the other
  // leaders here (a leader that fails passes nothing on: its children learn of it from its failure
  // notice) and reaches the root through their failure notice, at its next wait; leaders that
  // disagree on the root receive nothing unexpected, and the digest of these calls
  // (UncomparedCalls) makes their next fingerprint exchange fail. Leaders only.
  void broadcast_unacknowledged(int root_host) {
    const transport::Fingerprint call = call_fingerprint();
    g_.uncompared.add(call);
    const size_t message = sizeof call + bytes(d_.count);
    const int hcount = hosts();
    // The hosts this leader hears from and passes the message on to, by position from the root's.
    const int position = (host_ - root_host + hcount) % hcount;
    auto host_at = [&](int p) { return (root_host + p) % hcount; };
    const TreeLinks links(position, hcount, rooted_in_tree(hcount, tuning_.network_cost));
    std::byte* packed = g_.scratch.get(kHostData, message);  // one message for every child
    const int parent = leader(host_at(links.parent));
    uint64_t acknowledgement = 0;
    InFlight flight(g_.network, ctx_);  // ends before `acknowledgement`
    if (me_ == d_.root) {
      std::memcpy(packed, &call, sizeof call);
      copy_bytes(packed + sizeof call, d_.send, bytes(d_.count));
    } else {
      flight.wait(flight.recv(parent, tag(kFingerprint), packed, message));
      check_leading_call(packed, root_host, call);
    }
    for (int child : links.children)
      send_on_credit(flight, leader(host_at(child)), packed, message);
    if (me_ != d_.root) {
      copy_bytes(d_.recv, packed + sizeof call, bytes(d_.count));
      acknowledge(flight, parent, message, acknowledgement);
    }
    flight.wait_all();
  }

  // What a small reduce or gather sends to its root, whose senders do not wait for the root (as a
  // small broadcast's root does not wait for them): every leader but the root's sends its call's
  // fingerprint and host_bytes(host) bytes of `mine` towards the root's leader and returns once
  // its send is done; the root's leader compares each call with its own and returns where each
  // host's bytes landed (in scratch; an empty list elsewhere). Straight to the root, or up the
  // small broadcast's binomial tree where it takes one (RootedLeaders): a leader then waits
  // for its children's messages, compares their calls with its own and sends its parent its own
  // bytes and its subtree's, by position from the root's host (subtree_end), led by the call.
  // Nothing is combined on the way: a reduce's partial results reach the root as they left their
  // hosts, so the bits do not depend on the path. A mismatch fails the leader that finds it here
  // (it sends nothing on) and the others through its failure notice, at their next wait; the
  // digest of these calls (UncomparedCalls) goes with the next fingerprint exchange or checkpoint
  // stamp. Leaders only.
  template <class HostBytes>
  std::pmr::vector<const void*> to_root_packed(const void* mine, HostBytes&& host_bytes) {
    const transport::Fingerprint call = call_fingerprint();
    g_.uncompared.add(call);
    const RootedLeaders leaders(*this, g_.hosts.host_of(d_.root), host_bytes);
    const TreeLinks links(leaders.position, leaders.hosts, leaders.tree);
    const size_t children = links.children.size();
    auto acknowledgements = per_call<uint64_t>(children);  // outlive `flight`
    InFlight flight(g_.network, ctx_);
    auto landed = per_call<std::byte*>(children);
    auto arrivals = per_call<size_t>(children);
    for (size_t i = 0; i < children; ++i) {
      const int child = links.children[i];
      const size_t message = sizeof call + leaders.carried_bytes(child);
      landed[i] = g_.scratch.get(from_slot(leaders.host_at(child)), message);
      arrivals[i] =
          flight.recv(leader(leaders.host_at(child)), tag(kFingerprint), landed[i], message);
    }
    auto take = [&](size_t i) {
      flight.wait(arrivals[i]);
      check_leading_call(landed[i], leaders.host_at(links.children[i]), call);
      return landed[i] + sizeof call;
    };
    // Once this leader's own message is on its way: the children's messages are taken.
    auto acknowledge_children = [&] {
      for (size_t i = 0; i < children; ++i) {
        const int child = links.children[i];
        acknowledge(flight, leader(leaders.host_at(child)),
                    sizeof call + leaders.carried_bytes(child), acknowledgements[i]);
      }
      flight.wait_all();
    };
    if (leaders.position == 0) {  // the root's leader
      auto carried = per_call<const void*>(leaders.hosts);
      for (size_t i = 0; i < children; ++i) {
        const int child = links.children[i];
        const std::byte* next = take(i);
        for (int q = child; q < leaders.carried_end(child); ++q) {
          carried[leaders.host_at(q)] = next;
          next += host_bytes(leaders.host_at(q));
        }
      }
      acknowledge_children();
      return carried;
    }
    const int parent_host = leaders.host_at(links.parent);
    const size_t message = sizeof call + leaders.carried_bytes(leaders.position);
    std::byte* packed = g_.scratch.get(to_slot(parent_host), message);
    std::memcpy(packed, &call, sizeof call);
    copy_bytes(packed + sizeof call, mine, host_bytes(host_));
    for (size_t i = 0; i < children; ++i) {  // each child's subtree where its positions fall
      const int child = links.children[i];
      copy_bytes(packed + sizeof call + leaders.bytes_between(leaders.position, child), take(i),
                 leaders.carried_bytes(child));
    }
    send_on_credit(flight, leader(parent_host), packed, message);
    acknowledge_children();
    return per_call<const void*>();  // nothing lands here
  }
  // The leaders of a small scatter, gather or reduce whose root's leader does not wait, by
  // position from the root's host (position 0), and what each one's message carries: its host's
  // host_bytes(h) alone (straight to or from the root), or its subtree's in position order (through
  // the binomial tree). The tree where the cost model takes it (rooted_in_tree) and each of the
  // root's messages, its child's subtree, packs.
  template <class HostBytes>
  struct RootedLeaders {
    RootedLeaders(const HostCollective& c, int root_host, const HostBytes& host_bytes)
        : hosts(c.hosts()),
          root_host(root_host),
          position((c.host_ - root_host + hosts) % hosts),
          host_bytes(host_bytes) {
      if (!rooted_in_tree(hosts, c.tuning_.network_cost)) return;
      const TreeLinks from_root(0, hosts, /*tree=*/true);
      for (int child : from_root.children)
        if (!c.packs(bytes_between(child, subtree_end(child, hosts)))) return;
      tree = true;
    }
    int host_at(int p) const { return (root_host + p) % hosts; }
    // A message from position p carries the bytes of positions [p, carried_end(p)).
    int carried_end(int p) const { return tree ? subtree_end(p, hosts) : p + 1; }
    size_t carried_bytes(int p) const { return bytes_between(p, carried_end(p)); }
    size_t bytes_between(int from, int to) const {
      size_t total = 0;
      for (int q = from; q < to; ++q) total += host_bytes(host_at(q));
      return total;
    }

    const int hosts;
    const int root_host;
    const int position;  // this leader's
    const HostBytes& host_bytes;
    bool tree = false;
  };

  // Whether a (not small) reduce, all_gather, reduce_scatter, all_to_all, gather or scatter
  // crosses per rail: every host has the same number L >= 2 of ranks, usable as rails (links of
  // their own, or TPF_NET_ALGO=per_rail), consecutive or not, and TPF_NET_ALGO does not force the
  // leaders' algorithm (`pipelined`). Where it could, the choice is remembered for the
  // fingerprint (a second guard behind the shared settings).
  bool goes_per_rail() {
    if (usable_rails() < 2) return false;
    network_ = tuning_.forced_network == NetworkAlgorithm::pipelined ? NetworkAlgorithm::pipelined
                                                                     : NetworkAlgorithm::per_rail;
    return network_ == NetworkAlgorithm::per_rail;
  }
  // all_gather's, reduce_scatter's, gather's and scatter's choice: per rail where a host's blocks
  // are more than one round carries (packs) and the rails may carry them.
  bool blocks_go_per_rail(size_t block) {
    return !packs(bytes(block * largest_host())) && goes_per_rail();
  }
  // Host h's blocks in a buffer of one block per rank (h's ranks consecutive): where they start.
  size_t host_start(int h, size_t block) const { return ranks_on(h)[0] * block; }

  // all_gather's exchange between one rank per host (the leaders, or one rail's ranks). Round a
  // ring of the hosts (host h's rank sends to host h+1's), each chunk passed on as it arrives, so
  // each link carries one flow at a time: measured 4 x 1 and 4 x 2 at 500 Mb/s, 4 MiB at 0.99 of
  // the link against 0.80-0.89 with every rank sending to all the others at once
  // (docs/fabric.md). Chunk c of host h's data then has tag chunk offset(h) + c, the chunks of
  // the hosts before h first (ring_chunk_elems). Directly (each rank to every other, from the
  // next host on; chunk c has tag chunk c in stage kSecond) where the cost model prefers it
  // (all_gather_in_ring: many hosts, little data) or beyond kNetworkMaxChunks / 2 hosts, where
  // the ring's chunks may not fit the tag. Either way the other hosts' data arrive in the order
  // host_ - 1, host_ - 2, ... (directly, host h - 1 sends to h first) in the same chunks, so the
  // ranks of a host that do not cross the network follow without knowing which; the one that
  // does also start()s it.
  class GatherRing {
   public:
    // Host h's data: counts[h] elements; round a ring if `in_ring` and the chunks fit the tag.
    GatherRing(const HostCollective& c, const std::vector<size_t>& counts, bool in_ring)
        : c_(c), n_(c.hosts()), chunks_(n_), offset_(n_), landed_(n_), first_(n_) {
      const std::vector<size_t> per = ring_chunk_elems(counts, c.elem_);
      size_t all_chunks = 0;
      for (int h = 0; h < n_; ++h) {
        chunks_[h] = {counts[h], per[h], chunks_of_size(counts[h], per[h])};
        offset_[h] = all_chunks;
        all_chunks += chunks_[h].number;
      }
      ring_ = in_ring && all_chunks <= kNetworkMaxChunks;
    }
    bool ring() const { return ring_; }
    // The k-th host whose data arrives (k = 0: this host).
    int arrival(int k) const { return (c_.host_ + n_ - k) % n_; }
    const Chunks& chunks(int h) const { return chunks_[h]; }
    // Posts every receive (host h's data from rank peer(h), landing at into(h)) and this host's
    // sends (its data at `mine`).
    void start(InFlight& flight, const std::function<int(int)>& peer,
               const std::function<void*(int)>& into, const void* mine) {
      flight_ = &flight;
      const int me = c_.host_;
      next_host_ = (me + 1) % n_;
      next_ = peer(next_host_);
      for (int k = 1; k < n_; ++k) {
        const int h = arrival(k);
        landed_[h] = into(h);
        const int from = ring_ ? peer((me + n_ - 1) % n_) : peer(h);
        for (size_t i = 0; i < chunks_[h].number; ++i) {
          const size_t request = flight.recv(from, chunk_tag(h, i), span(landed_[h], h, i),
                                             c_.bytes(chunks_[h].length(i)));
          if (i == 0) first_[h] = request;
        }
      }
      for (int k = 1; k < (ring_ ? 2 : n_); ++k) {
        const int to = peer((me + k) % n_);
        for (size_t i = 0; i < chunks_[me].number; ++i)
          flight.send(to, chunk_tag(me, i), span(mine, me, i), c_.bytes(chunks_[me].length(i)));
      }
    }
    // Waits for chunk i of host h's data and, round the ring, passes it on unless the next host
    // is where it came from.
    void arrived(int h, size_t i) {
      flight_->wait(first_[h] + i);
      if (ring_ && h != next_host_) {
        flight_->send(next_, chunk_tag(h, i), span(landed_[h], h, i),
                      c_.bytes(chunks_[h].length(i)));
      }
    }
    void arrived(int h) {
      for (size_t i = 0; i < chunks_[h].number; ++i) arrived(h, i);
    }
    void* landed(int h) const { return landed_[h]; }

   private:
    // The two forms tag in different stages: a rail whose ranks chose differently (only the
    // leaders compare fingerprints; the settings of a host's ranks could differ) then matches no
    // message and fails at the deadline, where a ring's tag could pass for a direct one.
    uint64_t chunk_tag(int h, size_t i) const {
      return ring_ ? c_.tag(kFirst, offset_[h] + i) : c_.tag(kSecond, i);
    }
    const std::byte* span(const void* base, int h, size_t i) const {
      return c_.at(base, chunks_[h].begin(i));
    }
    std::byte* span(void* base, int h, size_t i) const { return c_.at(base, chunks_[h].begin(i)); }

    const HostCollective& c_;
    int n_;
    std::vector<Chunks> chunks_;
    std::vector<size_t> offset_;  // host h's first chunk among the tag's chunk numbers
    std::vector<void*> landed_;
    std::vector<size_t> first_;  // the request of each host's first chunk
    bool ring_ = false;
    InFlight* flight_ = nullptr;
    int next_ = 0, next_host_ = 0;
  };
  // all_gather's exchange of host h's counts[h] elements, where a host sends at most `host_bytes`:
  // the cost model's choice (network_cost.h: all_gather_in_ring), made by every rank from the
  // same size, layout and shared settings, goes into the fingerprint, which the leaders then
  // compare before any data moves (a second guard).
  GatherRing agreed_gather_exchange(const std::vector<size_t>& counts, size_t host_bytes) {
    GatherRing ring(*this, counts, all_gather_in_ring(host_bytes, hosts(), tuning_.network_cost));
    gather_ring_ = ring.ring();
    compare_fingerprints_across_hosts();
    return ring;
  }

  // all_gather per rail: the ranks of each rail (one per host) exchange their blocks
  // (GatherRing), each received into place; as host h's blocks arrive (this host's first, then
  // the others) the host's ranks all-gather them in shared memory, in place. Where h's ranks are
  // not consecutive (its blocks lie apart) each of them broadcasts its block inside the host
  // instead, straight into place: measured on 2 x 2 interleaved with a link per rail, 64 MiB,
  // 1.89-1.95 of one link's cap against 1.46-1.71 all-gathering into scratch and placing from
  // there (docs/results/per-rail-interleaved.txt). Each host's link carries what the leaders'
  // form carries, in L flows (one per rail).
  void all_gather_per_rail() {
    const size_t block = d_.count;
    GatherRing ring = agreed_gather_exchange(std::vector<size_t>(hosts(), block), bytes(block));
    InFlight flight(g_.network, ctx_);
    const ProgressInsideHost progress_inside(*this, flight);
    auto mine_on = [&](int h) -> void* { return at(d_.recv, rail_peer(h) * block); };
    ring.start(
        flight, [this](int h) { return rail_peer(h); }, mine_on, d_.send);
    for (int k = 0; k < hosts(); ++k) {
      const int h = ring.arrival(k);
      if (k > 0) ring.arrived(h);
      const void* ours = k == 0 ? d_.send : mine_on(h);
      const std::vector<int>& theirs = ranks_on(h);
      if (consecutive(theirs)) {
        local(local_desc(OpKind::all_gather, block, 0, ours, at(d_.recv, host_start(h, block))));
        continue;
      }
      for (size_t i = 0; i < theirs.size(); ++i) {  // h's rank i's block, from local rank i
        void* place = at(d_.recv, theirs[i] * block);
        const bool mine = static_cast<int>(i) == local_rank_;
        local(
            local_desc(OpKind::broadcast, block, static_cast<int>(i), mine ? ours : place, place));
      }
    }
    flight.wait_all();
  }

  // Gather inside each host to the leader, the leaders exchange their hosts' blocks (GatherRing),
  // broadcast inside: where every host's ranks are consecutive, or a block fills a network chunk,
  // each host's blocks are broadcast inside the host as their chunks arrive (block by block where
  // a host's ranks lie apart); else once all are in. Small: the hosts' blocks ride in the
  // fingerprint messages.
  void all_gather() {
    const size_t block = d_.count;
    const bool small = packs(bytes(block * largest_host()));
    if (blocks_go_per_rail(block)) return all_gather_per_rail();
    std::optional<GatherRing> exchange;
    if (!small) {
      std::vector<size_t> counts;
      for (int h = 0; h < hosts(); ++h) counts.push_back(ranks_on(h).size() * block);
      exchange.emplace(agreed_gather_exchange(counts, bytes(block * largest_host())));
    }
    const std::vector<int>& mine = ranks_on(host_);
    const void* host_blocks = d_.send;  // this host's blocks in local order, at its leader
    if (!alone()) {
      void* into = is_leader() ? scratch(kHostData, mine.size() * block) : nullptr;
      local(local_desc(OpKind::gather, block, 0, d_.send, into));
      host_blocks = into;
    }
    if (small) {
      if (is_leader()) {
        Fingerprints fingerprints;
        gather_packed(fingerprints, bytes(mine.size() * block), copy_to(host_blocks),
                      [&](int h) { return bytes(ranks_on(h).size() * block); });
        place_blocks(d_.recv, host_blocks, mine, block);
        for (int h = 0; h < hosts(); ++h)
          if (h != host_) place_blocks(d_.recv, fingerprints.carried[h], ranks_on(h), block);
      }
      if (!alone()) {
        local(local_desc(OpKind::broadcast, block * g_.hosts.ranks(), 0, d_.recv, d_.recv));
      }
      return;
    }
    const int n = hosts();
    GatherRing& ring = *exchange;
    InFlight flight(g_.network, ctx_);
    if (is_leader()) {
      ring.start(
          flight, [this](int h) { return leader(h); },
          [&](int h) { return landing_for(d_.recv, ranks_on(h), block, from_slot(h)); },
          host_blocks);
      place_blocks(d_.recv, host_blocks, mine, block);
    }
    if (!alone() && pipelines_inside_hosts(block, kNetworkMinChunkBytes)) {
      // Elements [begin, begin + count) of host h's blocks (in its local order) to their places
      // in every rank's output: from where they landed at the leader (in place for this host's
      // and a consecutive host's; in scratch for a host whose ranks lie apart), block by block
      // where they lie apart.
      auto broadcast_inside = [&](int h, size_t begin, size_t count) {
        const void* landed = h == host_ || consecutive(ranks_on(h)) ? nullptr : ring.landed(h);
        for_each_place(h, begin, count, [&](size_t place, size_t element, size_t length) {
          void* to = at(d_.recv, place);
          const void* from = is_leader() && landed != nullptr ? at(landed, element) : to;
          local(local_desc(OpKind::broadcast, length, 0, from, to));
        });
      };
      for (int k = 0; k < n; ++k) {
        const int h = ring.arrival(k);
        const Chunks& chunks = ring.chunks(h);
        for_each_piece(chunks, [&](size_t c, size_t last) {
          for (size_t i = c; is_leader() && k > 0 && i < last; ++i) ring.arrived(h, i);
          broadcast_inside(h, chunks.begin(c), chunks.span_length(c, last));
        });
      }
      flight.wait_all();
      return;
    }
    if (is_leader()) {
      for (int k = 1; k < n; ++k) ring.arrived(ring.arrival(k));
      flight.wait_all();
      for (int h = 0; h < n; ++h)
        if (h != host_) place_blocks(d_.recv, ring.landed(h), ranks_on(h), block);
    }
    if (!alone()) {
      local(local_desc(OpKind::broadcast, block * g_.hosts.ranks(), 0, d_.recv, d_.recv));
    }
  }

  // reduce_scatter per rail: for every other host h (from the next one on), the host's ranks
  // reduce-scatter h's blocks in shared memory (reduce_scatter_inside), so that each rank holds
  // its host's partial of the block of its rail's rank on h, and send it there at once; then this
  // host's own blocks, and each rank combines its block from every host in host order, chunk by
  // chunk as they arrive.
  void reduce_scatter_per_rail() {
    compare_fingerprints_across_hosts();
    const size_t block = d_.count;
    InFlight flight(g_.network, ctx_);
    const ProgressInsideHost progress_inside(*this, flight);
    const Arrivals arrivals = expect_parts(flight, block, [this](int h) { return rail_peer(h); });
    for (int h : others_from_next()) {
      std::byte* partial = scratch(to_slot(h), block);  // read by its send until that completes
      reduce_scatter_inside(h, partial);
      post_send(flight, rail_peer(h), kFirst, partial, block);
      flight.progress();
    }
    std::byte* own = scratch(kOwnPart, block);
    reduce_scatter_inside(host_, own);
    for (size_t c = 0; c < arrivals.chunks.number; ++c)
      combine_arrived(flight, arrivals, c, own, d_.recv);
    flight.wait_all();
  }

  // reduce_scatter per rail's step inside the host for host h's blocks: this rank gets its host's
  // partial of the block of its rail's rank on h. Where h's ranks are not consecutive (their
  // blocks lie apart), one reduce per rank of the host, each to the rank whose rail takes it:
  // measured on 2 x 2 interleaved with a link per rail, 64 MiB, 1.77-1.87 of one link's cap
  // against 1.56-1.72 packing h's blocks into scratch for one reduce-scatter (2 x 4: 3.46-3.69
  // against 2.78-3.19; docs/results/per-rail-interleaved.txt).
  void reduce_scatter_inside(int h, void* partial) {
    const size_t block = d_.count;
    const std::vector<int>& theirs = ranks_on(h);
    if (consecutive(theirs)) {
      local(local_desc(OpKind::reduce_scatter, block, 0, at(d_.send, host_start(h, block)), partial,
                       partial_op()));
      return;
    }
    for (size_t i = 0; i < theirs.size(); ++i) {
      const bool mine = static_cast<int>(i) == local_rank_;
      local(local_desc(OpKind::reduce, block, static_cast<int>(i), at(d_.send, theirs[i] * block),
                       mine ? partial : nullptr, partial_op()));
    }
  }

  // Reduce inside each host, send every other host's leader the blocks of its ranks, combine
  // this host's blocks from every host in host order as they arrive, scatter inside the host.
  // Where every host's ranks are consecutive (each host's blocks lie together), or a block fills
  // a network chunk, the reduction inside the host goes piece by piece with the network
  // (reduce_scatter_pipelined); else the whole buffer is reduced first.
  // Small: the blocks ride in the fingerprint messages (exchange_blocks: directly, or passed on in
  // rounds on many hosts).
  void reduce_scatter() {
    const size_t block = d_.count;
    const bool small = packs(bytes(block * largest_host()));
    if (blocks_go_per_rail(block)) return reduce_scatter_per_rail();
    if (!small) {
      compare_fingerprints_across_hosts();
      if (!alone() && pipelines_inside_hosts(block, kNetworkMinChunkBytes))
        return reduce_scatter_pipelined();
    }
    const size_t total = block * static_cast<size_t>(g_.hosts.ranks());
    const std::vector<int>& mine = ranks_on(host_);
    const void* host_sum = d_.send;  // the host's partial sums of every block, at its leader
    if (!alone()) {
      void* into = is_leader() ? scratch(kHostData, total) : nullptr;
      local(local_desc(OpKind::reduce, total, 0, d_.send, into, partial_op()));
      host_sum = into;
    }
    void* result = alone()       ? d_.recv
                   : is_leader() ? scratch(kCombined, mine.size() * block)
                                 : nullptr;
    if (is_leader() && small) {
      Fingerprints fingerprints;
      exchange_blocks(
          fingerprints, bytes(largest_host() * block),
          [&](int, int to) { return bytes(ranks_on(to).size() * block); },
          blocks_for_host(host_sum, block));
      fingerprints.carried[host_] = blocks_of(host_sum, mine, block, kOwnPart);
      combine_hosts(result, fingerprints.carried, mine.size() * block);
    } else if (is_leader()) {
      InFlight flight(g_.network, ctx_);
      const Arrivals arrivals = expect_parts(flight, mine.size() * block);
      for (int h : others_from_next()) {
        post_send(flight, leader(h), kFirst, blocks_of(host_sum, ranks_on(h), block, to_slot(h)),
                  ranks_on(h).size() * block);
      }
      const void* own = blocks_of(host_sum, mine, block, kOwnPart);
      for (size_t c = 0; c < arrivals.chunks.number; ++c)
        combine_arrived(flight, arrivals, c, own, result);
      flight.wait_all();
    }
    if (!alone()) local(local_desc(OpKind::scatter, block, 0, result, d_.recv));
  }

  // The pipelined form: the other hosts' blocks first, each piece reduced inside the host and its
  // chunks sent at once, this host's last, each chunk combined as soon as it is here. The leader's
  // host sums lie host after host (each host's blocks in its local order, the message it is sent),
  // so where a host's ranks are not consecutive its blocks are reduced one by one to their places
  // in that message: one reduce per block a piece touches, blocks of at least a network chunk.
  void reduce_scatter_pipelined() {
    const size_t block = d_.count;
    const std::vector<int>& mine = ranks_on(host_);
    const size_t my_count = mine.size() * block;
    // Where each host's message starts in host_sum.
    auto sums_at = per_call<size_t>(static_cast<size_t>(hosts()));
    for (int h = 1; h < hosts(); ++h) sums_at[h] = sums_at[h - 1] + ranks_on(h - 1).size() * block;
    std::byte* host_sum =
        is_leader() ? scratch(kHostData, block * static_cast<size_t>(g_.hosts.ranks())) : nullptr;
    std::byte* result = is_leader() ? scratch(kCombined, my_count) : nullptr;
    InFlight flight(g_.network, ctx_);
    Arrivals arrivals;
    if (is_leader()) arrivals = expect_parts(flight, my_count);
    // Elements [begin, begin + count) of host h's message, reduced into host_sum at the leader.
    auto reduce_inside = [&](int h, size_t begin, size_t count) {
      for_each_place(h, begin, count, [&](size_t place, size_t element, size_t length) {
        local(local_desc(OpKind::reduce, length, 0, at(d_.send, place),
                         is_leader() ? at(host_sum, sums_at[h] + element) : nullptr, partial_op()));
      });
    };
    for (int k = 1; k < hosts(); ++k) {
      const int h = (host_ + k) % hosts();
      const Chunks chunks = chunks_of(ranks_on(h).size() * block);
      for_each_piece(chunks, [&](size_t c, size_t last) {
        reduce_inside(h, chunks.begin(c), chunks.span_length(c, last));
        for (size_t i = c; is_leader() && i < last; ++i) {
          flight.send(leader(h), tag(kFirst, i), at(host_sum, sums_at[h] + chunks.begin(i)),
                      bytes(chunks.length(i)));
        }
        if (is_leader()) flight.progress();
      });
    }
    const Chunks chunks = chunks_of(my_count);
    for_each_piece(chunks, [&](size_t c, size_t last) {
      reduce_inside(host_, chunks.begin(c), chunks.span_length(c, last));
      for (size_t i = c; is_leader() && i < last; ++i)
        combine_arrived(flight, arrivals, i, at(host_sum, sums_at[host_]), result);
    });
    flight.wait_all();
    local(local_desc(OpKind::scatter, block, 0, result, d_.recv));
  }

  // gather and scatter per rail on a host other than the root's: this rank's one transfer, its
  // block out of its input (`sends`) or into its output, with its rail's rank on the root's host.
  // It takes no other step inside its host, so it meets its host's ranks once, after posting the
  // transfer: its leader enters only after comparing the fingerprints, so a host that called
  // something else fails this rank here (a mismatch) instead of leaving its transfer to the
  // deadline.
  void block_with_roots_host_per_rail(InFlight& flight, bool sends) {
    const int peer = rail_peer(g_.hosts.host_of(d_.root));
    if (sends) {
      post_send(flight, peer, kFirst, d_.send, d_.count);
    } else {
      post_recv(flight, peer, kFirst, d_.recv, d_.count);
    }
    local(local_desc(OpKind::barrier, 0, 0, nullptr, nullptr));
    flight.wait_all();
  }

  // gather per rail (L >= 2 ranks on every host, rails usable): every rank of another host sends
  // its block straight from its input to its rail's rank on the root's host; there, the blocks
  // are gathered to the root in shared memory host by host (this host's first, then from the
  // next host on, each as its L blocks are in), straight into place where the host's ranks are
  // consecutive (else into scratch, and from there to their places). The root's host receives
  // through its L rails' links; in the representatives' form all of it reaches the root.
  void gather_per_rail() {
    compare_fingerprints_across_hosts();
    const size_t block = d_.count;
    const int root_host = g_.hosts.host_of(d_.root);
    InFlight flight(g_.network, ctx_);
    const ProgressInsideHost progress_inside(*this, flight);
    if (host_ != root_host) return block_with_roots_host_per_rail(flight, /*sends=*/true);
    const bool root = me_ == d_.root;
    const int local_root = g_.hosts.local_rank(d_.root);
    // Host h's block of this rail: at its place in the root's output, else in scratch.
    auto landing = [&](int h) {
      return root ? at(d_.recv, static_cast<size_t>(rail_peer(h)) * block)
                  : scratch(from_slot(h), block);
    };
    auto gather_host = [&](int h, const void* mine) {
      void* host_blocks = root ? landing_for(d_.recv, ranks_on(h), block, kHostData) : nullptr;
      local(local_desc(OpKind::gather, block, local_root, mine, host_blocks));
      if (root && !consecutive(ranks_on(h))) place_blocks(d_.recv, host_blocks, ranks_on(h), block);
    };
    const std::vector<int> others = others_from_next();
    std::vector<size_t> arrival(hosts());
    for (int h : others) arrival[h] = post_recv(flight, rail_peer(h), kFirst, landing(h), block);
    gather_host(host_, d_.send);
    const size_t chunks = chunks_of(block).number;
    for (int h : others) {
      flight.wait_run(arrival[h], chunks);
      gather_host(h, landing(h));
    }
    flight.wait_all();
  }

  // scatter per rail (as gather per rail): on the root's host, host by host from the next one
  // on, the root scatters that host's blocks in shared memory (packed into scratch first where
  // the host's ranks are not consecutive) and each rank sends its block to its rail's rank there,
  // which receives it straight into its output; the root's own host's blocks last.
  void scatter_per_rail() {
    compare_fingerprints_across_hosts();
    const size_t block = d_.count;
    const int root_host = g_.hosts.host_of(d_.root);
    InFlight flight(g_.network, ctx_);
    const ProgressInsideHost progress_inside(*this, flight);
    if (host_ != root_host) return block_with_roots_host_per_rail(flight, /*sends=*/false);
    const bool root = me_ == d_.root;
    const int local_root = g_.hosts.local_rank(d_.root);
    auto scatter_host = [&](int h, void* mine) {
      local(local_desc(OpKind::scatter, block, local_root,
                       root ? blocks_of(d_.send, ranks_on(h), block, kHostData) : nullptr, mine));
    };
    for (int h : others_from_next()) {
      std::byte* mine = scratch(to_slot(h), block);  // read by its send until that completes
      scatter_host(h, mine);
      post_send(flight, rail_peer(h), kFirst, mine, block);
      flight.progress();
    }
    scatter_host(host_, d_.recv);
    flight.wait_all();
  }

  // Small gather's network round: this leader's host's blocks, `host_blocks`, reach the root's
  // leader (to_root_packed), and the root places every host's blocks. Leaders only.
  void gather_one_round(const void* host_blocks) {
    const size_t block = d_.count;
    const int root_host = g_.hosts.host_of(d_.root);
    const std::vector<int>& mine = ranks_on(host_);
    auto host_bytes = [&](int h) { return bytes(ranks_on(h).size() * block); };
    const std::pmr::vector<const void*> carried = to_root_packed(host_blocks, host_bytes);
    if (me_ != d_.root) return;
    place_blocks(d_.recv, host_blocks, mine, block);
    for (int h = 0; h < hosts(); ++h)
      if (h != root_host) place_blocks(d_.recv, carried[h], ranks_on(h), block);
  }

  // Gather inside each host to its representative, which sends its host's blocks to the root.
  // Small, the host's blocks ride in the fingerprint message to the root (gather_one_round; on
  // many hosts up a binomial tree of the leaders, to_root_packed): where the root leads its host
  // (with one rank per host, always). Otherwise the leaders compare fingerprints first. A small
  // call is compared at the root's leader, and with the next fingerprint exchange or checkpoint
  // stamp (UncomparedCalls), as a small reduce's or broadcast's: the other ranks learn of a
  // mismatch at their next wait. Per rail above the one-round size where the rails may carry it.
  void gather() {
    const size_t block = d_.count;
    if (blocks_go_per_rail(block)) return gather_per_rail();
    const bool small = packs(bytes(block * largest_host())) && root_leads();
    const int root_host = g_.hosts.host_of(d_.root);
    const bool ahead = leaders_send_ahead();
    const bool sends_ahead = !small && ahead && is_leader() && host_ != root_host;
    if (!small && !sends_ahead) compare_fingerprints_across_hosts();
    const int rep = representative_local_rank(host_);
    const std::vector<int>& mine = ranks_on(host_);
    const void* host_blocks = d_.send;  // this host's blocks in local order, at its representative
    if (!alone()) {
      void* into = local_rank_ == rep ? scratch(kHostData, mine.size() * block) : nullptr;
      local(local_desc(OpKind::gather, block, rep, d_.send, into));
      host_blocks = into;
    }
    if (small) {
      if (is_leader()) gather_one_round(host_blocks);
      return;
    }
    const Stage stage = ahead ? kAhead : kFirst;
    Fingerprints fingerprints;  // outlives `flight`, which cancels what is pending into it
    InFlight flight(g_.network, ctx_);
    if (me_ == d_.root) {
      std::vector<void*> landed(hosts());
      for (int h = 0; h < hosts(); ++h) {
        if (h == root_host) continue;
        landed[h] = landing_for(d_.recv, ranks_on(h), block, from_slot(h));
        post_recv(flight, leader(h), stage, landed[h], ranks_on(h).size() * block);
      }
      place_blocks(d_.recv, host_blocks, mine, block);
      flight.wait_all();
      for (int h = 0; h < hosts(); ++h)
        if (h != root_host) place_blocks(d_.recv, landed[h], ranks_on(h), block);
    } else if (local_rank_ == rep && host_ != root_host) {
      if (sends_ahead) post_fingerprints(flight, fingerprints);
      post_send(flight, d_.root, stage, host_blocks, mine.size() * block);
      if (sends_ahead) check_fingerprints(flight, fingerprints);
      flight.wait_all();
    }
  }

  // A small scatter's network part, whose root does not wait (kCheckpointEvery), as a small
  // broadcast's root does not: the root (a leader) sends its call's fingerprint with the blocks of
  // each other host, and returns null once its sends are done; each other leader compares the
  // root's call with its own and returns where its host's blocks landed (in scratch). Straight to
  // every leader, or down the small broadcast's binomial tree where it takes one
  // (RootedLeaders: the model's choice, and the root's largest message packs): a leader then
  // takes the blocks of its subtree (by position from the root's host, subtree_end), its own
  // first, and passes each child its subtree's, led by the call. A mismatch fails a leader here
  // (it passes nothing on: its children fail from its failure notice) and the root at its next
  // wait; the calls' digest goes with the next fingerprint exchange. Leaders only.
  const void* scatter_unacknowledged(int root_host) {
    const transport::Fingerprint call = call_fingerprint();
    g_.uncompared.add(call);
    const size_t block = d_.count;
    auto host_bytes = [&](int h) { return bytes(ranks_on(h).size() * block); };
    const RootedLeaders leaders(*this, root_host, host_bytes);
    const TreeLinks links(leaders.position, leaders.hosts, leaders.tree);
    const int parent = leader(leaders.host_at(links.parent));
    const size_t incoming = sizeof call + leaders.carried_bytes(leaders.position);
    uint64_t acknowledgement = 0;
    InFlight flight(g_.network, ctx_);  // ends before `acknowledgement`
    std::byte* landed = nullptr;  // this leader's message: the call, then its blocks and below
    if (me_ != d_.root) {
      landed = g_.scratch.get(from_slot(root_host), incoming);
      flight.wait(flight.recv(parent, tag(kFingerprint), landed, incoming));
      check_leading_call(landed, root_host, call);
    }
    const auto fill = blocks_for_host(d_.send, block);
    for (int child : links.children) {
      const int h = leaders.host_at(child);
      const size_t payload = leaders.carried_bytes(child);
      std::byte* message = g_.scratch.get(to_slot(h), sizeof call + payload);
      std::memcpy(message, &call, sizeof call);
      if (me_ == d_.root) {
        std::byte* next = message + sizeof call;
        for (int q = child; q < leaders.carried_end(child); ++q) {
          fill(leaders.host_at(q), next, host_bytes(leaders.host_at(q)));
          next += host_bytes(leaders.host_at(q));
        }
      } else {  // the child's subtree follows this leader's own blocks and its earlier children's
        std::memcpy(message + sizeof call,
                    landed + sizeof call + leaders.bytes_between(leaders.position, child), payload);
      }
      send_on_credit(flight, leader(h), message, sizeof call + payload);
    }
    if (me_ != d_.root) acknowledge(flight, parent, incoming, acknowledgement);
    flight.wait_all();
    return landed == nullptr ? nullptr : landed + sizeof call;
  }

  // The root sends every other host's leader the blocks of its ranks; each host scatters them
  // from its representative.
  // Small, from a root that leads its host: the blocks follow the root's call, and the root does
  // not wait for the other leaders (scatter_unacknowledged). Per rail above the one-round size
  // where the rails may carry it.
  void scatter() {
    const size_t block = d_.count;
    if (blocks_go_per_rail(block)) return scatter_per_rail();
    const bool small = root_leads() && packs(bytes(block * largest_host()));
    if (!small) compare_fingerprints_across_hosts();
    const int root_host = g_.hosts.host_of(d_.root);
    const std::vector<int>& mine = ranks_on(host_);
    const void* host_blocks = nullptr;  // this host's blocks in local order, at its representative
    InFlight flight(g_.network, ctx_);
    if (small) {
      if (is_leader()) {
        const void* landed = scatter_unacknowledged(root_host);
        host_blocks = me_ == d_.root ? blocks_of(d_.send, mine, block, kHostData) : landed;
      }
    } else if (me_ == d_.root) {
      for (int h = 0; h < hosts(); ++h) {
        if (h == root_host) continue;
        post_send(flight, leader(h), kFirst, blocks_of(d_.send, ranks_on(h), block, to_slot(h)),
                  ranks_on(h).size() * block);
      }
      host_blocks = blocks_of(d_.send, mine, block, kHostData);
    } else if (is_leader() && host_ != root_host) {
      void* into = alone() ? d_.recv : scratch(kHostData, mine.size() * block);
      post_recv(flight, d_.root, kFirst, into, mine.size() * block);
      host_blocks = into;
    }
    flight.wait_all();
    if (alone()) {  // a copy unless the data came straight into the caller's buffer
      copy_bytes(d_.recv, host_blocks, bytes(block));
      return;
    }
    local(
        local_desc(OpKind::scatter, block, representative_local_rank(host_), host_blocks, d_.recv));
  }

  // Through the leaders: gather every local rank's send buffer, exchange between leaders the
  // blocks that cross hosts, arrange every local rank's receive buffer, scatter. A host of one
  // rank sends from and receives into the caller's buffers where the blocks lie together.
  // Small: the blocks ride in the fingerprint messages (exchange_blocks: directly, or passed on in
  // rounds on many hosts).
  void all_to_all() {
    const size_t block = d_.count;
    const size_t largest = largest_host();
    const bool small = packs(bytes(block * largest * largest));
    if (!small) {
      // Before the fingerprints, which carry the choice.
      const bool per_rail = goes_per_rail();
      compare_fingerprints_across_hosts();
      if (per_rail) return all_to_all_per_rail();
      if (!alone() && pipelines_inside_hosts(block, kInterleavedAllToAllPipelineMinBlockBytes))
        return all_to_all_pipelined();
    }
    const std::vector<int>& mine = ranks_on(host_);
    const size_t local_n = mine.size();
    const size_t row = block * static_cast<size_t>(g_.hosts.ranks());  // one rank's whole buffer
    const void* sends = d_.send;  // sends[s][j]: from local rank s to communicator rank j
    if (!alone()) {
      void* into = is_leader() ? scratch(kHostData, local_n * row) : nullptr;
      local(local_desc(OpKind::gather, row, 0, d_.send, into));
      sends = into;
    }
    // receives[t][i]: from communicator rank i to local rank t.
    const bool direct = alone() && !overlap(d_.send, bytes(row), d_.recv, bytes(row));
    void* receives = direct ? d_.recv : is_leader() ? scratch(kCombined, local_n * row) : nullptr;
    if (is_leader()) {
      auto received_block = [&](size_t t, int i) { return at(receives, t * row + i * block); };
      auto sent_block = [&](size_t s, int j) { return at(sends, s * row + j * block); };
      // From host `from` to host `to`: for each rank s of `from`, its blocks for to's ranks, in
      // local order.
      auto pair_bytes = [&](int from, int to) {
        return bytes(ranks_on(from).size() * ranks_on(to).size() * block);
      };
      auto to_bytes = [&](int h) { return pair_bytes(host_, h); };
      auto pack_for = [&](int h, std::byte* packed, size_t) {
        const std::vector<int>& theirs = ranks_on(h);
        for (size_t s = 0; s < local_n; ++s)
          for (size_t j = 0; j < theirs.size(); ++j)
            copy_bytes(at(packed, (s * theirs.size() + j) * block), sent_block(s, theirs[j]),
                       bytes(block));
      };
      Fingerprints fingerprints;  // outlives `flight`
      InFlight flight(g_.network, ctx_);
      auto from = per_call<const void*>(hosts());
      if (small) {
        exchange_blocks(fingerprints, bytes(block * largest * largest), pair_bytes, pack_for);
        from.assign(fingerprints.carried.begin(), fingerprints.carried.end());
      } else {
        for (int h = 0; h < hosts(); ++h) {
          if (h == host_) continue;
          const std::vector<int>& theirs = ranks_on(h);
          void* into = direct && consecutive(theirs)
                           ? received_block(0, theirs[0])
                           : scratch(from_slot(h), theirs.size() * local_n * block);
          post_recv(flight, leader(h), kFirst, into, theirs.size() * local_n * block);
          from[h] = into;
        }
        for (int h : others_from_next()) {
          const void* out = nullptr;
          if (alone()) {
            out = blocks_of(sends, ranks_on(h), block, to_slot(h));
          } else {
            std::byte* packed = scratch(to_slot(h), local_n * ranks_on(h).size() * block);
            pack_for(h, packed, to_bytes(h));
            out = packed;
          }
          post_send(flight, leader(h), kFirst, out, local_n * ranks_on(h).size() * block);
        }
      }
      for (size_t t = 0; t < local_n; ++t)
        for (size_t s = 0; s < local_n; ++s)
          copy_bytes(received_block(t, mine[s]), sent_block(s, mine[t]), bytes(block));
      flight.wait_all();
      for (int h = 0; h < hosts(); ++h) {
        if (h == host_) continue;
        const std::vector<int>& theirs = ranks_on(h);
        for (size_t s = 0; s < theirs.size(); ++s)  // copies onto themselves are skipped
          for (size_t t = 0; t < local_n; ++t)
            copy_bytes(received_block(t, theirs[s]), at(from[h], (s * local_n + t) * block),
                       bytes(block));
      }
    }
    if (!alone()) {
      local(local_desc(OpKind::scatter, row, 0, receives, d_.recv));
    } else if (!direct) {
      copy_bytes(d_.recv, receives, bytes(row));
    }
  }

  // Where every host's ranks are consecutive, or a block is at least
  // kInterleavedAllToAllPipelineMinBlockBytes, host by host:
  // the blocks this host's ranks send to host h are gathered at the leader (already in the order
  // h's leader wants them; each rank packs its blocks for h into scratch first where h's ranks
  // are not consecutive) and sent while the next host's are gathered; the blocks between this
  // host's ranks go by an all-to-all inside the host. What arrives from h is one row per rank s
  // of h (its blocks for this host's local ranks), and the rows are scattered inside the host as
  // they arrive, in groups of at least kMinPieceBytes (scatter_groups; one row a group, to its
  // own place, where h's ranks are not consecutive), so that the copies overlap the network
  // rather than all following its last byte. Measured on 4 emulated hosts x 2 ranks, against
  // waiting for all of a host's rows and rearranging them before one scatter: 0.86 -> 0.91-0.92
  // of the link at 500 Mb/s on 2 cores, 0.82-0.84 -> 0.88-0.89 at 2 Gb/s on 16 (docs/fabric.md);
  // on interleaved hosts, 0.86-0.88 -> 0.92-0.94 at 500 Mb/s on 2 cores.
  void all_to_all_pipelined() {
    const size_t block = d_.count;
    const std::vector<int>& mine = ranks_on(host_);
    const size_t local_n = mine.size();
    const size_t row = local_n * block;  // what one rank of another host sends this host
    InFlight flight(g_.network, ctx_);
    const ProgressInsideHost progress_inside(*this, flight);
    // From h: for each of h's ranks s, its blocks for this host's local ranks t ([s][t]).
    std::vector<std::byte*> landed(hosts());
    std::vector<size_t> first(hosts());   // the request of each host's first chunk
    std::vector<size_t> waited(hosts());  // chunks of each host known to be here
    for (int h : is_leader() ? others_from_next() : std::vector<int>{}) {
      const size_t count = ranks_on(h).size() * row;
      landed[h] = scratch(from_slot(h), count);
      first[h] = post_recv(flight, leader(h), kFirst, landed[h], count);
    }
    for (int h : others_from_next()) {
      const size_t count = ranks_on(h).size() * block;  // one local rank's blocks for h
      std::byte* gathered = is_leader() ? scratch(to_slot(h), local_n * count) : nullptr;
      local(local_desc(OpKind::gather, count, 0, blocks_of(d_.send, ranks_on(h), block, kHostData),
                       gathered));
      if (!is_leader()) continue;
      post_send(flight, leader(h), kFirst, gathered, local_n * count);
      flight.progress();
    }
    all_to_all_inside_host();
    for (const RowGroup& g : scatter_groups(row)) {
      const size_t rows = g.last - g.first;
      const std::byte* source = nullptr;  // [t][s]: local rank t's blocks from the group's rows
      if (is_leader()) {
        const Chunks chunks = chunks_of(ranks_on(g.host).size() * row);
        for (; waited[g.host] < chunks.number && chunks.begin(waited[g.host]) < g.last * row;
             ++waited[g.host]) {
          flight.wait(first[g.host] + waited[g.host]);
        }
        source = at(landed[g.host], g.first * row);
        if (rows > 1) {  // one row is already [t]; several are [s][t] and are turned around
          std::byte* arranged = scratch(kCombined, rows * row);
          for (size_t s = 0; s < rows; ++s)
            for (size_t t = 0; t < local_n; ++t)
              copy_bytes(at(arranged, (t * rows + s) * block),
                         at(landed[g.host], ((g.first + s) * local_n + t) * block), bytes(block));
          source = arranged;
        }
      }
      local(local_desc(OpKind::scatter, rows * block, 0, source,
                       at(d_.recv, ranks_on(g.host)[g.first] * block)));
    }
    flight.wait_all();
  }

  // Rows [first, last) of what host `host` sends this host in all_to_all_pipelined, each `row`
  // elements, scattered inside the host in one step.
  struct RowGroup {
    int host;
    size_t first, last;
  };
  // all_to_all's blocks between this host's ranks, by an all-to-all in shared memory (through
  // scratch where the host's ranks are not consecutive).
  void all_to_all_inside_host() {
    const size_t block = d_.count;
    const std::vector<int>& mine = ranks_on(host_);
    const void* sends = blocks_of(d_.send, mine, block, kHostData);
    void* receives = landing_for(d_.recv, mine, block, kOwnPart);
    local(local_desc(OpKind::all_to_all, block, 0, sends, receives));
    if (!consecutive(mine)) place_blocks(d_.recv, receives, mine, block);
  }
  // Every other host's rows in groups of at least kMinPieceBytes (whole rows; a row a group where
  // the host's ranks lie apart), ordered by where
  // each group ends in its host's stream: the streams from the other hosts share this host's
  // link and advance together, so that is about the order in which the groups complete. Every
  // rank of the host computes the same list, as the shared-memory steps need.
  std::vector<RowGroup> scatter_groups(size_t row) const {
    const size_t per_group = std::max<size_t>(1, (kMinPieceBytes + bytes(row) - 1) / bytes(row));
    std::vector<RowGroup> groups;
    for (int h : others_from_next()) {
      const size_t rows = ranks_on(h).size();
      // A row a group where h's ranks are not consecutive: their rows land in places apart.
      const size_t together = consecutive(ranks_on(h)) ? per_group : 1;
      for (size_t s = 0; s < rows; s += together)
        groups.push_back({h, s, std::min(rows, s + together)});
    }
    std::stable_sort(groups.begin(), groups.end(),
                     [](const RowGroup& a, const RowGroup& b) { return a.last < b.last; });
    return groups;
  }

  // all_to_all per rail's step inside the host for host h: the blocks this host's ranks send to
  // h's local rank m come together in `for_peer` on local rank m, in local order, and send() is
  // called there once they are in. Where h's ranks are consecutive (their blocks lie together in
  // every input), one all-to-all in shared memory. Where they lie apart and blocks travel alone
  // (apart_blocks_travel_alone), one gather per rank of h, each to the rank whose rail takes it,
  // which sends as soon as its gather is done: packing h's blocks into scratch for one all-to-all
  // would copy every byte once more (as reduce_scatter_inside). Smaller blocks are packed: L steps
  // inside the host would cost more than their copy.
  template <class Send>
  void bring_together_for(int h, void* for_peer, Send&& send) {
    const size_t block = d_.count;
    const std::vector<int>& theirs = ranks_on(h);
    if (consecutive(theirs) || !apart_blocks_travel_alone(block)) {
      local(local_desc(OpKind::all_to_all, block, 0, blocks_of(d_.send, theirs, block, kHostData),
                       for_peer));
      send();
      return;
    }
    for (size_t i = 0; i < theirs.size(); ++i) {
      const bool mine = static_cast<int>(i) == local_rank_;
      local(local_desc(OpKind::gather, block, static_cast<int>(i), at(d_.send, theirs[i] * block),
                       mine ? for_peer : nullptr));
      if (mine) send();
    }
  }

  // all_to_all per rail, as NCCL's PXN routes it: the blocks that this host's ranks send to local
  // rank m of host h are first brought together on this host's local rank m (an all-to-all in
  // shared memory of the L blocks each rank has for h, or one gather per rank of h where h's
  // ranks are not consecutive: bring_together_for), which sends them to its rail's rank on h in one
  // message; they arrive in the order of this host's ranks, which is where they belong in the
  // receiver's buffer where the sender's ranks are consecutive, so they land in place. Where they
  // lie apart and blocks travel alone, the message is cut at its blocks' boundaries
  // (block_chunks_of) and each block lands in its own place: a copy of everything a rank receives,
  // after the last byte, would cost as much as the transfer on a link as fast as a memory copy.
  // Smaller blocks, and every block of a call in place (its send blocks still to be read), land in
  // scratch and are placed once all are in. Each rank's link carries 1/L of its host's traffic;
  // hosts are taken from the next one on, the all-to-all for the next host running while the last
  // one's message travels.
  void all_to_all_per_rail() {
    const size_t block = d_.count;
    const size_t rails = static_cast<size_t>(this->rails());
    const size_t row = block * static_cast<size_t>(g_.hosts.ranks());  // one rank's whole buffer
    const bool in_place = overlap(d_.send, bytes(row), d_.recv, bytes(row));
    InFlight flight(g_.network, ctx_);
    const ProgressInsideHost progress_inside(*this, flight);
    const std::vector<int> others = others_from_next();
    const Chunks per_block = block_chunks_of(block, rails);
    // Both ends know how host h's messages are cut: from h's layout and the block's size.
    auto cut_per_block = [&](int h) {
      return !consecutive(ranks_on(h)) && apart_blocks_travel_alone(block) &&
             rails <= kNetworkMaxChunks;
    };
    auto lands_in_place = [&](int h) {
      return !in_place && (consecutive(ranks_on(h)) || cut_per_block(h));
    };
    std::vector<std::byte*> landing(hosts());  // scratch, for the hosts placed after the last byte
    for (int h : others) {
      if (!lands_in_place(h)) landing[h] = scratch(from_slot(h), rails * block);
      // Where h's block i lands (in place, h's blocks together unless the message is cut).
      auto block_at = [&](size_t i) {
        return landing[h] != nullptr ? at(landing[h], i * block)
                                     : at(d_.recv, ranks_on(h)[i] * block);
      };
      if (!cut_per_block(h)) {
        post_recv(flight, rail_peer(h), kFirst, block_at(0), rails * block);
        continue;
      }
      post_blocks(rails, per_block, [&](size_t i, size_t chunk, size_t begin, size_t length) {
        return flight.recv(rail_peer(h), tag(kFirst, chunk), at(block_at(i), begin), bytes(length));
      });
    }
    for (int h : others) {
      std::byte* for_peer = scratch(to_slot(h), rails * block);
      auto send = [&] {
        if (!cut_per_block(host_)) {
          post_send(flight, rail_peer(h), kFirst, for_peer, rails * block);
          return;
        }
        post_blocks(rails, per_block, [&](size_t i, size_t chunk, size_t begin, size_t length) {
          return flight.send(rail_peer(h), tag(kFirst, chunk), at(for_peer, i * block + begin),
                             bytes(length));
        });
      };
      bring_together_for(h, for_peer, send);
    }
    all_to_all_inside_host();
    flight.wait_all();
    for (int h : others)
      if (landing[h] != nullptr) place_blocks(d_.recv, landing[h], ranks_on(h), block);
  }

  // Everyone on each host arrives, the leaders meet, and release their hosts.
  void barrier() {
    local(local_desc(OpKind::barrier, 0, 0, nullptr, nullptr));
    compare_fingerprints_across_hosts();
    local(local_desc(OpKind::barrier, 0, 0, nullptr, nullptr));
  }

  const HostGroup& g_;
  const OpDesc& d_;
  const uint64_t sequence_;
  const transport::WaitContext& ctx_;
  transport::WaitContext local_ctx_;  // ctx_, for shared-memory steps (ProgressInsideHost)
  const CollectiveTuning& tuning_;
  const size_t elem_;
  const int me_;
  const int host_;
  const int local_rank_;
  std::optional<NetworkAlgorithm> network_;  // set by choose_network (all_reduce, broadcast)
  std::optional<bool> gather_ring_;          // all_gather's exchange: round a ring or direct
  base::CallArena<1024> arena_;  // the small per-host vectors of the call (a malloc each showed)
};

}  // namespace

std::vector<int> rail_partners(const topo::HostMap& hosts, int rank) {
  // The rail in host order with `rank` in its place, at position `me`.
  std::vector<int> rail = hosts.rail_of(rank);
  const auto place = std::find_if(rail.begin(), rail.end(),
                                  [&](int r) { return hosts.host_of(r) > hosts.host_of(rank); });
  const int me = static_cast<int>(place - rail.begin());
  rail.insert(place, rank);
  const int n = static_cast<int>(rail.size());
  std::vector<int> partners;
  auto add = [&](int position) {
    position = (position % n + n) % n;
    if (position != me) partners.push_back(rail[static_cast<size_t>(position)]);
  };
  for (int distance = 1; distance < n; distance *= 2) {  // rings, trees, rounds
    add(me + distance);
    add(me - distance);
  }
  const HalvingDoubling shape(n);
  const int position = shape.position_of(me);
  if (position < 0) {
    add(me - 1);  // the even host of its pair
  } else {
    if (position < shape.pairs()) add(me + 1);
    for (int k = 0; k < shape.rounds(); ++k) add(shape.host_at(position ^ (1 << k)));
  }
  std::sort(partners.begin(), partners.end());
  partners.erase(std::unique(partners.begin(), partners.end()), partners.end());
  return partners;
}

void run_across_hosts(const HostGroup& group, const OpDesc& desc, uint64_t sequence,
                      const transport::WaitContext& ctx, const CollectiveTuning& tuning) {
  HostCollective(group, desc, sequence, ctx, tuning).run();
}

void settle_checkpoints(const HostGroup& group, uint64_t operations,
                        const transport::WaitContext& ctx) {
  if (operations == 0 || group.hosts.local_rank(group.rank) != 0) return;
  for (const auto& [peer, awaited] : group.credit.all_awaited())
    await_acknowledgement(group, peer, awaited, ctx);
  const uint64_t last = (operations - 1) / kCheckpointEvery * kCheckpointEvery;
  if (operations - 1 - last >= kCheckpointLag) return;  // compared already
  compare_checkpoint_stamps(group, last, ctx);
}

}  // namespace tpf::coll
