// The collectives of a communicator whose ranks are on several hosts: shared memory inside each
// host (the host's own ShmFabric over its local ranks, with the single-host algorithms), the
// network between hosts (UcxNetwork), composed hierarchically.
//
// Every collective starts with the host leaders (local rank 0) exchanging fingerprints over the
// network, so ranks that called different collectives fail with Error(mismatch) on every host;
// inside a host the shared-memory steps compare fingerprints as always. The exception: a small
// broadcast from a host leader, whose root sends its fingerprint with the data and goes on (63 in
// 64 of them; the receivers compare, and the root learns of a mismatch at its next network wait).
// Reductions combine in a fixed order: first inside each host (its ranks in local order, as the
// shared-memory algorithms do), then the hosts' partial results in host order (hosts numbered by
// their lowest rank), each part of the result computed once and copied, so every rank gets the same
// bits. Averages are summed that way and divided once at the end; f16/bf16 partials are rounded
// once per host and once more across hosts (inside a host: once).
//
// The data crosses the network between host representatives (the leader, or the root on the
// root's host), except large all_reduce, all_gather, reduce_scatter and broadcast where every
// host has the same number of ranks and each rank has network devices of its own
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
#include "coll/op_desc.h"
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

// A small broadcast or scatter from a host leader, and a small reduce or gather, is acknowledged
// (the leaders wait for each other's fingerprints) only where its sequence number is a multiple
// of this; in between a broadcast's or scatter's root sends and goes on, like MPI_Bcast's eager
// root, and so do a reduce's or gather's senders, like MPI_Reduce's and MPI_Gather's
// (across_hosts.cc: broadcast_one_round, reduce_one_round, gather_one_round,
// scatter_unacknowledged). Every other collective, and every
// this-many-th operation, makes the leaders wait for each other, so no leader runs more than this
// many operations ahead of another, and what waits for a late receiver stays bounded (this many
// messages of at most kNetworkPackedBytes from each sender). Measured on broadcast, 8 B .. 512 B
// (docs/fabric.md): 2 emulated hosts of one rank, 10.0-10.9 us a broadcast with every one
// acknowledged, 7.1-10.1 with one in 16, 7.0-8.1 with one in 64; 4 hosts of one rank (4 ranks on
// 2 cores), 85-109, 31-48 and 20-45 us.
inline constexpr uint64_t kAcknowledgedEvery = 64;

// The small broadcasts, reduces, gathers and scatters whose leaders did not wait for each other
// (kAcknowledgedEvery), folded into one digest that each leader sends with its next fingerprint,
// so leaders that disagreed on one of them (on its root, say, where nobody received anything
// unexpected) fail with a mismatch at the next collective in which the leaders compare calls.
class UncomparedCalls {
 public:
  void add(const transport::Fingerprint& call);
  // The digest of the calls added since the last take(), and a fresh start.
  uint64_t take();

 private:
  uint64_t digest_ = 0;
};

struct HostGroup {
  transport::ShmFabric& local;     // this host's ranks, numbered by their local rank
  transport::UcxNetwork& network;  // every rank on another host, by communicator rank
  const topo::HostMap& hosts;
  int rank;                     // this rank in the communicator
  HostScratch& scratch;         // the communicator's, reused across its collectives
  UncomparedCalls& uncompared;  // the communicator's (leaders' only)
};

// Runs the collective `desc` (validated; not send/recv) as operation `sequence`.
void run_across_hosts(const HostGroup& group, const OpDesc& desc, uint64_t sequence,
                      const transport::WaitContext& ctx, const CollectiveTuning& tuning);

}  // namespace tpf::coll
