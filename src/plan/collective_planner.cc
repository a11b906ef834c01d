#include "plan/collective_planner.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "plan/max_min.h"
#include "plan/routing.h"
#include "tpf/error.h"

namespace tpf::plan {
namespace {

using coll::CollectiveOp;

bool is_network_algorithm(coll::Algorithm algorithm) {
  // Across nodes NCCL runs rings and trees; one-shot and two-shot need every peer's memory
  // mapped, which only the scale-up domain offers.
  return algorithm == coll::Algorithm::ring || algorithm == coll::Algorithm::tree;
}

}  // namespace

CollectivePlanner::CollectivePlanner(const ClusterSpec& cluster)
    : cluster_(cluster), topology_(std::make_unique<FabricTopology>(cluster)) {}

coll::LinkClass CollectivePlanner::scale_up_link() const {
  coll::LinkClass link;
  link.name = cluster_.scale_up.name;
  link.alpha_us = cluster_.scale_up.latency_us;
  link.port_gbps = cluster_.scale_up.bandwidth_gbps * cluster_.scale_up.efficiency;
  // GPU reductions stream through SMs at HBM speed while the next chunk is in flight: not a
  // bottleneck next to the link (reduce_gbps 0).
  return link;
}

int CollectivePlanner::members_per_node(const GroupShape& group) const {
  // Members are base + k * stride; those sharing a node are consecutive.
  const int gpn = cluster_.gpus_per_node;
  if (group.stride >= gpn) return 1;
  return std::max(1, std::min(group.size, gpn / group.stride));
}

std::vector<Transfer> CollectivePlanner::phase_transfers(const GroupShape& group,
                                                         bool chain) const {
  const int total = cluster_.total_gpus();
  const int block = group.size * group.stride;
  if (group.size < 1 || group.stride < 1 || total % block != 0) {
    throw Error(ErrorCode::invalid_argument, "group of " + std::to_string(group.size) +
                                                 " GPUs at stride " + std::to_string(group.stride) +
                                                 " does not tile " + std::to_string(total) +
                                                 " GPUs");
  }
  const int gpn = cluster_.gpus_per_node, nics = cluster_.nics_per_node;
  // The NICs a GPU sends through: its own share when it has several, else the one it shares.
  auto nics_of = [&](int gpu, std::vector<int>& out) {
    const int node = gpu / gpn, local = gpu % gpn;
    out.clear();
    if (nics >= gpn) {
      for (int i = 0; i < nics / gpn; ++i) out.push_back(node * nics + local * (nics / gpn) + i);
    } else {
      out.push_back(node * nics + local / (gpn / nics));
    }
  };
  const int per_node = members_per_node(group);
  const int node_blocks = group.size / per_node;
  std::vector<Transfer> transfers;
  std::vector<int> src_nics, dst_nics;
  for (int outer = 0; outer < total / block; ++outer) {
    for (int inner = 0; inner < group.stride; ++inner) {
      const int base = outer * block + inner;
      // Slot j of node block b is member b * per_node + j; each slot rings over the blocks on
      // its own NIC (NCCL's one channel per NIC; the hierarchical algorithm's inter-node step).
      for (int b = 0; b < node_blocks; ++b) {
        if (chain && b + 1 == node_blocks) break;
        const int next = (b + 1) % node_blocks;
        if (next == b) break;
        for (int j = 0; j < per_node; ++j) {
          const int src = base + (b * per_node + j) * group.stride;
          const int dst = base + (next * per_node + j) * group.stride;
          if (src / gpn == dst / gpn) continue;  // same node: NVLink, not the network
          nics_of(src, src_nics);
          nics_of(dst, dst_nics);
          for (size_t i = 0; i < src_nics.size(); ++i) {
            transfers.push_back({src_nics[i], dst_nics[i % dst_nics.size()], 1.0});
          }
        }
      }
    }
  }
  return transfers;
}

const NetworkPhase& CollectivePlanner::network_phase(const GroupShape& group, bool chain) {
  auto key = std::make_pair(group, chain);
  if (auto found = phases_.find(key); found != phases_.end()) return found->second;
  NetworkPhase phase;
  const int gpn = cluster_.gpus_per_node, nics = cluster_.nics_per_node;
  // What one GPU's transfer would get alone: its NICs (or its share of a shared NIC).
  const double nic_rate = cluster_.nic_gbps() * cluster_.network.efficiency;
  phase.nic_gbps = nics >= gpn ? nic_rate * (nics / gpn) : nic_rate / (gpn / nics);
  std::vector<Transfer> transfers = phase_transfers(group, chain);
  phase.transfers = static_cast<int>(transfers.size());
  if (!transfers.empty()) {
    std::vector<SubFlow> subflows = route_transfers(*topology_, cluster_.routing, transfers);
    std::vector<double> capacity;
    capacity.reserve(topology_->links().size());
    for (const FabricLink& link : topology_->links())
      capacity.push_back(link.failed ? 0 : link.gbps);
    std::vector<PathFlow> paths;
    paths.reserve(subflows.size());
    for (const SubFlow& s : subflows) paths.push_back(s.path);
    std::vector<double> rates = max_min_rates(capacity, paths);
    // A transfer ends with its slowest piece: rate = bytes / max(piece bytes / piece rate).
    std::vector<double> slowest(transfers.size(), 0.0);
    for (size_t i = 0; i < subflows.size(); ++i) {
      const SubFlow& s = subflows[i];
      const double seconds_per_byte = s.path.bytes / transfers[s.transfer].bytes / rates[i];
      slowest[s.transfer] = std::max(slowest[s.transfer], seconds_per_byte);
    }
    // NICs of one GPU run side by side when a GPU has several.
    const int nics_per_gpu = std::max(1, nics / gpn);
    phase.min_rate_gbps = std::numeric_limits<double>::infinity();
    double sum = 0;
    for (size_t t = 0; t < transfers.size(); ++t) {
      const double rate = nics_per_gpu / slowest[t];
      phase.min_rate_gbps = std::min(phase.min_rate_gbps, rate);
      sum += rate;
    }
    phase.mean_rate_gbps = sum / transfers.size();
    std::vector<double> load(topology_->links().size(), 0.0);
    for (size_t i = 0; i < subflows.size(); ++i) {
      const PathFlow& path = subflows[i].path;
      const double share = path.bytes / transfers[subflows[i].transfer].bytes;
      double latency = cluster_.nic_latency_us;
      // Skip the NIC links at both ends: collisions happen between switches.
      for (size_t hop = 0; hop < path.links.size(); ++hop) {
        const int link = path.links[hop];
        latency += topology_->links()[link].latency_us;
        if (hop == 0 || hop + 1 == path.links.size() || topology_->links()[link].trunk) continue;
        load[link] += share;
        phase.max_link_load = std::max(phase.max_link_load, load[link]);
      }
      phase.latency_us = std::max(phase.latency_us, latency);
    }
  }
  return phases_.emplace(key, phase).first->second;
}

std::vector<CollectiveEstimate> CollectivePlanner::estimate_all(CollectiveOp op, double bytes,
                                                                const GroupShape& group) {
  if (!(bytes >= 0)) {
    throw Error(ErrorCode::invalid_argument, "collective size must be >= 0 bytes");
  }
  std::vector<CollectiveEstimate> estimates;
  const double factor = coll::bus_bandwidth_factor(op, group.size);
  auto add = [&](std::string name, double us, bool network, const NetworkPhase& phase) {
    CollectiveEstimate e;
    e.us = us;
    e.algorithm = std::move(name);
    e.busbw_gbps = us > 0 ? bytes / (us * 1e3) * factor : 0;
    e.crosses_network = network;
    e.network = phase;
    estimates.push_back(e);
  };
  if (group.size == 1) {
    add("none", 0, false, {});
    return estimates;
  }
  const bool chain = op == CollectiveOp::send_recv;
  const NetworkPhase& phase = network_phase(group, chain);
  const coll::LinkClass up = scale_up_link();
  if (phase.transfers == 0) {
    const int n = chain ? 2 : group.size;
    for (const auto& a : coll::rank_algorithms(op, bytes, n, up)) {
      add(coll::to_string(a.algorithm), a.us, false, phase);
    }
    return estimates;
  }
  coll::LinkClass net;
  net.name = "network";
  net.alpha_us = phase.latency_us;
  net.port_gbps = phase.min_rate_gbps;
  if (chain) {
    add("p2p", *coll::predict_us(op, coll::Algorithm::one_shot, bytes, 2, net), true, phase);
    return estimates;
  }
  // A flat ring or tree over every member runs one channel per member of a node, each through
  // its own NIC: the slowest hop is min(NVLink, channels x one NIC's share).
  const int per_node = members_per_node(group);
  coll::LinkClass flat = net;
  flat.alpha_us = std::max(net.alpha_us, up.alpha_us);
  flat.port_gbps = std::min(up.port_gbps, per_node * phase.min_rate_gbps);
  for (const auto& a : coll::rank_algorithms(op, bytes, group.size, flat)) {
    if (is_network_algorithm(a.algorithm)) add(coll::to_string(a.algorithm), a.us, true, phase);
  }
  if (op == CollectiveOp::all_reduce && per_node > 1) {
    const int nodes = group.size / per_node;
    add("hierarchical", coll::predict_hierarchical_all_reduce_us(bytes, per_node, up, nodes, net),
        true, phase);
  }
  if (estimates.empty()) {
    throw Error(ErrorCode::invalid_argument,
                std::string("no algorithm runs ") + coll::to_string(op) + " across nodes");
  }
  std::stable_sort(
      estimates.begin(), estimates.end(),
      [](const CollectiveEstimate& a, const CollectiveEstimate& b) { return a.us < b.us; });
  return estimates;
}

CollectiveEstimate CollectivePlanner::estimate(CollectiveOp op, double bytes,
                                               const GroupShape& group) {
  return estimate_all(op, bytes, group).front();
}

}  // namespace tpf::plan
