// Collective predictions: the one alpha-beta model shared by the runtime and the planner, the
// published NCCL bus bandwidths on DGX-H100 (NVLink and 400 Gb/s InfiniBand), network effects of
// rank placement and routing, and cluster files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <vector>

#include "coll/alpha_beta.h"
#include "coll/cost_model.h"
#include "comm/settings.h"
#include "plan/cluster.h"
#include "plan/collective_planner.h"
#include "plan/layout.h"
#include "plan/layout_search.h"
#include "plan/model_spec.h"
#include "plan/routing.h"
#include "plan/step_model.h"
#include "tpf/error.h"

namespace tpf::plan {
namespace {

using coll::Algorithm;
using coll::Collective;

constexpr double kGiB = 1024.0 * 1024 * 1024;

TEST(AlphaBeta, SharedMemoryModelKeepsItsFittedFormulas) {
  // The runtime's one-shot / two-shot predictions, written out as they were before the model
  // became generic: step + copy + n * read, and (chunks + 1) steps + copy + read + copy / n +
  // copy (n - 1) / n. The refactor must not move the runtime's choice.
  const coll::ShmLinkCost cost;
  for (int n : {2, 3, 4, 8}) {
    for (size_t bytes : {size_t{4096}, size_t{65536}, size_t{1} << 20}) {
      const double b = static_cast<double>(bytes);
      const double copy = b / (cost.copy_gbps * 1e3), read = b / (cost.reduce_gbps * 1e3);
      const double one_shot = cost.step_us + copy + n * read;
      EXPECT_NEAR(coll::predict_all_reduce_us(coll::AllReduceAlgorithm::one_shot, bytes, n,
                                              /*excess_ranks=*/0, 1 << 18, cost),
                  one_shot, 1e-9 * one_shot);
      const double chunk = static_cast<double>(coll::two_shot_chunk_elems(1 << 18, 1, n));
      const double chunks = std::max(1.0, std::ceil(b / chunk));
      const double two_shot =
          (chunks + 1) * cost.step_us + copy + read + copy / n + copy * (n - 1) / n;
      EXPECT_NEAR(coll::predict_all_reduce_us(coll::AllReduceAlgorithm::two_shot, bytes, n,
                                              /*excess_ranks=*/0, 1 << 18, cost),
                  two_shot, 1e-9 * two_shot);
    }
  }
}

TEST(AlphaBeta, SharedMemoryStepGrowsWithTheRanksBeyondTheCores) {
  // Measured on 2 cores, a step costs ~12 us at N = 3 and ~26 us at N = 4: linear in the ranks
  // without a core (docs/plan.md, "Calibration on this machine"), not in N.
  coll::ShmLinkCost cost;
  cost.step_us = 0.5;
  cost.step_us_per_excess_rank = 13.0;
  EXPECT_DOUBLE_EQ(cost.link_class(4, 0).alpha_us, 0.5);
  EXPECT_DOUBLE_EQ(cost.link_class(3, 1).alpha_us, 13.5);
  EXPECT_DOUBLE_EQ(cost.link_class(4, 2).alpha_us, 26.5);
  EXPECT_DOUBLE_EQ(cost.link_class(8, 2).alpha_us, 26.5);  // the ranks, not N, count
  const double at_n4 =
      coll::predict_all_reduce_us(coll::AllReduceAlgorithm::one_shot, 4096, 4, 2, 1 << 18, cost);
  const double no_excess =
      coll::predict_all_reduce_us(coll::AllReduceAlgorithm::one_shot, 4096, 4, 0, 1 << 18, cost);
  EXPECT_NEAR(at_n4 - no_excess, 26.0, 1e-9);
}

TEST(AlphaBeta, SharedMemoryExcessStepHasAnEnvironmentOverride) {
  ::setenv("TPF_SHM_EXCESS_STEP_US", "3.5", 1);
  const coll::ShmLinkCost cost = detail::resolve_comm_settings().tuning.link_cost;
  ::setenv("TPF_SHM_EXCESS_STEP_US", "-1", 1);
  EXPECT_THROW(detail::resolve_comm_settings().tuning.link_cost, Error);
  ::unsetenv("TPF_SHM_EXCESS_STEP_US");
  EXPECT_EQ(cost.step_us_per_excess_rank, 3.5);
  EXPECT_EQ(detail::resolve_comm_settings().tuning.link_cost.step_us_per_excess_rank,
            coll::ShmLinkCost{}.step_us_per_excess_rank);
}

TEST(AlphaBeta, RingAllReduceBusBandwidthIsThePortBandwidth) {
  coll::LinkClass link{"test", 0.0, 100.0, 0.0, 0.0};
  for (int n : {2, 8, 64}) {
    const double us = *coll::predict_us(Collective::all_reduce, Algorithm::ring, kGiB, n, link);
    const double busbw = kGiB / (us * 1e3) * coll::bus_bandwidth_factor(Collective::all_reduce, n);
    EXPECT_NEAR(busbw, 100.0, 1e-9);
  }
  EXPECT_FALSE(coll::predict_us(Collective::all_gather, Algorithm::tree, 1e6, 8, link));
  EXPECT_THROW(coll::parse_algorithm("butterfly"), Error);
}

// The two NCCL figures below follow from the preset's efficiency inputs (NVLink 0.85, network
// 0.94), chosen from published measurements: these tests check that algorithms, bus-bandwidth
// accounting and the NIC-per-channel structure turn those inputs into the published numbers,
// not that the efficiencies were predicted.
TEST(PublishedFigures, NvlinkEfficiencyGivesNcclBusBandwidthOnEightH100) {
  // nccl-tests all_reduce_perf on one DGX-H100 reaches about 360-480 GB/s bus bandwidth at large
  // sizes (the upper end with NVLink SHARP, which this model leaves out).
  CollectivePlanner planner(cluster_preset("dgx-h100", 8));
  for (double bytes : {1 * kGiB, 8 * kGiB}) {
    const CollectiveEstimate e = planner.estimate(Collective::all_reduce, bytes, {8, 1});
    std::printf("8 x H100 NVLink all_reduce %.0f GiB: %s, busbw %.1f GB/s\n", bytes / kGiB,
                e.algorithm.c_str(), e.busbw_gbps);
    EXPECT_FALSE(e.crosses_network);
    EXPECT_GE(e.busbw_gbps, 360);
    EXPECT_LE(e.busbw_gbps, 480);
  }
}

TEST(PublishedFigures, NetworkEfficiencyGivesNcclBusBandwidthPerNicAcrossNodes) {
  // Across DGX-H100 nodes with 8 x 400 Gb/s NDR, nccl-tests reports about 46-48 GB/s of bus
  // bandwidth per NIC at large sizes (a ring through every NIC: busbw / 8 per node).
  for (int nodes : {2, 4, 16}) {
    CollectivePlanner planner(cluster_preset("dgx-h100", 8 * nodes));
    const CollectiveEstimate e = planner.estimate(Collective::all_reduce, 8 * kGiB, {8 * nodes, 1});
    const double per_nic = e.busbw_gbps / 8;
    std::printf("%d nodes all_reduce 8 GiB: %s, busbw %.1f GB/s = %.1f GB/s per NIC\n", nodes,
                e.algorithm.c_str(), e.busbw_gbps, per_nic);
    EXPECT_TRUE(e.crosses_network);
    EXPECT_GE(per_nic, 44);
    EXPECT_LE(per_nic, 48.5);
  }
}

TEST(CollectivePlanner, SmallMessagesAreLatencyBoundAndLargeOnesBandwidthBound) {
  CollectivePlanner planner(cluster_preset("dgx-h100", 64));
  const CollectiveEstimate small = planner.estimate(Collective::all_reduce, 8 * 1024, {64, 1});
  const CollectiveEstimate large = planner.estimate(Collective::all_reduce, kGiB, {64, 1});
  EXPECT_LT(small.busbw_gbps, 0.1 * large.busbw_gbps);
  EXPECT_NE(small.algorithm, "ring");  // a ring's 2(n-1) latencies lose on small messages
}

TEST(CollectivePlanner, GroupsInsideANodeNeverTouchTheNetwork) {
  CollectivePlanner planner(cluster_preset("dgx-h100", 64));
  EXPECT_FALSE(planner.estimate(Collective::all_gather, 1e8, {8, 1}).crosses_network);
  EXPECT_TRUE(planner.estimate(Collective::all_gather, 1e8, {8, 8}).crosses_network);
  EXPECT_EQ(planner.network_phase({8, 1}).transfers, 0);
}

TEST(CollectivePlanner, GroupsAcrossRailGroupsCollideUnderEcmpAndQueuePairsHelp) {
  // 4 members 32 nodes apart: every transfer leaves its leaf, so hashing decides the rate.
  ClusterSpec cluster = cluster_preset("dgx-h100", 1024);
  const GroupShape group{4, 256};
  CollectivePlanner ecmp(cluster);
  const NetworkPhase one_qp = ecmp.network_phase(group);
  cluster.routing.queue_pairs = 4;
  const NetworkPhase four_qps = CollectivePlanner(cluster).network_phase(group);
  cluster.routing.queue_pairs = 1;
  cluster.routing.mode = RoutingMode::spray;
  const NetworkPhase spray = CollectivePlanner(cluster).network_phase(group);
  std::printf("slowest transfer: ECMP %.1f, 4 QPs %.1f, spray %.1f GB/s (NIC %.1f)\n",
              one_qp.min_rate_gbps, four_qps.min_rate_gbps, spray.min_rate_gbps, spray.nic_gbps);
  EXPECT_GE(one_qp.max_link_load, 3.0);
  EXPECT_LT(one_qp.min_rate_gbps, 0.5 * spray.min_rate_gbps);
  EXPECT_GT(four_qps.min_rate_gbps, one_qp.min_rate_gbps);
  EXPECT_NEAR(spray.min_rate_gbps, spray.nic_gbps, 1e-9);
  // The all-reduce of that group is slower by the same cause.
  EXPECT_GT(ecmp.estimate(Collective::all_reduce, kGiB, group).us,
            CollectivePlanner(cluster).estimate(Collective::all_reduce, kGiB, group).us * 2);
}

TEST(CollectivePlanner, GroupsStraddlingNodesCrossTheNetwork) {
  // 10 consecutive GPUs on 8-GPU nodes: no copy sits inside a node.
  CollectivePlanner planner(cluster_preset("dgx-h100", 80));
  const GroupPlacement where = planner.placement({10, 1});
  EXPECT_FALSE(where.regular);
  const CollectiveEstimate e = planner.estimate(Collective::all_reduce, 1e8, {10, 1});
  EXPECT_TRUE(e.crosses_network);
  EXPECT_GT(planner.network_phase({10, 1}).transfers, 0);
}

// Data-parallel groups whose pipeline stages cut nodes (2,016 GPUs, tp 4, pp 8: a stage is 31.5
// nodes) have one member on the boundary nodes. NCCL keeps their hops on rails (PXN: over NVLink
// to the GPU on the receiver's rail, out through its NIC) and so does the planner; the group is
// then slower only by what the boundary nodes' one NIC per copy (against two elsewhere) costs.
TEST(CollectivePlanner, GroupsThatCutNodesStayOnRailsAndCostOnlyWhatTheirNicsCost) {
  const GroupShape irregular{63, 4};
  ClusterSpec cluster = cluster_preset("dgx-h100", 2016);
  CollectivePlanner pxn(cluster);
  EXPECT_FALSE(pxn.placement(irregular).regular);
  // A hop leaves its rail only where the node's NIC on the receiver's rail already sends for
  // another hop of the step and its own NIC is free; no NIC sends twice.
  const std::vector<Transfer> hops = pxn.phase_transfers(irregular, PhaseKind::ring);
  std::map<int, int> sends;
  for (const Transfer& t : hops) ++sends[t.src_nic];
  int on_rail = 0;
  for (const Transfer& t : hops) {
    EXPECT_EQ(sends[t.src_nic], 1) << "NIC " << t.src_nic;
    if (t.src_nic % 8 == t.dst_nic % 8) {
      ++on_rail;
    } else {
      EXPECT_EQ(sends.count(t.src_nic / 8 * 8 + t.dst_nic % 8), 1u) << "NIC " << t.src_nic;
    }
  }
  EXPECT_GT(on_rail, 0.9 * hops.size());
  const NetworkPhase& phase = pxn.network_phase(irregular);
  EXPECT_DOUBLE_EQ(phase.min_rate_gbps, phase.nic_gbps);  // no NIC or link shared
  cluster.network.pxn = false;
  CollectivePlanner no_pxn(cluster);
  int crossing = 0;
  for (const Transfer& t : no_pxn.phase_transfers(irregular, PhaseKind::ring)) {
    crossing += t.src_nic % 8 != t.dst_nic % 8;
  }
  EXPECT_GT(crossing, 0);
  EXPECT_LT(no_pxn.network_phase(irregular).min_rate_gbps, phase.min_rate_gbps);

  // A step at 2,016 GPUs against 2,048 (stages of exactly 32 nodes): the DP reduction at most
  // doubles (one NIC per copy on the boundary nodes instead of two) and nothing else grows.
  auto step = [](int gpus) {
    CollectivePlanner planner(cluster_preset("dgx-h100", gpus));
    const int dp = gpus / 32;
    return estimate_step(model_preset("gpt-175b"),
                         parse_layout("tp=4,pp=8,dp=" + std::to_string(dp) +
                                      ",gb=" + std::to_string(8 * dp) + ",sp=1,zero=1"),
                         planner);
  };
  const StepEstimate cut = step(2016), whole = step(2048);
  EXPECT_LE(cut.dp_comm_s, 2.05 * whole.dp_comm_s);
  EXPECT_GT(cut.dp_comm_s, 1.5 * whole.dp_comm_s);
  EXPECT_LE(cut.step_s, whole.step_s + 1.05 * whole.dp_comm_s);
}

TEST(CollectivePlanner, AlgorithmsAcrossNodesAreRingsAndTreesOnly) {
  // One-shot and two-shot need mapped peer memory: not across the network, not even as the
  // inter-node step of the hierarchical algorithm.
  CollectivePlanner planner(cluster_preset("dgx-h100", 128));
  for (double bytes : {8e3, 1e6, 1e8, 8e9}) {
    for (const CollectiveEstimate& e :
         planner.estimate_all(Collective::all_reduce, bytes, {128, 1})) {
      EXPECT_EQ(e.algorithm.find("shot"), std::string::npos) << e.algorithm << " at " << bytes;
    }
  }
}

TEST(CollectivePlanner, RailOptimizedNetworksOfferAThreeLevelHierarchy) {
  // 128 nodes in 4 rail groups of 32: scale-up, then within a rail group (leaf-local), then
  // across rail groups (spine).
  CollectivePlanner planner(cluster_preset("dgx-h100", 1024));
  const GroupPlacement where = planner.placement({1024, 1});
  EXPECT_EQ(where.per_node, 8);
  EXPECT_EQ(where.nodes, 128);
  EXPECT_EQ(where.nodes_per_rail_group, 32);
  bool three_level = false;
  for (const CollectiveEstimate& e : planner.estimate_all(Collective::all_reduce, 1e9, {1024, 1})) {
    three_level = three_level || e.algorithm.rfind("hierarchical-3(", 0) == 0;
  }
  EXPECT_TRUE(three_level);
  // The leaf-local step never leaves a leaf; the spine step does.
  EXPECT_LE(planner.network_phase({1024, 1}, PhaseKind::within_rail_group).max_link_load, 0.0);
  EXPECT_GT(planner.network_phase({1024, 1}, PhaseKind::across_rail_groups).max_link_load, 0.0);
}

TEST(CollectivePlanner, AFabricCutOffByFailuresIsAnErrorNotAFreeLink) {
  // 16 nodes, 16-port switches: leaf 0 (rail 0 of nodes 0-7) loses all 8 of its uplinks.
  ClusterSpec cluster = cluster_preset("dgx-h100", 128);
  cluster.network.switch_radix = 16;
  for (int spine = 0; spine < 8; ++spine) {
    cluster.failures.links.push_back("leaf0-spine" + std::to_string(spine));
  }
  for (RoutingMode mode : {RoutingMode::ecmp, RoutingMode::spray, RoutingMode::adaptive}) {
    cluster.routing.mode = mode;
    CollectivePlanner planner(cluster);
    EXPECT_THROW(planner.estimate(Collective::all_reduce, 1e8, {2, 64}), Error)
        << to_string(mode);  // node 0 to node 8 on rail 0
  }
  // A search reports the cut, not "no layout fits the divisibility rules".
  CollectivePlanner planner(cluster);
  try {
    search_layouts(model_preset("gpt-1.3b"), planner, {});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("failed links"), std::string::npos) << e.what();
  }
}

TEST(CollectivePlanner, OversubscribedLeavesThrottleCrossLeafTraffic) {
  // 2:1 leaves (43 down / 21 up); spraying, so collisions do not blur the picture.
  ClusterSpec cluster = cluster_preset("h100-ethernet", 512);
  cluster.routing.mode = RoutingMode::spray;
  CollectivePlanner planner(cluster);
  // Members 16 nodes apart: every transfer leaves its leaf, so each leaf's 43 NICs share 21
  // uplinks: about 21/43 of the NIC rate.
  const NetworkPhase phase = planner.network_phase({4, 128});
  std::printf("2:1 leaves: slowest transfer %.1f of %.1f GB/s\n", phase.min_rate_gbps,
              phase.nic_gbps);
  EXPECT_NEAR(phase.min_rate_gbps / phase.nic_gbps, 21.0 / 43.0, 0.05);
  // Neighbours on the same leaf keep the full rate.
  EXPECT_NEAR(planner.network_phase({64, 8}).min_rate_gbps, phase.nic_gbps, 1e-9);
}

TEST(ClusterFiles, PresetYamlRoundTripsAndUnknownKeysAreNamed) {
  const ClusterSpec preset = cluster_preset("dgx-a100", 256);
  const ClusterSpec parsed = parse_cluster_yaml(cluster_to_yaml(preset), "roundtrip.yaml");
  EXPECT_EQ(cluster_to_yaml(parsed), cluster_to_yaml(preset));
  EXPECT_EQ(parsed.total_gpus(), 256);
  EXPECT_DOUBLE_EQ(parsed.nic_gbits, 200);
  auto error_of = [](const std::string& yaml) {
    try {
      parse_cluster_yaml(yaml, "c.yaml");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("nodes: 2\nnetwork: {radix: 64}\n").find("c.yaml: network.radix: unknown key"),
            std::string::npos);
  EXPECT_NE(error_of("nodes: two\n").find("c.yaml: nodes: expected a number"), std::string::npos);
  EXPECT_NE(error_of("nodes: 2\nrouting: {mode: random}\n").find("routing.mode"),
            std::string::npos);
  EXPECT_NE(error_of("nodes: [1\n").find("YAML syntax error at line"), std::string::npos);
  EXPECT_NE(error_of("nodes: 2\nnetwork: {oversubscription: 0.5}\n").find("oversubscription"),
            std::string::npos);
  // The fused-attention shape terms: read back, and a negative one named.
  const ClusterSpec halves =
      parse_cluster_yaml("node: {gpu: {attention_half_keys: 512, attention_half_rows: 0}}\n", "c");
  EXPECT_DOUBLE_EQ(halves.gpu.attention_half_keys, 512);
  EXPECT_DOUBLE_EQ(halves.gpu.attention_half_rows, 0);
  EXPECT_NE(error_of("node: {gpu: {attention_half_rows: -1}}\n")
                .find("node.gpu.attention_half_rows must be >= 0"),
            std::string::npos);
  EXPECT_NE(error_of("node: {gpu: {attention_half_keys: -1}}\n")
                .find("node.gpu.attention_half_keys must be >= 0"),
            std::string::npos);
  EXPECT_THROW(cluster_preset("dgx-h100", 12), Error);
  EXPECT_THROW(cluster_preset("dgx-z9000", 8), Error);
}

}  // namespace
}  // namespace tpf::plan
