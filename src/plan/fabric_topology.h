// The scale-out network of a cluster as a graph of directed links: NICs, leaf switches and one or
// two tiers above (leaf-spine, or a fat-tree of pods with aggregation and core switches), one
// copy per plane, rail-optimized or not, with oversubscribed leaves and failed cables. Routing
// (routing.h) turns NIC-to-NIC transfers into paths over these links.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plan/cluster.h"

namespace tpf::plan {

// A directed link. Trunks are virtual links standing for all surviving links of one switch in one
// direction (what a fluid, sprayed flow crosses); their capacity is the sum of their members'.
struct FabricLink {
  double gbps = 0;  // achievable GB/s (nominal times the network efficiency)
  double latency_us = 0;
  bool failed = false;
  bool trunk = false;
};

class FabricTopology {
 public:
  // Throws Error(invalid_argument) when the network cannot hold the cluster's NICs (e.g. more
  // NICs than a 3-tier fat-tree of this radix connects) or a named failed link does not exist.
  explicit FabricTopology(const ClusterSpec& cluster);
  ~FabricTopology();
  FabricTopology(FabricTopology&&) noexcept;

  int tiers() const { return tiers_; }
  int planes() const { return planes_; }
  int nic_count() const { return nics_; }     // nodes * nics_per_node
  int leaf_count() const { return leaves_; }  // per plane
  bool rail_optimized() const { return rail_optimized_; }
  // Rail-optimized: nodes whose NIC i share leaf i (a rail group); their traffic on one rail
  // never leaves the leaf.
  int rail_group_nodes() const { return rail_group_nodes_; }
  int leaf_of(int nic, int plane) const;
  int leaf_uplinks() const { return leaf_up_; }

  const std::vector<FabricLink>& links() const { return links_; }
  std::string link_name(int link) const;  // "leaf3->spine7", "nic12.3->leaf1", ...
  std::string nic_name(int nic) const;    // "nic<node>.<index>"
  int failed_link_count() const;          // directed links out of service

  // Candidate next hops for routing, per plane. Each is a directed link id; failed links are
  // absent. An empty list means the destination cannot be reached that way.
  int nic_up(int nic, int plane) const;
  int nic_down(int nic, int plane) const;
  const std::vector<int>& leaf_up_links(int plane, int leaf) const;
  // The switch a leaf-up link reaches (spine in 2 tiers, aggregation switch in 3), and back down.
  int upper_of_leaf_link(int link) const;
  int spine_down_to_leaf(int plane, int spine, int leaf) const;  // -1 if failed or absent
  // 3 tiers: pods, the aggregation switch's links to cores, and cores down to a pod's aggregation.
  int pod_of_leaf(int leaf) const { return leaf / leaves_per_pod_; }
  const std::vector<int>& agg_up_links(int plane, int agg) const;
  int core_of_agg_link(int link) const;
  int core_down_to_pod(int plane, int core, int pod) const;  // -1 if failed or absent
  // Fluid (sprayed) paths: trunks of all surviving links of a leaf / pod in one direction.
  int leaf_up_trunk(int plane, int leaf) const;
  int leaf_down_trunk(int plane, int leaf) const;
  int pod_up_trunk(int plane, int pod) const;
  int pod_down_trunk(int plane, int pod) const;

  // A one-line description: tiers, switches, radix, links, failures.
  std::string summary() const;

 private:
  struct Plane;  // the link ids of one plane
  // What a link joins, kept compact (a 100,000-GPU fabric has about 600,000 links); names are
  // made from it on demand.
  enum class End : uint8_t { nic, leaf, upper, core, trunk };
  struct LinkEnds {
    End from_kind, to_kind;
    uint8_t plane;
    int32_t from, to;
  };
  int add_link(double gbps, double latency_us, LinkEnds ends);
  std::string end_name(End kind, int plane, int index) const;
  void build_plane(int plane);
  void fail_links(const FailureSpec& failures);
  void drop_failed_candidates();
  void build_trunks();

  int tiers_ = 2, planes_ = 1, nics_ = 0, nics_per_node_ = 1;
  int leaves_ = 0, leaf_down_ = 0, leaf_up_ = 0, leaves_per_pod_ = 1, pods_ = 1;
  int uppers_ = 0, cores_ = 0, core_links_per_agg_ = 0;
  bool rail_optimized_ = true;
  int rail_group_nodes_ = 1;
  double link_gbps_ = 0, link_latency_us_ = 0;
  std::vector<FabricLink> links_;
  std::vector<LinkEnds> ends_;
  std::vector<int> reverse_;        // the other direction of a switch-to-switch cable, else -1
  std::vector<int> upper_of_link_;  // leaf-up link -> the upper switch it reaches, else -1
  std::vector<int> core_of_link_;   // aggregation-up link -> core, else -1
  std::vector<Plane> plane_links_;
};

}  // namespace tpf::plan
