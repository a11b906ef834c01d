// The collective algorithms over the in-memory fabric. Each runs one whole operation on the
// calling thread; all ranks must call the same one (the fingerprint check enforces it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "coll/cost_model.h"
#include "coll/network_cost.h"
#include "coll/op_desc.h"
#include "transport/shm_fabric.h"

namespace tpf::coll {

// What the algorithm choices may be told by the communicator's settings (comm/settings.h).
struct CollectiveTuning {
  // Largest per-rank message of the eager path, at most ShmFabric::kEagerCapacity; 0 = off.
  size_t eager_max_bytes = transport::ShmFabric::kEagerCapacity;
  std::optional<AllReduceAlgorithm> forced_all_reduce;  // where it applies
  ShmLinkCost link_cost;                                // prices the automatic choice
  // Across hosts (across_hosts.cc): the network algorithm of all_reduce and broadcast.
  std::optional<NetworkAlgorithm> forced_network;  // TPF_NET_ALGO
  NetworkLinkCost network_cost;                    // prices the automatic choice
};

// Runs the collective `desc` (already validated) as operation number `sequence` of the
// communicator. Point-to-point messages go through P2pTransfer (p2p_transfer.h) instead.
void run_operation(transport::ShmFabric& fabric, const OpDesc& desc, uint64_t sequence,
                   const transport::WaitContext& ctx, const CollectiveTuning& tuning);
// The same, the ranks comparing `call` at every step instead of desc's own fingerprint: a host's
// part of a collective across hosts compares the whole call, whose every field its host-mates
// must agree on, where its steps inside the host may not show a difference (a reduce's root on
// another host and the host's leader both make the host's reduce one to the leader).
void run_operation(transport::ShmFabric& fabric, const OpDesc& desc,
                   const transport::Fingerprint& call, const transport::WaitContext& ctx,
                   const CollectiveTuning& tuning);

// Reductions (all_reduce, reduce, reduce_scatter): reduce_algorithms.cc.
void all_reduce_one_shot(transport::ShmFabric& fabric, const OpDesc& desc,
                         const transport::Fingerprint& fp, const transport::WaitContext& ctx);
// Pipelined reduce-scatter + all-gather. With `root_only`, only desc.root receives (reduce).
void all_reduce_two_shot(transport::ShmFabric& fabric, const OpDesc& desc, bool root_only,
                         const transport::Fingerprint& fp, const transport::WaitContext& ctx);
void reduce_scatter(transport::ShmFabric& fabric, const OpDesc& desc,
                    const transport::Fingerprint& fp, const transport::WaitContext& ctx);

// Data movement (broadcast, all_gather, all_to_all, gather, scatter, barrier): movement.cc.
void broadcast(transport::ShmFabric& fabric, const OpDesc& desc, const transport::Fingerprint& fp,
               const transport::WaitContext& ctx);
void all_gather(transport::ShmFabric& fabric, const OpDesc& desc, const transport::Fingerprint& fp,
                const transport::WaitContext& ctx);
void all_to_all(transport::ShmFabric& fabric, const OpDesc& desc, const transport::Fingerprint& fp,
                const transport::WaitContext& ctx);
void gather(transport::ShmFabric& fabric, const OpDesc& desc, const transport::Fingerprint& fp,
            const transport::WaitContext& ctx);
void scatter(transport::ShmFabric& fabric, const OpDesc& desc, const transport::Fingerprint& fp,
             const transport::WaitContext& ctx);
void barrier(transport::ShmFabric& fabric, const transport::Fingerprint& fp,
             const transport::WaitContext& ctx);

// Small collectives over eager messages (eager.cc): all_reduce, all_gather, reduce_scatter,
// broadcast and scatter whose per-rank message is at most `eager_max_bytes`.
bool fits_eager(const OpDesc& desc, int nranks, size_t eager_max_bytes);
void run_eager(transport::ShmFabric& fabric, const OpDesc& desc, const transport::Fingerprint& fp,
               const transport::WaitContext& ctx);

}  // namespace tpf::coll
