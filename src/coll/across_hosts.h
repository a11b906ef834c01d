// The collectives of a communicator whose ranks are on several hosts: shared memory inside each
// host (the host's own ShmFabric over its local ranks, with the single-host algorithms), the
// network between hosts (UcxNetwork), composed hierarchically.
//
// Every collective starts with the host leaders (local rank 0) exchanging fingerprints over the
// network, so ranks that called different collectives fail with Error(mismatch) on every host;
// inside a host the shared-memory steps compare fingerprints as always. The exception: small
// rooted collectives, whose senders send their call with the data and go on (the receivers
// compare, and on many hosts so does every leader that passes messages on through the leaders'
// binomial tree; the leaders compare the rest at checkpoints, kCheckpointEvery).
// Reductions combine in a fixed order: first inside each host (its ranks in local order, as the
// shared-memory algorithms do), then the hosts' partial results in host order (hosts numbered by
// their lowest rank), each part of the result computed once and copied, so every rank gets the same
// bits. Averages are summed that way and divided once at the end; f16/bf16 partials are rounded
// once per host and once more across hosts (inside a host: once).
//
// The data crosses the network between host representatives (the leader, or the root on the
// root's host), except the large collectives other than barrier where every host has the same
// number of ranks (consecutive or not) and each rank has network devices of its own
// (topo::HostMap), which cross per rail (local rank l of every host carries its share;
// network_cost.h). Transfers between them go in chunks of at least 512 KiB, each its own message,
// at most 2 in flight per peer; all_reduce, reduce_scatter, all_gather, all_to_all and per-rail
// broadcast overlap their shared-memory steps with the network (docs/fabric.md, "Collectives
// across hosts"). A host with one rank skips its
// shared-memory steps and sends from and receives into the caller's buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "coll/algorithms.h"
#include "coll/network_cost.h"
#include "coll/op_desc.h"
#include "coll/rooted_credit.h"
#include "topo/hosts.h"
#include "transport/shm_fabric.h"
#include "transport/ucx_network.h"

namespace tpf::coll {

// Memory the collectives across hosts reuse from one call to the next (a communicator runs one
// collective at a time): a fresh buffer costs a page fault per page, measured as a third of the
// time of a 64 MiB reduce_scatter between two hosts. Each slot grows to the largest request and
// is kept until the communicator is destroyed.
class HostScratch {
 public:
  // `bytes` of slot `slot`; contents unspecified, valid until the next get() of that slot.
  std::byte* get(size_t slot, size_t bytes);

