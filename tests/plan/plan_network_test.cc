// The planner's network model: max-min sharing checked against its definition, fat-tree shapes,
// ECMP collisions against the exact balls-into-bins law, queue pairs, spraying, adaptive routing,
// polarisation and failed links.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "plan/cluster.h"
#include "plan/fabric_topology.h"
#include "plan/max_min.h"
#include "plan/routing.h"
#include "tpf/error.h"

namespace tpf::plan {
namespace {

// A deterministic generator for random instances.
struct Lcg {
  uint64_t state;
  uint64_t next() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  }
  double uniform() { return static_cast<double>(next() % 1000000) / 1e6; }
};

TEST(MaxMin, TextbookExample) {
  // Links A (10) and B (4). Flow 0 uses A, flow 1 uses A and B, flow 2 uses B.
  // B is the bottleneck of flows 1 and 2 (2 each); flow 0 then gets A's remaining 8.
  const std::vector<double> capacity = {10, 4};
  const std::vector<PathFlow> flows = {{{0}, 1, 0}, {{0, 1}, 1, 0}, {{1}, 1, 0}};
  const std::vector<double> rates = max_min_rates(capacity, flows);
  EXPECT_DOUBLE_EQ(rates[0], 8);
  EXPECT_DOUBLE_EQ(rates[1], 2);
  EXPECT_DOUBLE_EQ(rates[2], 2);
}

// The definition of max-min fairness: rates are feasible, and every flow crosses a saturated
// link on which no other flow is faster (its bottleneck). Checked on random instances.
TEST(MaxMin, RandomInstancesMeetTheDefinition) {
  Lcg rng{7};
  for (int instance = 0; instance < 200; ++instance) {
    const int nlinks = 2 + static_cast<int>(rng.next() % 12);
    const int nflows = 1 + static_cast<int>(rng.next() % 30);
    std::vector<double> capacity(nlinks);
    for (double& c : capacity) c = 1 + 99 * rng.uniform();
    std::vector<PathFlow> flows(nflows);
    for (PathFlow& flow : flows) {
      std::set<int> links;
      const int hops = 1 + static_cast<int>(rng.next() % 4);
      for (int h = 0; h < hops; ++h) links.insert(static_cast<int>(rng.next() % nlinks));
      flow.links.assign(links.begin(), links.end());
    }
    const std::vector<double> rate = max_min_rates(capacity, flows);
    std::vector<double> load(nlinks, 0.0), fastest(nlinks, 0.0);
    for (int f = 0; f < nflows; ++f) {
      ASSERT_GT(rate[f], 0);
      for (int l : flows[f].links) {
        load[l] += rate[f];
        fastest[l] = std::max(fastest[l], rate[f]);
      }
    }
    for (int l = 0; l < nlinks; ++l) EXPECT_LE(load[l], capacity[l] * (1 + 1e-9));
    for (int f = 0; f < nflows; ++f) {
      bool has_bottleneck = false;
      for (int l : flows[f].links) {
        const bool saturated = load[l] >= capacity[l] * (1 - 1e-9);
        has_bottleneck = has_bottleneck || (saturated && rate[f] >= fastest[l] * (1 - 1e-9));
      }
      EXPECT_TRUE(has_bottleneck) << "instance " << instance << " flow " << f;
    }
  }
}

TEST(MaxMin, SimulationReSharesWhenAFlowFinishes) {
  // Two flows share a 10 GB/s link (1e4 bytes/us): 1e4 bytes and 3e4 bytes. Both get 5 GB/s
  // until the small one ends at 2 us, then the large one runs at 10 GB/s for its last 2e4 bytes.
  const std::vector<double> capacity = {10};
  const std::vector<PathFlow> flows = {{{0}, 1e4, 0}, {{0}, 3e4, 0}};
  const std::vector<double> finish = simulate_completion_us(capacity, flows);
  EXPECT_NEAR(finish[0], 2.0, 1e-9);
  EXPECT_NEAR(finish[1], 4.0, 1e-9);
}

TEST(MaxMin, SimulationHonoursStartTimes) {
  const std::vector<double> capacity = {10};
  const std::vector<PathFlow> flows = {{{0}, 1e4, 0}, {{0}, 1e4, 10}};
  const std::vector<double> finish = simulate_completion_us(capacity, flows);
  EXPECT_NEAR(finish[0], 1.0, 1e-9);
  EXPECT_NEAR(finish[1], 11.0, 1e-9);
}

ClusterSpec leaf_spine(int nodes, int radix, bool rail_optimized) {
  ClusterSpec c;
  c.nodes = nodes;
  c.network.switch_radix = radix;
  c.network.rail_optimized = rail_optimized;
  c.network.efficiency = 1.0;
  return c;
}

TEST(FabricTopology, PresetsPickTiersAndSwitchCounts) {
  const FabricTopology small(cluster_preset("dgx-h100", 1024));  // 1024 NICs, radix 64
  EXPECT_EQ(small.tiers(), 2);
  EXPECT_EQ(small.leaf_count(), 32);  // 4 rail groups of 32 nodes x 8 rails
  EXPECT_EQ(small.leaf_uplinks(), 32);
  const FabricTopology big(cluster_preset("dgx-h100", 8192));
  EXPECT_EQ(big.tiers(), 3);
  // Past 64^3/4 NICs the preset moves to 128-port switches, and 100,000 GPUs fit in 3 tiers.
  const ClusterSpec huge = cluster_preset("dgx-h100", 100000);
  EXPECT_EQ(huge.network.switch_radix, 128);
  EXPECT_EQ(FabricTopology(huge).tiers(), 3);
}

// The summary counts with nouns in the right number: one NIC is "1 NIC, 1 leaf".
TEST(FabricTopology, TheSummaryReadsRightForOneNic) {
  ClusterSpec c = leaf_spine(1, 64, false);
  c.gpus_per_node = 1;
  c.nics_per_node = 1;
  const std::string summary = FabricTopology(c).summary();
  EXPECT_NE(summary.find("1 plane: 1 NIC, 1 leaf (each with 32 ports down, 32 up)"),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find("; 0 failed cables"), std::string::npos) << summary;
  const std::string many = FabricTopology(cluster_preset("dgx-h100", 1024)).summary();
  EXPECT_NE(many.find("1024 NICs, 32 leaves"), std::string::npos) << many;
}

TEST(FabricTopology, TooManyNicsForTheRadixIsANamedError) {
  ClusterSpec c = leaf_spine(4096, 16, true);
  try {
    FabricTopology topology(c);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("switch_radix"), std::string::npos) << e.what();
  }
}

