#include "plan/routing.h"

#include <limits>

#include "tpf/error.h"

namespace tpf::plan {
namespace {

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

// The header fields an ECMP hash sees: the NIC pair, the queue pair (its UDP source port under
// RoCE) and the plane.
uint64_t flow_hash(uint64_t seed, int src, int dst, int qp, int plane) {
  uint64_t h = mix(seed ^ 0x5bd1e995ULL);
  h = mix(h ^ static_cast<uint64_t>(src));
  h = mix(h ^ (static_cast<uint64_t>(dst) << 20));
  h = mix(h ^ (static_cast<uint64_t>(qp) << 40));
  return mix(h ^ (static_cast<uint64_t>(plane) << 56));
}

class Router {
 public:
  Router(const FabricTopology& topology, const RoutingSpec& routing)
      : topo_(topology), routing_(routing), load_(topology.links().size(), 0.0) {}

  // The links of one piece of a transfer, or an error if failures cut the pair off.
  std::vector<int> route(int src, int dst, int qp, int plane, double bytes) {
    std::vector<int> path;
    const int src_leaf = topo_.leaf_of(src, plane), dst_leaf = topo_.leaf_of(dst, plane);
    path.push_back(topo_.nic_up(src, plane));
    if (src_leaf != dst_leaf) {
      if (routing_.mode == RoutingMode::spray) {
        spray(plane, src_leaf, dst_leaf, path);
      } else {
        hashed(src, dst, qp, plane, src_leaf, dst_leaf, path);
      }
    }
    path.push_back(topo_.nic_down(dst, plane));
    for (int link : path) load_[link] += bytes;
    return path;
  }

 private:
  // The fluid model of spraying: the transfer spreads over every surviving path, i.e. crosses
  // the trunks of its leaves (and pods).
  void spray(int plane, int src_leaf, int dst_leaf, std::vector<int>& path) const {
    const int src_pod = topo_.pod_of_leaf(src_leaf), dst_pod = topo_.pod_of_leaf(dst_leaf);
    path.push_back(topo_.leaf_up_trunk(plane, src_leaf));
    if (topo_.tiers() == 3 && src_pod != dst_pod) {
      path.push_back(topo_.pod_up_trunk(plane, src_pod));
      path.push_back(topo_.pod_down_trunk(plane, dst_pod));
    }
    path.push_back(topo_.leaf_down_trunk(plane, dst_leaf));
  }

  // ECMP (a hash picks among next hops that still reach the destination) or adaptive (the
  // least loaded of them, ties broken by the hash).
  void hashed(int src, int dst, int qp, int plane, int src_leaf, int dst_leaf,
              std::vector<int>& path) {
    const uint64_t h = flow_hash(routing_.seed, src, dst, qp, plane);
    const int src_pod = topo_.pod_of_leaf(src_leaf), dst_pod = topo_.pod_of_leaf(dst_leaf);
    const bool cross_pod = topo_.tiers() == 3 && src_pod != dst_pod;
    // Leaf tier: uplinks whose upper switch reaches the destination leaf.
    // Adaptive routing weighs the down link a choice commits to as well (within a pod the
    // upper switch fixes it); across pods the down links are weighed at the next tier.
    candidates_.clear();
    down_links_.clear();
    for (int link : topo_.leaf_up_links(plane, src_leaf)) {
      int upper = topo_.upper_of_leaf_link(link);
      if (!cross_pod) {
        const int down = topo_.spine_down_to_leaf(plane, upper, dst_leaf);
        if (down >= 0) {
          candidates_.push_back(link);
          down_links_.push_back(down);
        }
      } else if (dst_agg_reachable(plane, upper, dst_pod, dst_leaf)) {
        candidates_.push_back(link);
      }
    }
    const int up = choose(h, 1, src_leaf, down_links_);
    check_reachable(up, src, dst);
    path.push_back(up);
    const int upper = topo_.upper_of_leaf_link(up);
    int down_upper = upper;
    if (cross_pod) {
      // Aggregation tier: links to cores that reach the destination pod's aggregation switch,
      // which (same index in its pod) must reach the destination leaf.
      const int j = upper % topo_.leaf_uplinks();
      const int dst_agg = dst_pod * topo_.leaf_uplinks() + j;
      candidates_.clear();
      down_links_.clear();
      for (int link : topo_.agg_up_links(plane, upper)) {
        int core_down = topo_.core_down_to_pod(plane, topo_.core_of_agg_link(link), dst_pod);
        if (core_down >= 0) {
          candidates_.push_back(link);
          down_links_.push_back(core_down);
        }
      }
      const int core_up = choose(h, 2, upper, down_links_);
      check_reachable(core_up, src, dst);
      path.push_back(core_up);
      path.push_back(topo_.core_down_to_pod(plane, topo_.core_of_agg_link(core_up), dst_pod));
      down_upper = dst_agg;
    }
    path.push_back(topo_.spine_down_to_leaf(plane, down_upper, dst_leaf));
  }