 private:
  struct Slab {
    std::unique_ptr<std::byte[]> data;
    size_t bytes = 0;
  };
  std::vector<Slab> slabs_;
};

// A small broadcast or scatter from a host leader, and a small reduce or gather, does not wait
// for the leaders to compare their calls: a broadcast's or scatter's root sends and goes on, like
// MPI_Bcast's eager root, and so do a reduce's or gather's senders, like MPI_Reduce's and
// MPI_Gather's; each receiving leader compares the call that comes with the data
// (across_hosts.cc: broadcast_unacknowledged, scatter_unacknowledged, to_root_packed). What no
// receiver can see (leaders that disagree on a root, say) the leaders find at their checkpoints:
// at every operation whose sequence number is a multiple of kCheckpointEvery each leader sends
// every other one its stamp (its call, and the digest of the calls nobody compared since its last
// stamp or fingerprint exchange: UncomparedCalls), and kCheckpointLag operations later it waits for
// theirs and compares. So no leader runs more than kCheckpointEvery + kCheckpointLag - 1
// operations ahead of another, yet no checkpoint drains the stream: a root that waits there waits
// for receivers kCheckpointLag operations behind it, which have that much work left. What waits
// unread for a late receiver is bounded in bytes by each pair's credit (RootedCredit), which
// lags a window behind in the same way. Every other collective's leaders compare fingerprints
// before any data moves.
// The window must outlast a scheduler time slice where ranks share cores: measured on small
// broadcasts, 2 emulated hosts x 2 ranks (4 ranks on 2 cores; docs/fabric.md), checkpoints every
// 64 operations ran at the speed of the acknowledged 64th they replaced (8-16 us a call), every
// 512 at 3.6-6.6 us.
inline constexpr uint64_t kCheckpointEvery = 512;
inline constexpr uint64_t kCheckpointLag = kCheckpointEvery / 2;
static_assert(kCheckpointLag > 0 && kCheckpointLag < kCheckpointEvery);

// Where a host's blocks lie apart (interleaved hosts), the leaders' all_to_all pipelines its
// shared-memory steps with the network from blocks of this size, each block a step of its own
// (across_hosts.cc: pipelines_inside_hosts); smaller blocks go through scratch unpipelined. Their
// reduce_scatter and all_gather pipeline from one network chunk (kNetworkMinChunkBytes). Measured
// on 4 x 2 interleaved hosts, blocks of 64-256 KiB, alternated with pipelining from one chunk
// (docs/results/interleaved-pipeline-threshold.txt): all_to_all 0.63-1.02x the time (median
// 0.82x), reduce_scatter 0.79-1.10x and all_gather 0.93-1.08x (level within the noise), so only
// all_to_all's threshold came down.
inline constexpr size_t kInterleavedAllToAllPipelineMinBlockBytes = size_t{64} << 10;
// all_to_all per rail where a host's blocks lie apart: from blocks of this size each rank's
// blocks for such a host are gathered straight from its input, one shared-memory step per rank of
// that host, and the blocks from such a host land in place, each its own message (across_hosts.cc:
// apart_blocks_travel_alone); smaller blocks are packed into scratch and placed after the last
// byte. Measured on 4 x 2 interleaved hosts, two links each, alternated with the form from one
// network chunk (512 KiB, before), at 2 Gb/s where the cores set the pace
// (docs/results/interleaved-pipeline-threshold.txt): 0.84x the time at 256 KiB blocks (faster in
// 8 of 8 pairs); at 64 and 128 KiB 1.25x and 0.93x, within the noise (the same code swung
// 1.11-1.17x between two builds there); level at 500 Mb/s, where the links set the pace.
inline constexpr size_t kInterleavedPerRailAllToAllMinBlockBytes = size_t{256} << 10;

// A leader's stamp: its call, and the digest of the calls before it that no leader compared.
struct CallStamp {
  transport::Fingerprint call{};
  uint64_t earlier = 0;
  bool operator==(const CallStamp&) const = default;
};

// The small broadcasts, reduces, gathers and scatters whose leaders did not wait for each other,
// folded into one digest that each leader sends with its next fingerprint or checkpoint stamp, so
// leaders that disagreed on one of them (on its root, say, where nobody received anything
// unexpected) fail with a mismatch at the next comparison; and the stamp this leader sent at its
// last checkpoint, which it compares with the others' kCheckpointLag operations later.
class UncomparedCalls {
 public:
  void add(const transport::Fingerprint& call);
  // The digest of the calls added since the last take(), and a fresh start.
  uint64_t take();
  void set_checkpoint(const CallStamp& stamp) { checkpoint_ = stamp; }
  const CallStamp& checkpoint() const { return checkpoint_; }

 private:
  uint64_t digest_ = 0;
  CallStamp checkpoint_{};
};

struct HostGroup {
  transport::ShmFabric& local;     // this host's ranks, numbered by their local rank
  transport::UcxNetwork& network;  // every rank on another host, by communicator rank
  const topo::HostMap& hosts;
  int rank;                     // this rank in the communicator
  HostScratch& scratch;         // the communicator's, reused across its collectives
  UncomparedCalls& uncompared;  // the communicator's (leaders' only)
  RootedCredit& credit;         // the communicator's (leaders' only)
  NetworkChoices& choices;      // the communicator's
};

// The ranks on other hosts with which `rank` moves data in the algorithms whose partners are
// fixed by position on its rail (the hosts that have its local rank, in host order; a leader's
// rail is every host): the pipelined rings' neighbours, the binomial trees' and the leaders'
// rounds' partners at 2^k positions either way (whatever the root), and halving-doubling's
// partners, its pairs included. The network gives these pairs registered slots for put + signal
// (transport::NetworkConfig::put_peers): at most 3 ceil(log2 H) + 1 of them (25 on 1,000 hosts)
// where every other rank on the rail would cost a rank 1 MiB of slots per host. Symmetric: p
// lists q where q lists p.
std::vector<int> rail_partners(const topo::HostMap& hosts, int rank);

// Runs the collective `desc` (validated; not send/recv) as operation `sequence`.
void run_across_hosts(const HostGroup& group, const OpDesc& desc, uint64_t sequence,
                      const transport::WaitContext& ctx, const CollectiveTuning& tuning);

// Before a communicator across hosts goes, on a leader that ran `operations` operations: takes
// the acknowledgements it still awaits (RootedCredit), so that no receiver sends one to a leader
// that has left; and where the comparison of its last checkpoint is still ahead (fewer than
// kCheckpointLag operations after it), makes it now: waits for the other leaders' stamps of it, so
// that none of them sends to a leader that has left (a send to a closed endpoint would fail the
// sender's communicator), and compares them, so that a call of its own that went on without the
// others (a small broadcast's root, a small reduce's sender) and was the last is still compared.
// Bounded by `ctx`; throws a mismatch, or what a wait throws (a peer's failure, the deadline).
void settle_checkpoints(const HostGroup& group, uint64_t operations,
                        const transport::WaitContext& ctx);

}  // namespace tpf::coll