TEST(FabricTopology, NamedFailuresRemoveBothDirectionsAndUnknownNamesAreErrors) {
  ClusterSpec c = leaf_spine(16, 16, true);  // 16 leaves, 8 spines: two tiers
  c.failures.links = {"leaf0-spine3"};
  const FabricTopology topology(c);
  EXPECT_EQ(topology.failed_link_count(), 2);
  for (int link : topology.leaf_up_links(0, 0)) {
    EXPECT_NE(topology.link_name(link), "leaf0->spine3");
  }
  EXPECT_EQ(topology.spine_down_to_leaf(0, 3, 0), -1);
  c.failures.links = {"leaf0-spine99"};
  EXPECT_THROW(FabricTopology{c}, Error);
}

// Exact expected maximum load of n balls thrown into m bins uniformly:
// P(max <= k) = n! / m^n * [x^n] (sum_{j<=k} x^j / j!)^m, by polynomial powers.
double expected_max_load(int n, int m) {
  double expected = 0;
  double previous = 0;
  for (int k = 1; k <= n; ++k) {
    std::vector<long double> base(n + 1, 0), power(n + 1, 0);
    long double factorial = 1;
    for (int j = 0; j <= std::min(k, n); ++j) {
      if (j > 0) factorial *= j;
      base[j] = 1 / factorial;
    }
    power[0] = 1;
    for (int bin = 0; bin < m; ++bin) {
      std::vector<long double> next(n + 1, 0);
      for (int a = 0; a <= n; ++a) {
        if (power[a] == 0) continue;
        for (int b = 0; a + b <= n && b <= k; ++b) next[a + b] += power[a] * base[b];
      }
      power = next;
    }
    long double scale = 1;  // n! / m^n
    for (int i = 1; i <= n; ++i) scale *= static_cast<long double>(i) / m;
    const double at_most_k = static_cast<double>(power[n] * scale);
    expected += k * (at_most_k - previous);
    previous = at_most_k;
  }
  return expected;
}

