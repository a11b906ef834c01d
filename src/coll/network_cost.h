// The network's link class and the algorithm choices of the collectives across hosts
// (coll/across_hosts.cc). The formulas are the generic alpha-beta ones of coll/alpha_beta.h, the
// ones the shared-memory fabric and the planner use (one source of truth); `tpf plan calibrate
// --network` refits the constants from `tpf bench` runs across hosts.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "coll/alpha_beta.h"
#include "coll/collective_kinds.h"

namespace tpf::coll {

// Data crosses between hosts in chunks of at least this many bytes, each its own message: small
// enough that the first chunk's combine starts early, large enough that a message's fixed cost
// (tens of microseconds over TCP) stays below 1 % at 1 Gb/s. Measured on all_reduce (2 hosts x 1
// rank, 1 Gb/s, 64 MiB): chunks of 512 KiB 0.99 of the link, 1 MiB 0.96, 2 MiB 0.90, 4 MiB 0.79.
inline constexpr size_t kNetworkMinChunkBytes = size_t{1} << 19;
// At most this many chunks per transfer, so each has a tag of its own (12 tag bits).
inline constexpr size_t kNetworkMaxChunks = size_t{1} << 12;
// A collective whose messages between host leaders carry at most this much data each sends the
// data in its fingerprint's message, in one round (coll/across_hosts.cc): all_reduce one-shot,
// all_gather, reduce_scatter and all_to_all. Every leader waits for the round's messages before
// its next call, so at most two calls' messages wait for a late one. Measured at 100 Gb/s on 2
// emulated hosts x 1 (where the link is no limit), against 8 KiB: all_reduce of 32 KiB 18 us
// against 34, all_gather of 64 KiB 19 against 33 (docs/results/packed-one-round-64k.txt).
inline constexpr size_t kNetworkPackedBytes = size_t{64} << 10;
// The rooted collectives (broadcast, scatter, reduce, gather) pack up to this much. Their senders
// go on without waiting (a byte credit between each pair of leaders bounds what waits unread for
// a late receiver: coll/rooted_credit.h), so their messages mostly arrive before the receive is
// posted. Measured on 2 x 1 at 100 Gb/s: such messages of 60 KiB took 12-18 us a call in every
// run (reduce, broadcast), of 64 KiB and its fingerprint (just over one of UCX over TCP's 64 KiB
// receive segments, UCX_TCP_RX_SEG_SIZE) 16-57 us, run to run, where the form that compares
// fingerprints first took 24-54 (docs/results/rooted-credit.txt). UCX alone shows the step:
// ucx_perftest streams 60 KiB messages at 9.5-10.5 us, 64 KiB ones at 27-30; larger TCP segments
// helped the exchanges and hurt the rooted calls (docs/results/senders-ahead.txt, section 14).
inline constexpr size_t kNetworkRootedPackedBytes = size_t{60} << 10;
// The one-round size of `op`: kNetworkRootedPackedBytes where it has a root, else
// kNetworkPackedBytes.
size_t network_packed_bytes(Collective op) noexcept;
// UCX sends messages up to this size eagerly (its rendezvous threshold, unless UCX_RNDV_THRESH
// says otherwise), without a rendezvous's round trip: a packed message (the data and its
// fingerprint), and the data of the forms that compare fingerprints first, which finds its receive
// posted. Measured at 100 Gb/s on 2 x 1, 128 KiB messages took 0.70-0.85x the time of a rendezvous
// (send_recv, broadcast, all_reduce; all_gather of 256 KiB); a 256 KiB threshold made 1 MiB calls
// bimodal, up to 1.9x slower (docs/results/packed-one-round-64k.txt). Chunks
// (kNetworkMinChunkBytes) stay rendezvous.
inline constexpr size_t kNetworkEagerBytes = (size_t{128} + 4) << 10;
static_assert(kNetworkEagerBytes > kNetworkPackedBytes &&
              kNetworkPackedBytes >= kNetworkRootedPackedBytes &&
              kNetworkEagerBytes < kNetworkMinChunkBytes);

// Costs of the network between host leaders. TPF_NET_CALL_US, TPF_NET_STEP_US, TPF_NET_MESSAGE_US,
// TPF_NET_GBPS and TPF_NET_REDUCE_GBPS override them (comm/settings.cc). call_us and step_us are
// the fit of `tpf plan calibrate-network` on the runs in docs/results/calibration-network (2
// emulated hosts x 1 rank, UCX over TCP, links capped at 1 Gb/s: 3.7 and 10.7 us; docs/fabric.md),
// rounded. The runtime cannot know a link's rate, so link_gbps assumes a 100 Gb/s NIC unless told
// (the emulated-hosts script sets it from its cap). Combining is hidden behind a 1 Gb/s link (the
// fit finds it no bottleneck), so reduce_gbps is one core streaming H inputs from memory.
struct NetworkLinkCost {
  double call_us = 4.0;   // a collective's fixed cost across hosts, whatever its algorithm
  double step_us = 11.0;  // one round between leaders: a message's latency and software cost
  // Each further message a leader sends or receives in a round: the software cost it adds on
  // the leader's core (LogP's overhead). Measured with ucx_perftest between two emulated hosts
  // (UCX over TCP, 8-byte tagged messages streamed: 7.1-7.2 us a message; docs/fabric.md), not
  // fitted by calibrate-network (its runs have two hosts, every round one message each way).
  // An RDMA NIC's is a tenth of it or less: set it there (leaders_gather_in_rounds).
  double message_us = 7.0;
  double link_gbps = 12.5;    // each host's link, per direction
  double reduce_gbps = 10.0;  // combining hosts' partial results that landed in memory
  LinkClass link_class() const;
};

// How a collective crosses the network (the leaders' part; the shared-memory steps inside each
// host come before and after):
// - one_shot: one round. all_reduce: each leader sends its host's partial result to every other
//   leader ((H-1) x the buffer out of each link) and combines all H. broadcast: the root sends the
//   buffer to every other host's leader ((H-1) x the buffer out of the root's link).
// - pipelined: a fingerprint round, then chunks of at least kNetworkMinChunkBytes. all_reduce: a
//   reduce-scatter and all-gather between the leaders in segments (2 (H-1) / H of the buffer
//   through each link). broadcast: a chain from the root's host (the buffer once per link).
// - per_rail (hosts with the same number L >= 2 of ranks each). all_reduce: a reduce-scatter
//   inside each host leaves local rank l with the host's partial result of part l of every
//   segment; the ranks of local rank l on all hosts (rail l) all-reduce that part between them as
//   pipelined does between the leaders; an all-gather inside each host. broadcast: rail l carries
//   part l of every segment along the chain of hosts; each host all-gathers the segments inside
//   as their parts arrive. Each host's traffic is
//   pipelined's, cut into L flows started by L processes: on a host with a NIC per rail (the
//   usual GPU server) the flows take L links, and the combining and the network's software cost
//   are spread over the host's ranks instead of falling on its leader. Chosen where each rank
//   has network devices of its own (topo::HostMap::rails_have_own_links); through one shared
//   link it measured 0.77-1.19x the leaders' speed. Large reduce, all_gather, reduce_scatter,
//   all_to_all, gather and scatter go per rail there too (the hosts' ranks consecutive or not),
//   unless pipelined is forced (coll/across_hosts.cc).
// - tree (broadcast, 3 or more hosts): the whole buffer down a binomial tree of the leaders from
//   the root's host, ceil(log2 H) hops, each leader sending to its children one after the other
//   (farthest first), the root's call ahead of the data (or, from a root that does not lead,
//   the leaders' fingerprints beside it: the small broadcast's rule, coll/across_hosts.h). Between
//   one round, whose root sends H - 1 copies through its link, and the chain, whose chunks cross H
//   - 1 hops: mid sizes on many hosts (on 8 hosts at 1 Gb/s, 16 to 64 KiB: docs/fabric.md).
// - halving_doubling (all_reduce, 3 or more hosts): after the fingerprint round, recursive halving
//   and doubling between the leaders (Rabenseifner's reduce-scatter and all-gather, as MPICH and
//   Open MPI run it for mid sizes; Thakur, Rabenseifner and Gropp, IJHPCA 19(1), 2005). With P
//   the largest power of two <= H, the first 2 (H - P) hosts pair up first, the odd one of each
//   pair handing its partial result to the even one and getting the result back. Then log2 P
//   rounds each way between the P remaining leaders, each round one message each way with half
//   the data of the round before: 2 log2 P messages a leader where pipelined's single segment
//   takes 2 (H - 1), in 2 log2 P rounds instead of 2, the same bytes through each link. The
//   partial results combine as a balanced binary tree over the hosts in host order (the pairs'
//   first): the order across hosts is this tree's, not host order (docs/fabric.md). Chosen in
//   pipelined's place for latency-bound sizes on 4 or more hosts (choose_network_algorithm).
enum class NetworkAlgorithm { one_shot, pipelined, per_rail, tree, halving_doubling };
const char* network_algorithm_name(NetworkAlgorithm algorithm) noexcept;
std::optional<NetworkAlgorithm> parse_network_algorithm(std::string_view name) noexcept;

// Recursive halving-doubling's shape on `hosts` leaders: `powered` (P, the largest power of two
// <= hosts) take part in the rounds, of which the first hosts - P stand for a pair of hosts each.
struct HalvingDoubling {
  explicit HalvingDoubling(int hosts);
  int hosts = 0;
  int powered = 0;
  int pairs() const { return hosts - powered; }
  int rounds() const;  // log2 P: the reduce-scatter's, and the all-gather's
  // Host h's position among the P, or -1 where h hands its data to its pair's even host, h - 1.
  int position_of(int host) const;
  // The host at position v: the even host of pair v for v < pairs(), else v + pairs().
  int host_at(int position) const;
};
// Whether every message of a halving-doubling all_reduce of `bytes` across `hosts` (3 or more)
// is small: a round's larger half, or a pair's whole buffer, at most kNetworkPackedBytes (what one
// round packs). The model takes halving-doubling there only: it wins where messages rather than
// transfers set the time. Above, its rounds run one after the other what pipelined overlaps:
// measured on emulated hosts whose ranks share this machine's 2 cores, links uncapped (where
// the cores are the limit), 0.88-1.01x pipelined's speed at 256 KiB (rounds of 128 KiB; 8 x 1),
// 0.64-0.84x at 512 KiB to 2 MiB, 0.56-1.09x at 64-512 KiB on 4 x 1; level where a 1 Gb/s link
// set the pace (docs/fabric.md). Real hosts have cores of their own: not measured here.
bool halving_doubling_messages_are_small(size_t bytes, int hosts);
// The messages a leader sends and receives in a halving-doubling all_reduce of `bytes` across
// `hosts` (the fingerprint round aside): every round's half each way in chunks
// (network_chunk_count), in both phases, and a pair's whole buffer in and back out.
size_t halving_doubling_messages(size_t bytes, int hosts);

// The collectives whose network algorithm is chosen by the model. The others have one each:
// pipelined in chunks after a fingerprint round, or, where every message between leaders carries
// at most kNetworkPackedBytes, one round with the data in the fingerprint messages.
bool has_network_choice(Collective op) noexcept;
// The collectives with a per-rail form (coll/across_hosts.cc), taken where the rails have links
// of their own or per_rail is forced: all_reduce and broadcast (the cost model's pipelined form),
// reduce, all_gather, reduce_scatter, all_to_all, gather and scatter (above the one-round size).
bool has_per_rail_form(Collective op) noexcept;

// The smallest slice (one host's part of a segment) of a pipelined all_reduce or reduce: enough
// bytes to keep the link busy for four rounds (4 x step_us x link), so a segment's fixed cost
// stays small beside its transfer, between 128 KiB and kNetworkMinChunkBytes. More segments
// keep every link busy between the reduce-scatter and all-gather halves: measured on 4 emulated
// hosts at 500 Mb/s, slices of 128 KiB instead of 512 KiB took a 4 MiB all_reduce from 0.85 to
// 0.99 of the link (4 x 2: 0.90-0.94 to 0.97-1.0; 64 MiB 0.97 to 0.99; 2 x 1 at 1 Gb/s
// unchanged); at the default 100 Gb/s link it is 512 KiB, what it always was. It depends on the
// settings, which every rank of a communicator shares (comm/settings_agreement.h).
size_t all_reduce_min_slice_bytes(const NetworkLinkCost& cost);
// Segments of a pipelined all_reduce of `bytes` across `hosts` hosts: as many as keep each
// host's slice of a segment at least `min_slice_bytes` (at most kNetworkMaxChunks).
size_t all_reduce_segments(size_t bytes, int hosts, size_t min_slice_bytes);
// Elements per chunk of a pipelined transfer of `count` elements of `elem_bytes` each: at least
// kNetworkMinChunkBytes, and at most kNetworkMaxChunks chunks. Sender and receiver cut a transfer
// alike: the cut depends on its element count only.
size_t network_chunk_elems(size_t count, size_t elem_bytes);
// How many chunks that makes (an empty transfer is one empty message).
size_t network_chunk_count(size_t count, size_t elem_bytes);
// How the pipelined broadcast's chain of hosts cuts its buffer (coll/across_hosts.cc). Each chunk
// crosses H - 1 hops, one after another, and the chunks follow each other down the chain: with c
// chunks of a b-byte buffer the last host's last chunk arrives after (H - 2 + c) hops of a round
// and b / c bytes each (network_traffic prices it so), least at c = sqrt((H - 2) b / (link x
// round)). Chunks of at least kNetworkMinChunkBytes (what the chain used before, and what a chain
// of 2 hosts, one hop, keeps) left a buffer of up to 512 KiB whole on every hop: measured on 8
// emulated hosts at 1 Gb/s with links that never exceed their rate, 512 KiB took 6.7 link times
// (docs/fabric.md). `round_us`: a hop's fixed cost (step_us + message_us); 0: the fixed cut
// (network_chunk_elems), as runs recorded before the chain followed the model.
struct ChainCut {
  double round_us = 0;
  double link_gbps = 0;
};
ChainCut chain_cut(const NetworkLinkCost& cost);
// The chain's chunks are at least this many bytes: well above what UCX sends eagerly over TCP
// (about 8 KiB; each larger message is a rendezvous of its own). 16 KiB measured 1.1-1.5x faster
// at 128-512 KiB on 8 emulated hosts at 1 Gb/s but slower at 2 MiB (docs/fabric.md): not taken.
inline constexpr size_t kChainMinChunkBytes = size_t{32} << 10;
// Elements per chunk of the chain's transfer of `count` elements of `elem_bytes` across `hosts`
// hosts, between kChainMinChunkBytes and kNetworkMinChunkBytes and at most kNetworkMaxChunks
// chunks; every rank computes the same from the shared settings.
size_t chain_chunk_elems(size_t count, size_t elem_bytes, int hosts, ChainCut cut);

// The cut of all_gather's ring between hosts (coll/across_hosts.cc: between the leaders, or the
// ranks of a rail), whose chunks of every host's blocks (host_counts[h] elements) are numbered
// together in a tag: each host's blocks cut as any transfer (network_chunk_elems), in larger chunks
// where all of them together would be more than `max_chunks`, so that they fit wherever there are
// at most max_chunks / 2 hosts. Returns the elements per chunk of each host's blocks; every rank
// computes the same cut.
std::vector<size_t> ring_chunk_elems(const std::vector<size_t>& host_counts, size_t elem_bytes,
                                     size_t max_chunks = kNetworkMaxChunks);
// Chunks of `count` elements, `per_chunk` each (an empty transfer is one empty message).
size_t chunks_of_size(size_t count, size_t per_chunk);

// Whether all_gather's hosts exchange their data round a ring (coll/across_hosts.cc:
// GatherRing) rather than each sending to every other host at once. The ring keeps one flow per
// link, where the concurrent flows lost 4-20 % of the link (measured over TCP on emulated links,
// 4 hosts: 0.80-0.89 of the link at 4 MiB, 0.92-0.96 at 64 MiB; docs/fabric.md), but each chunk
// waits for its arrival before it goes on: H - 2 rounds (step_us each) more. So the ring is taken
// where those rounds cost at most kRingRoundsShare of the transfer, (H - 1) x `host_bytes` (the
// most one host sends) through the link: on 2 hosts always (the two forms are one), on 4 hosts at
// the default 100 Gb/s from 1.8 MB per host, at 500 Mb/s from 9 KB. Every rank shares the
// settings (comm/settings_agreement.h); the choice is in the leaders' fingerprints too.
inline constexpr double kRingRoundsShare = 0.05;
bool all_gather_in_ring(size_t host_bytes, int hosts, const NetworkLinkCost& cost);

// How the leaders exchange what each needs from every other one (the fingerprints before a
// collective; small all_reduce's partial results and all_gather's blocks, which ride in the
// fingerprint messages): directly, one round in which each leader sends a message to every other
// leader and receives one from each (2 (H-1) messages), or in ceil(log2 H) rounds of one message
// each way (Bruck et al.'s all-gather: each leader forwards what it has gathered so far; 2
// ceil(log2 H) messages). The bytes through each link are the same either way. Returns whether
// the rounds cost less: (ceil(log2 H) - 1) more steps against 2 (H - 1 - ceil(log2 H)) fewer
// messages. Every rank decides from the same host count and settings (shared:
// comm/settings_agreement.h).
bool leaders_gather_in_rounds(int hosts, const NetworkLinkCost& cost);
// The rounds of that exchange in rounds: ceil(log2 hosts).
int gather_rounds(int hosts);
// The same choice for a personal exchange between the leaders, where each sends every other one
// a block of its own (small reduce_scatter and all_to_all, at most `pair_bytes` a pair): directly,
// or in ceil(log2 H) rounds of Bruck et al.'s all-to-all (IEEE TPDS 8(11), 1997), where round k
// carries the blocks whose distance to their destination has bit k set, each passed on until it
// arrives. Unlike the all-gather's, the rounds move more bytes through each link (every block
// crosses as many hops as its distance has set bits: sum_k |{i < H: bit k of i set}| blocks
// against H - 1), so the link's time for them decides too. Every rank decides from the same host
// count, call and settings.
bool leaders_exchange_in_rounds(int hosts, size_t pair_bytes, const NetworkLinkCost& cost);
// The blocks a leader sends (and receives) in the Bruck rounds among `hosts` leaders: the sum over
// rounds k of the distances 1 .. hosts - 1 with bit k set.
size_t exchange_round_blocks(int hosts);
// Whether the small rooted collectives whose root's leader does not wait for the others before
// the data moves go through a binomial tree of the leaders: ceil(log2 H) hops of a step and a
// message each, against the root's H - 1 messages, sent or taken one after the other in one step.
// Down from the root: a broadcast (across_hosts.cc: broadcast_unacknowledged), and a scatter
// (scatter_unacknowledged), each message carrying its subtree's blocks. Up to the root: a gather's
// blocks and a reduce's partial results (to_root_packed), each message carrying its subtree's,
// combined only at the root, in host order. Scatter, gather and reduce take it where the root's
// largest message packs: the root's link carries the same bytes either way.
bool rooted_in_tree(int hosts, const NetworkLinkCost& cost);
// Whether a reduce of `bytes` goes in one round (across_hosts.cc: reduce_one_round): the other
// H - 1 hosts' partial results reach the root's leader whole (nothing combines on the way, so the
// bits do not depend on the path), so they must pack together (kNetworkRootedPackedBytes), and the
// root's link takes all of them, against the slices (reduce_in_slices): the leaders' fingerprint
// round, then each slice to its owner and the results to the root, a step and H - 1 messages each
// at the root, every link carrying the data about once. On two hosts the root's link takes the
// other's partial result once either way: one round wherever it packs. Measured on 4 emulated
// hosts x 1 at 1 Gb/s: a 16 KiB reduce in one round 395-397 us, in slices 220-228
// (docs/results/rooted-credit.txt). Every rank decides from the same count and settings.
bool reduce_in_one_round(size_t bytes, int hosts, const NetworkLinkCost& cost);

// What a leader does in the network part of `op` (all_reduce or broadcast) on `hosts` hosts, and
// its microseconds: call_us plus the traffic over the network link class. The broadcast chain's
// bytes are those on the path to its last host: the buffer through one link, and a chunk through
// each of the H - 2 links before (the chain fills). Throw tpf::Error(invalid_argument) for another
// collective, fewer than 2 hosts, tree for all_reduce, halving_doubling for broadcast, or per_rail
// (its traffic through a host's link is pipelined's, spread over rails the model does not know).
// `min_slice_bytes`: the slice the pipelined all_reduce ran with (all_reduce_min_slice_bytes of
// the run's settings); `chain`: how the broadcast chain cut its buffer (chain_cut of the run's
// settings; {}: the fixed cut of runs recorded before).
StepTraffic network_traffic(Collective op, NetworkAlgorithm algorithm, size_t bytes, int hosts,
                            size_t min_slice_bytes, ChainCut chain = {});
double predict_network_us(Collective op, NetworkAlgorithm algorithm, size_t bytes, int hosts,
                          const NetworkLinkCost& cost);
// The same for a run whose pipelined all_reduce used slices of at least `min_slice_bytes` and
// whose broadcast chain was cut by `chain` (a measurement made with other settings than `cost`).
double predict_network_us(Collective op, NetworkAlgorithm algorithm, size_t bytes, int hosts,
                          const NetworkLinkCost& cost, size_t min_slice_bytes, ChainCut chain = {});

// What the choice between the algorithms compares (choose_network_algorithm): predict_network_us
// (the fitted call, steps and bytes) with the leaders' messages counted as
// leaders_gather_in_rounds and rooted_in_tree count them: the fingerprint round as the leaders
// run it (directly or in rounds) in place of its one step, and message_us for every further
// message on a leader's path: a chain's hops, a pipelined all_reduce's 4 (H - 1) a segment, the
// one-round forms' sends to every other leader. A packed broadcast whose root leads its host goes
// down the tree where rooted_in_tree says so: ceil(log2 H) hops, each a step, a message and the
// data. The tree: two messages a hop (the root's call ahead of the data) from a leading root;
// else a message a hop and the leaders' direct fingerprint exchange beside the hops. Not a
// prediction: the fitted step_us already holds the two-host runs' one message each way, so this
// counts a round's first messages twice; it only ranks the forms. Measured on 8 emulated hosts at
// 1 Gb/s, where the fitted times alone chose the chain for a 2-8 KiB broadcast and the pipelined
// all_reduce at 1-4 KiB (H - 1 or 2 (H - 1) rounds one after the other: 0.6-1.5 ms) over the tree
// and the one round (3-12x faster; docs/fabric.md).
double network_choice_us(Collective op, NetworkAlgorithm algorithm, size_t bytes, int hosts,
                         const NetworkLinkCost& cost, bool root_leads = true);

// The cheapest algorithm under `cost`, or `forced` (TPF_NET_ALGO; tree forces broadcast only and
// halving_doubling all_reduce only, the other collective keeping the model's choice). A one-shot
// all_reduce holds every other host's buffer in scratch at once, so it is never chosen above
// kMaxOneShotBytes received per leader; the tree is chosen on 3 or more hosts only (on 2 it is the
// one round). `rails`: the rails that may carry it (the ranks on each host where every host has as
// many and each has links of its own, or per_rail is forced; else 1). The pipelined forms of
// all_reduce and broadcast run per_rail where rails >= 2, priced as the leaders' form of a buffer
// `rails` times smaller (each rail carries its share through a link of its own; docs/fabric.md has
// the measurements); per_rail forced where rails < 2 runs pipelined (one rail is the leaders').
// `root_leads`: a broadcast's root is its host's leader (network_choice_us). halving_doubling
// takes the pipelined form's place where its messages are small
// (halving_doubling_messages_are_small) and the model prices it lower, never one round's: the
// model prices a round at step_us (11 us, fitted on two hosts whose ranks have a core each), and
// on emulated hosts whose ranks share this machine's 2 cores a round costs far more (16 x 1:
// about 130 us), so the form with the most rounds loses there what the model gives it. Measured
// at 1 Gb/s: one round 1.3-2.7x faster than halving-doubling at 8 KiB on 8 x 1 and at 4 KiB on 16
// x 1, where the model priced halving-doubling lower (docs/fabric.md). Against the pipelined
// form, which has rounds too, its lower price held: 1.20-1.98x faster on 16 x 1 at 8-128 KiB,
// 0.93-1.38x on 8 x 1 at 8-64 KiB, level on 4 hosts (priced 1-2 % lower there).
inline constexpr size_t kMaxOneShotBytes = size_t{64} << 20;
NetworkAlgorithm choose_network_algorithm(Collective op, size_t bytes, int hosts,
                                          std::optional<NetworkAlgorithm> forced,
                                          const NetworkLinkCost& cost, int rails = 1,
                                          bool root_leads = true);

// The choices of one communicator, remembered: its host count, rails and settings never change,
// so a choice depends on the collective, the size and whether a broadcast's root leads its host
// alone. Pricing every form took about a tenth of a small collective's own instructions (534 of
// 5,900 a call, callgrind). Direct-mapped: a loop's few sizes stay, others evict. Not shared
// between threads (a communicator runs one collective at a time).
class NetworkChoices {
 public:
  template <class Choose>
  NetworkAlgorithm get(Collective op, size_t bytes, bool root_leads, Choose&& choose) {
    // Fibonacci hashing: sizes are mostly multiples of a power of two, which a plain modulo
    // would crowd into a few slots.
    const uint64_t key = (uint64_t{bytes} << 5) ^ (static_cast<uint64_t>(op) << 1) ^ root_leads;
    Entry& e = entries_[(key * 0x9E3779B97F4A7C15ull) >> (64 - kSlotBits)];
    if (!e.used || e.bytes != bytes || e.op != op || e.root_leads != root_leads)
      e = {bytes, op, root_leads, choose(), true};
    return e.algorithm;
  }

 private:
  static constexpr int kSlotBits = 6;
  struct Entry {
    size_t bytes = 0;
    Collective op{};
    bool root_leads = false;
    NetworkAlgorithm algorithm{};
    bool used = false;
  };
  std::array<Entry, size_t{1} << kSlotBits> entries_{};
};

}  // namespace tpf::coll
