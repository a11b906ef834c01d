// Predicts collectives of groups of GPUs on a cluster: closed-form alpha-beta costs per link class
// (coll/alpha_beta.h, the runtime's own model) for the scale-up domain, and for steps that cross
// the network a link class whose bandwidth comes from the flow-level model: every concurrent
// group's flows routed through the fabric and shared max-min. Results are cached per group shape,
// so a layout search pays for each network solve once.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "coll/alpha_beta.h"
#include "plan/cluster.h"
#include "plan/fabric_topology.h"
#include "plan/routing.h"

namespace tpf::plan {

// A communication group and all its concurrent copies: GPU g (global index, node-major) belongs
// to the group {base + k * stride : k < size}; every GPU is in exactly one copy. This is the shape
// of a TP, DP or PP group in a mixed-radix rank layout.
struct GroupShape {
  int size = 1;
  int stride = 1;
  auto key() const { return std::tie(size, stride); }
  bool operator<(const GroupShape& other) const { return key() < other.key(); }
};

// Which step of a collective a network phase is: every member sends to the next one of its ring
// (ring), or not the last to the first (chain: pipeline p2p); or, for the three-level
// hierarchy of a rail-optimized network, the ring among the nodes of one rail group (leaf-local)
// or the ring across rail groups (through the spine); or one step of a pairwise all-to-all
// (every node block sends to the block `shift` further on).
enum class PhaseKind { ring, chain, within_rail_group, across_rail_groups, shift };

// How the members of a group sit on nodes, the same for every copy or not.
struct GroupPlacement {
  bool regular = true;  // every copy: node blocks of `per_node` consecutive members
  int per_node = 1;     // members per node block (1 when irregular)
  int nodes = 1;        // node blocks per copy
  // Three-level hierarchy (rail-optimized networks): node blocks per rail group, the same in
  // every rail group the copy touches; 0 when the copy's nodes do not split evenly.
  int nodes_per_rail_group = 0;
};

// How the network treats one step of a collective (all copies of the group at once).
struct NetworkPhase {
  int transfers = 0;         // NIC-to-NIC transfers (all copies of the group)
  double min_rate_gbps = 0;  // slowest transfer's share, GB/s (its queue pairs together)
  double mean_rate_gbps = 0;
  double nic_gbps = 0;  // what one transfer would get alone (achievable NIC rate)
  // The most traffic one switch-to-switch link carries, in transfers' worth (a transfer split
  // over 4 queue pairs counts 1/4 per piece): how badly hashing collided. 1 = no collision.
  double max_link_load = 0;
  double latency_us = 0;  // of the longest path
};

struct CollectiveEstimate {
  double us = 0;
  std::string algorithm;  // e.g. "ring", "hierarchical(ring)", "hierarchical-3(tree)"
  double busbw_gbps = 0;  // nccl-tests bus bandwidth
  bool crosses_network = false;
  NetworkPhase network;  // valid when crosses_network
};

class CollectivePlanner {
 public:
  explicit CollectivePlanner(const ClusterSpec& cluster);

  const ClusterSpec& cluster() const { return cluster_; }
  const FabricTopology& topology() const { return *topology_; }

  // The scale-up domain's link class (NVLink through NVSwitch).
  coll::LinkClass scale_up_link() const;
  // The network link class a ring step of `group` sees (bandwidth from the flow model).
  // Routed and solved once per (group, kind), then cached. Throws Error(invalid_argument) if
  // failures leave some transfer no capacity at all.
  // `shift` is the distance of a PhaseKind::shift step (ignored by the other kinds).
  const NetworkPhase& network_phase(const GroupShape& group, PhaseKind kind = PhaseKind::ring,
                                    int shift = 1);
  // The NIC-to-NIC transfers of that step, all copies of the group (what network_phase routes).
  std::vector<Transfer> phase_transfers(const GroupShape& group, PhaseKind kind,
                                        int shift = 1) const;
  GroupPlacement placement(const GroupShape& group) const;

  // The cheapest algorithm for `op` of `bytes` (nccl-tests message size) in `group`.
  CollectiveEstimate estimate(coll::Collective op, double bytes, const GroupShape& group);
  // Every algorithm that applies, cheapest first.
  std::vector<CollectiveEstimate> estimate_all(coll::Collective op, double bytes,
                                               const GroupShape& group);

 private:
  ClusterSpec cluster_;
  std::unique_ptr<FabricTopology> topology_;
  std::vector<double> capacity_;  // GB/s of every link, 0 where failed: what max-min shares
  coll::LinkClass network_link(const NetworkPhase& phase) const;
  GroupPlacement compute_placement(const GroupShape& group) const;
  // Whether GPUs send through their node's NIC on the receiver's rail (NCCL's PXN): where the
  // cluster allows it, rails are what the network is built of, and every GPU has a NIC.
  bool pxn_active() const;
  // An all-to-all whose group crosses nodes (`phase`: its first step, for the report).
  double network_all_to_all_us(double bytes, const GroupShape& group);
  std::map<std::tuple<GroupShape, PhaseKind, int>, NetworkPhase> phases_;
  mutable std::map<GroupShape, GroupPlacement> placements_;  // O(GPUs) each: cached
};

}  // namespace tpf::plan