// The most flows on one uplink of leaf 0 when its 64 NICs each send to a NIC of leaf 1.
double worst_uplink_load(const ClusterSpec& cluster) {
  const FabricTopology topology(cluster);
  std::vector<Transfer> transfers;
  for (int i = 0; i < 64; ++i) transfers.push_back({i, 64 + i, 1.0});
  const std::vector<SubFlow> subflows = route_transfers(topology, cluster.routing, transfers);
  std::map<int, double> load;
  for (const SubFlow& s : subflows) load[s.path.links[1]] += s.path.bytes;  // leaf-up hop
  double worst = 0;
  for (const auto& [link, bytes] : load) worst = std::max(worst, bytes);
  return worst;
}

TEST(Routing, EcmpCollisionsFollowBallsIntoBins) {
  // 64 flows hashed onto 64 uplinks: the published rule of thumb is that the most loaded link
  // carries about 4 flows; the exact expectation is computed above.
  const double exact = expected_max_load(64, 64);
  EXPECT_NEAR(exact, 4.0, 0.3);
  ClusterSpec c = leaf_spine(16, 128, false);  // 128 NICs: two leaves of 64 down / 64 up
  double sum = 0, sum_sq = 0;
  const int seeds = 400;
  for (int seed = 1; seed <= seeds; ++seed) {
    c.routing.seed = static_cast<uint64_t>(seed);
    const double worst = worst_uplink_load(c);
    sum += worst;
    sum_sq += worst * worst;
  }
  const double mean = sum / seeds;
  const double stderr_of_mean = std::sqrt((sum_sq / seeds - mean * mean) / seeds);
  std::printf(
      "ECMP, 64 flows on 64 uplinks: mean worst load %.3f flows over %d seeds "
      "(exact expectation %.3f)\n",
      mean, seeds, exact);
  EXPECT_NEAR(mean, exact, 4 * stderr_of_mean + 0.02);
}

TEST(Routing, QueuePairsSpreadTheLoadAndAdaptiveOrSprayRemoveCollisions) {
  ClusterSpec c = leaf_spine(16, 128, false);
  double one_qp = 0, four_qps = 0, sixteen_qps = 0;
  for (int seed = 1; seed <= 50; ++seed) {
    c.routing.seed = static_cast<uint64_t>(seed);
    c.routing.queue_pairs = 1;
    one_qp += worst_uplink_load(c) / 50;
    c.routing.queue_pairs = 4;
    four_qps += worst_uplink_load(c) / 50;
    c.routing.queue_pairs = 16;
    sixteen_qps += worst_uplink_load(c) / 50;
  }
  std::printf("worst uplink load in flows' worth: 1 QP %.2f, 4 QPs %.2f, 16 QPs %.2f\n", one_qp,
              four_qps, sixteen_qps);
  EXPECT_GT(one_qp, four_qps + 1.0);
  EXPECT_GT(four_qps, sixteen_qps);
  EXPECT_GT(sixteen_qps, 1.0);
  c.routing.queue_pairs = 1;
  c.routing.mode = RoutingMode::adaptive;
  EXPECT_DOUBLE_EQ(worst_uplink_load(c), 1.0);  // least-loaded choice: one flow per uplink
}

// Max-min rates of a permutation from leaf 0 to leaf 1 under a routing policy.
double slowest_rate(const ClusterSpec& cluster) {
  const FabricTopology topology(cluster);
  std::vector<Transfer> transfers;
  for (int i = 0; i < 64; ++i) transfers.push_back({i, 64 + i, 1.0});
  const std::vector<SubFlow> subflows = route_transfers(topology, cluster.routing, transfers);
  std::vector<double> capacity;
  for (const FabricLink& link : topology.links()) capacity.push_back(link.failed ? 0 : link.gbps);
  std::vector<PathFlow> paths;
  for (const SubFlow& s : subflows) paths.push_back(s.path);
  const std::vector<double> rates = max_min_rates(capacity, paths);
  return *std::min_element(rates.begin(), rates.end());
}

