#include "plan/collective_planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "plan/invalid_input.h"
#include "plan/max_min.h"
#include "plan/routing.h"
#include "tpf/error.h"

namespace tpf::plan {
namespace {

using coll::Collective;

// Across nodes NCCL runs rings and trees; one-shot and two-shot need every peer's memory
// mapped, which only the scale-up domain offers.
const std::vector<coll::Algorithm> kNetworkAlgorithms = {coll::Algorithm::ring,
                                                         coll::Algorithm::tree};

}  // namespace

CollectivePlanner::CollectivePlanner(const ClusterSpec& cluster)
    : cluster_(cluster), topology_(std::make_unique<FabricTopology>(cluster)) {
  capacity_.reserve(topology_->links().size());
  for (const FabricLink& link : topology_->links())
    capacity_.push_back(link.failed ? 0 : link.gbps);
}

coll::LinkClass CollectivePlanner::scale_up_link() const {
  coll::LinkClass link;
  link.name = cluster_.scale_up.name;
  link.alpha_us = cluster_.scale_up.latency_us;
  link.port_gbps = cluster_.scale_up.bandwidth_gbps * cluster_.scale_up.efficiency;
  // GPU reductions stream through SMs at HBM speed while the next chunk is in flight: not a
  // bottleneck next to the link (reduce_gbps 0).
  return link;
}

GroupPlacement CollectivePlanner::placement(const GroupShape& group) const {
  if (auto found = placements_.find(group); found != placements_.end()) return found->second;
  return placements_.emplace(group, compute_placement(group)).first->second;
}

GroupPlacement CollectivePlanner::compute_placement(const GroupShape& group) const {
  const long long total = cluster_.total_gpus();
  const long long block = static_cast<long long>(group.size) * group.stride;
  if (group.size < 1 || group.stride < 1 || block > total || total % block != 0) {
    invalid("group of " + std::to_string(group.size) + " GPUs at stride " +
            std::to_string(group.stride) + " does not tile the cluster's " + std::to_string(total) +
            " GPUs");
  }
  const int gpn = cluster_.gpus_per_node;
  const int rail_group = topology_->rail_group_nodes();
  GroupPlacement result;
  bool first_copy = true;
  // Members are base + k * stride. Split each copy into runs that share a node; the copy is
  // regular if every run has the same length, and the group if every copy has the same one.
  for (long long outer = 0; outer < total / block; ++outer) {
    for (int inner = 0; inner < group.stride; ++inner) {
      const long long base = outer * block + inner;
      int run = 0, runs = 0, run_length = -1;
      bool regular = true;
      long long previous_node = -1;
      std::vector<long long> nodes;
      for (int k = 0; k < group.size; ++k) {
        const long long node = (base + static_cast<long long>(k) * group.stride) / gpn;
        if (node != previous_node && k > 0) {
          regular = regular && (run_length < 0 || run == run_length);
          run_length = run;
          run = 0;
        }
        if (node != previous_node) {
          ++runs;
          nodes.push_back(node);
        }
        ++run;
        previous_node = node;
      }
      regular = regular && (run_length < 0 || run == run_length);
      if (run_length < 0) run_length = run;
      // Node blocks per rail group: the copy's nodes grouped by rail group, equal counts.
      int per_rail_group = 0;
      if (topology_->rail_optimized() && regular) {
        std::map<long long, int> count;
        for (long long node : nodes) ++count[node / rail_group];
        per_rail_group = count.begin()->second;
        for (const auto& [g, c] : count) per_rail_group = c == per_rail_group ? c : 0;
      }
      if (first_copy) {
        result = {regular, regular ? run_length : 1, runs, per_rail_group};
        first_copy = false;
      } else if (!regular || run_length != result.per_node || runs != result.nodes) {
        result.regular = false;
        result.per_node = 1;
      }
      if (per_rail_group != result.nodes_per_rail_group) result.nodes_per_rail_group = 0;
    }
  }
  if (!result.regular) result.nodes_per_rail_group = 0;
  return result;
}

std::vector<Transfer> CollectivePlanner::phase_transfers(const GroupShape& group, PhaseKind kind,
                                                         int shift) const {
  const GroupPlacement where = placement(group);
  const long long total = cluster_.total_gpus();
  const long long block = static_cast<long long>(group.size) * group.stride;
  const int gpn = cluster_.gpus_per_node, nics = cluster_.nics_per_node;
  // The NICs a GPU sends through: its own share when it has several, else the one it shares.
  auto nics_of = [&](long long gpu, std::vector<int>& out) {
    const int node = static_cast<int>(gpu / gpn), local = static_cast<int>(gpu % gpn);
    out.clear();
    if (nics >= gpn) {
      for (int i = 0; i < nics / gpn; ++i) out.push_back(node * nics + local * (nics / gpn) + i);
    } else {
      out.push_back(node * nics + local / (gpn / nics));
    }
  };
  // PXN: a GPU sends through its node's NIC on the receiver's rail (reached over NVLink), where
  // rails are what the network is built of, unless another transfer of this step already leaves
  // through that NIC and its own is free (NCCL then keeps the GPU's own NIC, across rails).
  const bool pxn = pxn_active();
  std::vector<int> sends_from_nic(pxn ? topology_->nic_count() : 0, 0);
  std::vector<Transfer> transfers;
  std::vector<int> src_nics, dst_nics;
  auto add = [&](long long src, long long dst) {
    if (src / gpn == dst / gpn) return;  // same node: NVLink, not the network
    nics_of(src, src_nics);
    nics_of(dst, dst_nics);
    for (size_t i = 0; i < src_nics.size(); ++i) {
      const int receiver = dst_nics[i % dst_nics.size()];
      int sender = src_nics[i];
      if (pxn) {
        const int on_rail = static_cast<int>(src / gpn * nics + receiver % nics);
        if (sends_from_nic[on_rail] == 0 || sends_from_nic[sender] > 0) sender = on_rail;
        ++sends_from_nic[sender];
      }
      transfers.push_back({sender, receiver, 1.0});
    }
  };
  const int per_node = where.per_node;
  const int nodes = where.regular ? where.nodes : group.size;
  const int per_group = where.nodes_per_rail_group;
  if ((kind == PhaseKind::within_rail_group || kind == PhaseKind::across_rail_groups) &&
      per_group == 0) {
    invalid("no three-level hierarchy for a group of " + std::to_string(group.size) +
            " at stride " + std::to_string(group.stride) +
            ": its nodes do not split evenly over rail groups");
  }
  // The next node block of block b for each kind (-1: b sends nothing in this step).
  auto next_block = [&](int b) {
    switch (kind) {
      case PhaseKind::ring: return (b + 1) % nodes;
      case PhaseKind::chain: return b + 1 < nodes ? b + 1 : -1;
      case PhaseKind::within_rail_group: {  // ring among the blocks of b's rail group
        const int first = b / per_group * per_group;
        return first + (b - first + 1) % per_group;
      }
      case PhaseKind::across_rail_groups:  // same position in the next rail group
        return (b + per_group) % nodes;
      case PhaseKind::shift: return (b + shift) % nodes;
    }
    return -1;
  };
  for (long long outer = 0; outer < total / block; ++outer) {
    for (int inner = 0; inner < group.stride; ++inner) {
      const long long base = outer * block + inner;
      // Slot j of node block b is member b * per_node + j; each slot rings over the blocks on
      // its own NIC (NCCL's one channel per NIC; the hierarchical algorithm's inter-node step).
      // An irregular group is one ring over its members, crossing nodes where it must.
      for (int b = 0; b < nodes; ++b) {
        const int next = next_block(b);
        if (next < 0 || next == b) continue;
        for (int j = 0; j < per_node; ++j) {
          add(base + static_cast<long long>(b * per_node + j) * group.stride,
              base + static_cast<long long>(next * per_node + j) * group.stride);
        }
      }
    }
  }
  return transfers;
}

bool CollectivePlanner::pxn_active() const {
  return cluster_.network.pxn && topology_->rail_optimized() &&
         cluster_.nics_per_node >= cluster_.gpus_per_node;
}

coll::LinkClass CollectivePlanner::network_link(const NetworkPhase& phase) const {
  coll::LinkClass net;
  net.name = "network";
  net.alpha_us = phase.latency_us;
  net.port_gbps = phase.min_rate_gbps;
  return net;
}

const NetworkPhase& CollectivePlanner::network_phase(const GroupShape& group, PhaseKind kind,
                                                     int shift) {
  if (kind != PhaseKind::shift) shift = 1;
  auto key = std::make_tuple(group, kind, shift);
  if (auto found = phases_.find(key); found != phases_.end()) return found->second;
  NetworkPhase phase;
  const int gpn = cluster_.gpus_per_node, nics = cluster_.nics_per_node;
  // What one GPU's transfer would get alone: its NICs (or its share of a shared NIC).
  const double nic_rate = cluster_.nic_gbps() * cluster_.network.efficiency;
  phase.nic_gbps = nics >= gpn ? nic_rate * (nics / gpn) : nic_rate / (gpn / nics);
  std::vector<Transfer> transfers = phase_transfers(group, kind, shift);
  phase.transfers = static_cast<int>(transfers.size());
  if (!transfers.empty()) {
    std::vector<SubFlow> subflows = route_transfers(*topology_, cluster_.routing, transfers);
    std::vector<PathFlow> paths;
    paths.reserve(subflows.size());
    for (const SubFlow& s : subflows) paths.push_back(s.path);
    std::vector<double> rates = max_min_rates(capacity_, paths);
    // A transfer ends with its slowest piece: rate = bytes / max(piece bytes / piece rate).
    std::vector<double> slowest(transfers.size(), 0.0);
    for (size_t i = 0; i < subflows.size(); ++i) {
      const SubFlow& s = subflows[i];
      if (!(rates[i] > 0)) {
        const Transfer& t = transfers[s.transfer];
        invalid("network: failed links leave no capacity from " + topology_->nic_name(t.src_nic) +
                " to " + topology_->nic_name(t.dst_nic));
      }
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

// Pairwise exchange, as NCCL runs an all-to-all: in step j (of nodes - 1) every node block sends
// to the block j further on, slot i to slot i (with PXN the data of a node's GPUs for slot i of
// the destination first gathers over NVLink at its own slot i, so each transfer carries per_node
// pieces of bytes / n and stays on its rail). Every step is routed and shared max-min like a
// ring step; beyond kSolvedShifts steps, evenly spaced ones stand for the rest. The pieces for
// the node's own GPUs go over NVLink meanwhile.
double CollectivePlanner::network_all_to_all_us(double bytes, const GroupShape& group) {
  constexpr int kSolvedShifts = 8;
  const GroupPlacement where = placement(group);
  const int nodes = where.regular ? where.nodes : group.size;
  const int per_node = where.regular ? where.per_node : 1;
  const int steps = nodes - 1;
  const int solved = std::min(steps, kSolvedShifts);
  const double piece = bytes * per_node / group.size;
  double network_us = 0;
  for (int i = 0; i < solved; ++i) {
    const int shift = 1 + static_cast<int>(static_cast<long long>(i) * steps / solved);
    const NetworkPhase& phase = network_phase(group, PhaseKind::shift, shift);
    if (phase.transfers == 0) continue;  // an irregular group's step that stays in its nodes
    network_us += phase.latency_us + piece / (phase.min_rate_gbps * 1e3);
  }
  network_us *= static_cast<double>(steps) / solved;
  const coll::LinkClass up = scale_up_link();
  const double local_us =
      per_node > 1 ? up.alpha_us + bytes * (per_node - 1) / group.size / (up.port_gbps * 1e3) : 0;
  return std::max(network_us, local_us);
}

std::vector<CollectiveEstimate> CollectivePlanner::estimate_all(Collective op, double bytes,
                                                                const GroupShape& group) {
  if (!(bytes >= 0) || !std::isfinite(bytes)) invalid("collective size must be >= 0 bytes");
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
  const bool chain = op == Collective::send_recv;
  const NetworkPhase& phase = network_phase(group, chain ? PhaseKind::chain : PhaseKind::ring);
  const coll::LinkClass up = scale_up_link();
  if (phase.transfers == 0) {
    const int n = chain ? 2 : group.size;
    for (const auto& a : coll::rank_algorithms(op, bytes, n, up)) {
      add(coll::to_string(a.algorithm), a.us, false, phase);
    }
    return estimates;
  }
  const coll::LinkClass net = network_link(phase);
  if (chain) {
    add("p2p", *coll::predict_us(op, coll::Algorithm::one_shot, bytes, 2, net), true, phase);
    return estimates;
  }
  if (op == Collective::all_to_all) {
    add(pxn_active() ? "pairwise(pxn)" : "pairwise", network_all_to_all_us(bytes, group), true,
        phase);
    return estimates;
  }
  // A flat ring or tree over every member runs one channel per member of a node, each through
  // its own NIC: the slowest hop is min(NVLink, channels x one NIC's share).
  const GroupPlacement where = placement(group);
  coll::LinkClass flat = net;
  flat.alpha_us = std::max(net.alpha_us, up.alpha_us);
  flat.port_gbps = std::min(up.port_gbps, where.per_node * phase.min_rate_gbps);
  for (const auto& a : coll::rank_algorithms(op, bytes, group.size, flat, kNetworkAlgorithms)) {
    add(coll::to_string(a.algorithm), a.us, true, phase);
  }
  if (op == Collective::all_reduce && where.regular && where.per_node > 1) {
    coll::Algorithm outer{};
    const double us = coll::predict_hierarchical_all_reduce_us(
        bytes, {{where.per_node, up, {}}, {where.nodes, net, kNetworkAlgorithms}}, &outer);
    add(std::string("hierarchical(") + coll::to_string(outer) + ")", us, true, phase);
  }
  // Scale-up, then the nodes of a rail group (leaf-local), then across rail groups (spine).
  const int per_group = where.nodes_per_rail_group;
  if (op == Collective::all_reduce && per_group > 1 && per_group < where.nodes) {
    const coll::LinkClass leaf = network_link(network_phase(group, PhaseKind::within_rail_group));
    const coll::LinkClass spine = network_link(network_phase(group, PhaseKind::across_rail_groups));
    std::vector<coll::HierarchyLevel> levels;
    if (where.per_node > 1) levels.push_back({where.per_node, up, {}});
    levels.push_back({per_group, leaf, kNetworkAlgorithms});
    levels.push_back({where.nodes / per_group, spine, kNetworkAlgorithms});
    coll::Algorithm outer{};
    const double us = coll::predict_hierarchical_all_reduce_us(bytes, levels, &outer);
    add(std::string("hierarchical-3(") + coll::to_string(outer) + ")", us, true, phase);
  }
  std::stable_sort(
      estimates.begin(), estimates.end(),
      [](const CollectiveEstimate& a, const CollectiveEstimate& b) { return a.us < b.us; });
  return estimates;
}

CollectiveEstimate CollectivePlanner::estimate(Collective op, double bytes,
                                               const GroupShape& group) {
  return estimate_all(op, bytes, group).front();
}

}  // namespace tpf::plan