  bool dst_agg_reachable(int plane, int agg, int dst_pod, int dst_leaf) const {
    const int dst_agg = dst_pod * topo_.leaf_uplinks() + agg % topo_.leaf_uplinks();
    if (topo_.spine_down_to_leaf(plane, dst_agg, dst_leaf) < 0) return false;
    for (int link : topo_.agg_up_links(plane, agg)) {
      if (topo_.core_down_to_pod(plane, topo_.core_of_agg_link(link), dst_pod) >= 0) return true;
    }
    return false;
  }

  // Picks among candidates_: by hash (ECMP) or by least load so far (adaptive). `switch_id`
  // salts the hash per switch unless polarisation is asked for; `paired` are the links the choice
  // also commits to further down (their load counts too).
  int choose(uint64_t h, int tier, int switch_id, const std::vector<int>& paired) {
    if (candidates_.empty()) return -1;
    const uint64_t salted =
        routing_.per_switch_hash
            ? mix(h ^ (static_cast<uint64_t>(switch_id) * 0x9e3779b97f4a7c15ULL +
                       static_cast<uint64_t>(tier)))
            : h;
    const size_t hashed = salted % candidates_.size();
    if (routing_.mode != RoutingMode::adaptive) return candidates_[hashed];
    size_t best = hashed;
    double best_load = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < candidates_.size(); ++i) {
      const size_t c = (hashed + i) % candidates_.size();
      double load = load_[candidates_[c]];
      if (!paired.empty()) load = std::max(load, load_[paired[c]]);
      if (load < best_load) {
        best_load = load;
        best = c;
      }
    }
    return candidates_[best];
  }

  void check_reachable(int link, int src, int dst) const {
    if (link >= 0) return;
    throw Error(ErrorCode::invalid_argument, "network: failed links leave no path from " +
                                                 topo_.nic_name(src) + " to " +
                                                 topo_.nic_name(dst));
  }

  const FabricTopology& topo_;
  const RoutingSpec& routing_;
  std::vector<double> load_;
  std::vector<int> candidates_;
  std::vector<int> down_links_;
};

}  // namespace

std::vector<SubFlow> route_transfers(const FabricTopology& topology, const RoutingSpec& routing,
                                     const std::vector<Transfer>& transfers) {
  Router router(topology, routing);
  // Spraying spreads every packet anyway: queue pairs change nothing, so each plane gets one piece.
  const int qps = routing.mode == RoutingMode::spray ? 1 : routing.queue_pairs;
  const int pieces = qps * topology.planes();
  std::vector<SubFlow> subflows;
  subflows.reserve(transfers.size() * pieces);
  for (size_t t = 0; t < transfers.size(); ++t) {
    const Transfer& transfer = transfers[t];
    if (transfer.src_nic < 0 || transfer.src_nic >= topology.nic_count() || transfer.dst_nic < 0 ||
        transfer.dst_nic >= topology.nic_count() || transfer.src_nic == transfer.dst_nic) {
      throw Error(ErrorCode::invalid_argument,
                  "transfer " + std::to_string(t) + ": NICs " + std::to_string(transfer.src_nic) +
                      " -> " + std::to_string(transfer.dst_nic) + " are not two NICs of " +
                      std::to_string(topology.nic_count()));
    }
    for (int plane = 0; plane < topology.planes(); ++plane) {
      for (int qp = 0; qp < qps; ++qp) {
        SubFlow piece;
        piece.transfer = static_cast<int>(t);
        piece.path.bytes = transfer.bytes / pieces;
        piece.path.links =
            router.route(transfer.src_nic, transfer.dst_nic, qp, plane, piece.path.bytes);
        subflows.push_back(std::move(piece));
      }
    }
  }
  return subflows;
}

}  // namespace tpf::plan