TEST(Routing, SprayingRunsAPermutationAtLineRate) {
  ClusterSpec c = leaf_spine(16, 128, false);
  c.routing.mode = RoutingMode::ecmp;
  const double ecmp = slowest_rate(c);
  c.routing.mode = RoutingMode::spray;
  const double spray = slowest_rate(c);
  EXPECT_NEAR(spray, c.nic_gbps(), 1e-9);
  EXPECT_LT(ecmp, spray / 2);  // some uplink carries 3 or more flows
}

TEST(Routing, OneHashForAllTiersPolarisesTheCore) {
  // A 3-tier fat-tree: the same hash at the leaf and the aggregation switch picks the same
  // index twice, so only one core per aggregation switch carries cross-pod traffic.
  ClusterSpec c = leaf_spine(128, 16, false);  // 1024 NICs, 128 leaves > 16: 3 tiers
  c.network.tiers = 3;
  const FabricTopology topology(c);
  std::vector<Transfer> transfers;
  const int half = topology.nic_count() / 2;
  for (int i = 0; i < half; ++i) transfers.push_back({i, half + i, 1.0});
  auto cores_used = [&](bool per_switch_hash) {
    RoutingSpec routing = c.routing;
    routing.per_switch_hash = per_switch_hash;
    std::set<int> cores;
    for (const SubFlow& s : route_transfers(topology, routing, transfers)) {
      if (s.path.links.size() == 6) cores.insert(topology.core_of_agg_link(s.path.links[2]));
    }
    return cores.size();
  };
  const size_t salted = cores_used(true), polarised = cores_used(false);
  std::printf("cores carrying cross-pod traffic: %zu with per-switch hashing, %zu with one hash\n",
              salted, polarised);
  EXPECT_EQ(salted, 64u);  // 8 aggregation switches per pod x 8 cores each
  EXPECT_LE(polarised, 8u);
}

TEST(Routing, DualPlanesSplitEveryTransferAcrossBothFabrics) {
  ClusterSpec c = leaf_spine(16, 64, false);
  c.network.planes = 2;
  const FabricTopology topology(c);
  EXPECT_EQ(topology.planes(), 2);
  const std::vector<SubFlow> pieces =
      route_transfers(topology, c.routing, {{0, 64, 1000.0}, {1, 65, 1000.0}});
  ASSERT_EQ(pieces.size(), 4u);
  std::set<int> first_links;
  for (const SubFlow& s : pieces) {
    EXPECT_DOUBLE_EQ(s.path.bytes, 500.0);
    // Each plane's NIC port carries half the NIC's bandwidth.
    EXPECT_DOUBLE_EQ(topology.links()[s.path.links.front()].gbps, c.nic_gbps() / 2);
    first_links.insert(s.path.links.front());
  }
  EXPECT_EQ(first_links.size(), 4u);  // two NICs x two planes
  c.routing.mode = RoutingMode::spray;
  EXPECT_NEAR(slowest_rate(c), c.nic_gbps() / 2, 1e-9);  // each piece: one plane's port
}

TEST(Routing, FailedLinksAreRoutedAroundAndLowerSprayedCapacity) {
  ClusterSpec c = leaf_spine(16, 128, false);
  c.routing.mode = RoutingMode::spray;
  c.failures.random_links = 32;  // of 2 x 64 leaf-spine cables
  c.failures.seed = 3;
  const FabricTopology topology(c);
  EXPECT_EQ(topology.failed_link_count(), 64);
  std::vector<Transfer> transfers;
  for (int i = 0; i < 64; ++i) transfers.push_back({i, 64 + i, 1.0});
  c.routing.mode = RoutingMode::ecmp;
  for (const SubFlow& s : route_transfers(topology, c.routing, transfers)) {
    for (int link : s.path.links) EXPECT_FALSE(topology.links()[link].failed);
  }
  c.routing.mode = RoutingMode::spray;
  EXPECT_LT(slowest_rate(c), c.nic_gbps());
}

}  // namespace
}  // namespace tpf::plan
