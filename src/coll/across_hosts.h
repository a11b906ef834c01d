// The collectives of a communicator whose ranks are on several hosts: shared memory inside each
// host (the host's own ShmFabric over its local ranks, with the single-host algorithms), the
// network between hosts (UcxNetwork), composed hierarchically.
//
// Every collective starts with the host leaders (local rank 0) exchanging fingerprints over the
// network, so ranks that called different collectives fail with Error(mismatch) on every host;
// inside a host the shared-memory steps compare fingerprints as always. Reductions combine in a
// fixed order: first inside each host (its ranks in local order, as the shared-memory algorithms
// do), then the hosts' partial results in host order (hosts numbered by their lowest rank), each
// part of the result computed once and copied, so every rank gets the same bits. Averages are
// summed that way and divided once at the end; f16/bf16 partials are rounded once per host and
// once more across hosts (inside a host: once).
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

struct HostGroup {
  transport::ShmFabric& local;     // this host's ranks, numbered by their local rank
  transport::UcxNetwork& network;  // every rank on another host, by communicator rank
  const topo::HostMap& hosts;
  int rank;              // this rank in the communicator
  HostScratch& scratch;  // the communicator's, reused across its collectives
};

// Runs the collective `desc` (validated; not send/recv) as operation `sequence`.
void run_across_hosts(const HostGroup& group, const OpDesc& desc, uint64_t sequence,
                      const transport::WaitContext& ctx, const CollectiveTuning& tuning);

}  // namespace tpf::coll
