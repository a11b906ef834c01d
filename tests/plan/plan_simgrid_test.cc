// The planner's flow-level network model against an independent reference: SimGrid's CM02 model
// (tests/reference/simgrid_flows.cc) run on the same links and flows. Scenarios come from the
// planner's own topology and routing code (leaf-spine and 3-tier fat-trees up to 1,024 NICs,
// ring and permutation traffic, ECMP with 1 and 4 queue pairs, failed links, oversubscription).
//
// Two SimGrid runs per scenario:
//  - latency as a start delay (--latency=start): each flow starts after its path latency and all
//    flows share max-min with equal weights, exactly what simulate_completion_us models (with
//    PathFlow::start_us = path latency). Asserted to agree within kStartTolerance.
//  - latency on the links (--latency=links): CM02 weights a flow's share by 1 / (its route
//    latency) (network_cm02.cpp sets the max-min penalty to the route latency even with
//    weight-S = 0), an RTT unfairness the planner does not model. Asserted to agree only when
//    every flow has the same path latency; otherwise the difference is reported.
// Also reported: how far the planner's one-shot estimate (one max-min solve per phase, a flow's
// time = path latency + bytes / its rate) is from SimGrid's makespan.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "formats/json.h"
#include "plan/cluster.h"
#include "plan/fabric_topology.h"
#include "plan/max_min.h"
#include "plan/routing.h"
#include "support/scratch_dir.h"

#ifndef TPF_SIMGRID_FLOWS
#error "TPF_SIMGRID_FLOWS must name the simgrid_flows executable"
#endif

namespace tpf::plan {
namespace {

// Both sides are exact max-min fluid simulations in double precision; measured agreement is
// ~1e-15 relative. The bound leaves room for different summation orders over ~10^4 events.
constexpr double kStartTolerance = 1e-9;

double max_rel_error(const std::vector<double>& got, const std::vector<double>& want) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(std::abs(want[i]), 1e-300));
  return worst;
}

// Runs simgrid_flows on `scenario`, bounded in time; returns finish times (us), or fails the test.
std::vector<double> run_simgrid(const testing::ScratchDir& dir, const std::string& scenario,
                                const std::string& latency_mode, size_t flows) {
  const std::string out = dir / ("finish-" + latency_mode + ".json");
  const std::string err = dir / ("stderr-" + latency_mode + ".txt");
  std::vector<std::string> args = {TPF_SIMGRID_FLOWS, scenario, out, "--latency=" + latency_mode};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, STDERR_FILENO);
    execv(TPF_SIMGRID_FLOWS, argv.data());
    _exit(126);
  }
  if (pid < 0) {
    ADD_FAILURE() << "fork failed";
    return {};
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "simgrid_flows timed out on " << scenario;
      return {};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    ADD_FAILURE() << "simgrid_flows failed (status " << status << "): " << testing::read_file(err);
    return {};
  }
  json::Value result = json::parse(testing::read_file(out), out);
  std::vector<double> finish;
  for (const json::Value& v : result.at("finish_us").as_array()) finish.push_back(v.as_double());
  EXPECT_EQ(finish.size(), flows);
  return finish;
}

struct Agreement {
  size_t flows = 0;
  size_t links = 0;
  double start_mode_error = 0;  // max relative error per flow, latency as a start delay
  double links_mode_error = 0;  // max relative error per flow, latency on SimGrid's links
  bool equal_path_latency = true;
  double makespan_us = 0;  // SimGrid, latency as a start delay
  double one_shot_us = 0;  // max over flows of path latency + bytes / (t = 0 max-min rate)
};

// The planner predicts a phase with one max-min solve (path latency + bytes / initial rate, the
// slowest flow). For a ring step (equal sizes, all start together) that is SimGrid's makespan.
void expect_one_shot_is_the_makespan(const Agreement& a);
// With unequal sizes flows speed up as others finish, so one solve over-estimates; the scenarios
// here stay within 1.7x (measured 1.32-1.62x).
void expect_one_shot_bounds_the_makespan(const Agreement& a);

// Routes `transfers` over `cluster`, runs both models and compares them.
Agreement compare_with_simgrid(const ClusterSpec& cluster, const std::vector<Transfer>& transfers,
                               const std::string& label) {
  Agreement a;
  FabricTopology topology(cluster);
  std::vector<SubFlow> routed = route_transfers(topology, cluster.routing, transfers);
  const std::vector<FabricLink>& links = topology.links();

  std::vector<double> capacity(links.size());
  for (size_t l = 0; l < links.size(); ++l) capacity[l] = links[l].gbps;
  std::vector<PathFlow> flows;
  for (const SubFlow& s : routed) {
    PathFlow f = s.path;
    // SimGrid counts whole bytes; both models get the same rounded sizes.
    f.bytes = std::max(1.0, std::round(f.bytes));
    f.start_us = 0;
    for (int l : f.links) f.start_us += links[l].latency_us;
    flows.push_back(f);
  }
  a.flows = flows.size();
  for (const PathFlow& f : flows)
    a.equal_path_latency = a.equal_path_latency && f.start_us == flows.front().start_us;

  // The scenario: only the links some flow crosses, renumbered.
  std::map<int, int> compact;
  json::Array scenario_links, scenario_flows;
  for (const PathFlow& f : flows) {
    json::Array ids;
    for (int l : f.links) {
      EXPECT_FALSE(links[l].failed)
          << label << ": a route crosses failed link " << topology.link_name(l);
      auto [it, added] = compact.emplace(l, static_cast<int>(compact.size()));
      if (added) {
        json::Object link;
        link.emplace_back("gbps", links[l].gbps);
        link.emplace_back("latency_us", links[l].latency_us);
        scenario_links.emplace_back(std::move(link));
      }
      ids.emplace_back(it->second);
    }
    json::Object flow;
    flow.emplace_back("links", std::move(ids));
    flow.emplace_back("bytes", static_cast<int64_t>(f.bytes));
    scenario_flows.emplace_back(std::move(flow));
  }
  a.links = compact.size();
  json::Object scenario;
  scenario.emplace_back("links", std::move(scenario_links));
  scenario.emplace_back("flows", std::move(scenario_flows));
  testing::ScratchDir dir;
  const std::string path = dir / "scenario.json";
  std::ofstream(path) << json::dump(json::Value(std::move(scenario))) << "\n";

  std::vector<double> planner = simulate_completion_us(capacity, flows);
  std::vector<double> sg_start = run_simgrid(dir, path, "start", flows.size());
  std::vector<double> sg_links = run_simgrid(dir, path, "links", flows.size());
  if (planner.size() != flows.size() || sg_start.size() != flows.size() ||
      sg_links.size() != flows.size()) {
    ADD_FAILURE() << label << ": missing results";
    return a;
  }
  a.start_mode_error = max_rel_error(planner, sg_start);
  a.links_mode_error = max_rel_error(planner, sg_links);
  a.makespan_us = *std::max_element(sg_start.begin(), sg_start.end());

  std::vector<double> rates = max_min_rates(capacity, flows);
  for (size_t i = 0; i < flows.size(); ++i)
    a.one_shot_us = std::max(a.one_shot_us, flows[i].start_us + flows[i].bytes / (rates[i] * 1e3));

  EXPECT_LE(a.start_mode_error, kStartTolerance) << label;
  if (a.equal_path_latency) {
    EXPECT_LE(a.links_mode_error, kStartTolerance) << label;
  }
  std::printf(
      "[simgrid] %-34s flows %5zu links %5zu | max rel err: latency as start %.2e, on links "
      "%.2e%s | one-shot / makespan %.4f (%.1f / %.1f us)\n",
      label.c_str(), a.flows, a.links, a.start_mode_error, a.links_mode_error,
      a.equal_path_latency ? " (equal path latencies)" : "", a.one_shot_us / a.makespan_us,
      a.one_shot_us, a.makespan_us);
  ::testing::Test::RecordProperty("flows", static_cast<int>(a.flows));
  ::testing::Test::RecordProperty("start_mode_error", std::to_string(a.start_mode_error));
  ::testing::Test::RecordProperty("links_mode_error", std::to_string(a.links_mode_error));
  ::testing::Test::RecordProperty("one_shot_over_makespan",
                                  std::to_string(a.one_shot_us / a.makespan_us));
  return a;
}

void expect_one_shot_is_the_makespan(const Agreement& a) {
  EXPECT_NEAR(a.one_shot_us / a.makespan_us, 1.0, 1e-6);
}

void expect_one_shot_bounds_the_makespan(const Agreement& a) {
  EXPECT_GE(a.one_shot_us, a.makespan_us * (1 - 1e-9));
  EXPECT_LE(a.one_shot_us, 1.7 * a.makespan_us);
}

ClusterSpec fabric(int nodes, int radix, int tiers, bool rail_optimized, int queue_pairs = 1) {
  ClusterSpec c;
  c.nodes = nodes;
  c.gpus_per_node = 8;
  c.nics_per_node = 8;
  c.network.tiers = tiers;
  c.network.switch_radix = radix;
  c.network.rail_optimized = rail_optimized;
  c.routing.mode = RoutingMode::ecmp;
  c.routing.seed = 7;
  c.routing.queue_pairs = queue_pairs;
  return c;
}

// Every NIC sends to the NIC of the same rail on the next node (one ring step of all rails).
std::vector<Transfer> ring_step(const ClusterSpec& c, double bytes) {
  std::vector<Transfer> t;
  for (int node = 0; node < c.nodes; ++node)
    for (int nic = 0; nic < c.nics_per_node; ++nic)
      t.push_back(
          {node * c.nics_per_node + nic, ((node + 1) % c.nodes) * c.nics_per_node + nic, bytes});
  return t;
}

// `rounds` random permutations of all NICs (no NIC to itself), sizes uniform in 1..64 MiB so
// flows finish at different times and the survivors' rates are re-shared.
std::vector<Transfer> random_permutations(const ClusterSpec& c, int rounds, uint64_t seed) {
  const int nics = c.nodes * c.nics_per_node;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> mib(1, 64);
  std::vector<Transfer> t;
  for (int r = 0; r < rounds; ++r) {
    std::vector<int> dst(nics);
    std::iota(dst.begin(), dst.end(), 0);
    std::shuffle(dst.begin(), dst.end(), rng);
    for (int src = 0; src < nics; ++src) {
      int d = dst[src] == src ? (src + 1) % nics : dst[src];
      t.push_back({src, d, mib(rng) * 1048576.0});
    }
  }
  return t;
}

// The reference itself: one flow on one link takes latency + bytes / bandwidth, exactly.
TEST(PlanSimgridTest, OneFlowTakesLatencyPlusBytesOverBandwidth) {
  testing::ScratchDir dir;
  const std::string path = dir / "one.json";
  std::ofstream(path) << R"({"links":[{"gbps":47,"latency_us":1.5},{"gbps":94,"latency_us":0.25}],)"
                      << R"("flows":[{"links":[0,1],"bytes":123456789}]})"
                      << "\n";
  const double want = 1.75 + 123456789 / 47e3;
  for (const char* mode : {"links", "start"}) {
    std::vector<double> got = run_simgrid(dir, path, mode, 1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_NEAR(got[0], want, 1e-12 * want) << mode;
  }
}

// The one known disagreement, by hand: two flows on a 50 GB/s link, one with 1 us of route
// latency and one with 4 us (through a second, fast link). With latency on SimGrid's links the
// shares are weighted 1/1 : 1/4 (40 and 10 GB/s); as a start delay they are equal (25 and 25).
TEST(PlanSimgridTest, LatencyOnLinksWeightsSharesByRouteLatency) {
  testing::ScratchDir dir;
  const std::string path = dir / "two.json";
  std::ofstream(path)
      << R"({"links":[{"gbps":50,"latency_us":1},{"gbps":1000,"latency_us":3}],)"
      << R"("flows":[{"links":[0],"bytes":1000000},{"links":[0,1],"bytes":1000000}]})"
      << "\n";
  // Alone from 1 to 4 us at 50 GB/s (150 kB), then 40 : 10 GB/s until the first finishes.
  std::vector<double> weighted = run_simgrid(dir, path, "links", 2);
  ASSERT_EQ(weighted.size(), 2u);
  EXPECT_NEAR(weighted[0], 4 + 850000 / 40e3, 1e-9);
  EXPECT_NEAR(weighted[1], 41.0, 1e-9);
  std::vector<double> plain = run_simgrid(dir, path, "start", 2);
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_NEAR(plain[0], 4 + 850000 / 25e3, 1e-9);
  EXPECT_NEAR(plain[1], 41.0, 1e-9);
  // The planner agrees with the plain (start-delay) run.
  std::vector<PathFlow> flows = {{{0}, 1e6, 1.0}, {{0, 1}, 1e6, 4.0}};
  std::vector<double> planner = simulate_completion_us({50, 1000}, flows);
  ASSERT_EQ(planner.size(), 2u);
  EXPECT_LE(max_rel_error(planner, plain), kStartTolerance);
}

// (a) One ring step of all rails, ECMP.
TEST(PlanSimgridTest, RingStepLeafSpineRailOptimized) {
  ClusterSpec c = fabric(128, 64, 2, true);  // 1,024 NICs
  expect_one_shot_is_the_makespan(
      compare_with_simgrid(c, ring_step(c, 64 * 1048576.0), "ring 2-tier r64 rail, 1 QP"));
}

TEST(PlanSimgridTest, RingStepLeafSpineFourQueuePairs) {
  ClusterSpec c = fabric(64, 32, 2, true, 4);  // 512 NICs, 2,048 flows
  expect_one_shot_is_the_makespan(
      compare_with_simgrid(c, ring_step(c, 64 * 1048576.0), "ring 2-tier r32 rail, 4 QP"));
}

TEST(PlanSimgridTest, RingStepThreeTierNotRailOptimized) {
  ClusterSpec c = fabric(64, 16, 3, false);  // 512 NICs
  expect_one_shot_is_the_makespan(
      compare_with_simgrid(c, ring_step(c, 64 * 1048576.0), "ring 3-tier r16 no-rail, 1 QP"));
}

// (b) Permutations with unequal sizes: flows finish at different times.
TEST(PlanSimgridTest, PermutationsUnequalSizesLeafSpine) {
  ClusterSpec c = fabric(48, 32, 2, false, 2);  // 384 NICs, 2 permutations x 2 QPs
  expect_one_shot_bounds_the_makespan(
      compare_with_simgrid(c, random_permutations(c, 2, 11), "2 perms 2-tier r32 no-rail, 2 QP"));
}

TEST(PlanSimgridTest, PermutationUnequalSizesThousandNics) {
  ClusterSpec c = fabric(128, 64, 2, true);  // 1,024 NICs
  expect_one_shot_bounds_the_makespan(
      compare_with_simgrid(c, random_permutations(c, 1, 15), "perm 2-tier r64 rail, 1 QP"));
}

TEST(PlanSimgridTest, PermutationsUnequalSizesThreeTier) {
  ClusterSpec c = fabric(32, 16, 3, true, 4);  // 256 NICs, 4 QPs
  expect_one_shot_bounds_the_makespan(
      compare_with_simgrid(c, random_permutations(c, 1, 12), "perm 3-tier r16 rail, 4 QP"));
}

// (c) Failed switch-to-switch links.
TEST(PlanSimgridTest, PermutationsWithFailedLinks) {
  ClusterSpec c = fabric(48, 32, 2, false);  // 384 NICs
  c.failures.random_links = 6;
  c.failures.seed = 3;
  expect_one_shot_bounds_the_makespan(
      compare_with_simgrid(c, random_permutations(c, 2, 13), "2 perms 2-tier r32, 6 failed"));
}

TEST(PlanSimgridTest, RingWithFailedLinksThreeTier) {
  ClusterSpec c = fabric(64, 16, 3, false, 2);
  c.failures.random_links = 10;
  c.failures.seed = 5;
  expect_one_shot_is_the_makespan(
      compare_with_simgrid(c, ring_step(c, 32 * 1048576.0), "ring 3-tier r16, 10 failed, 2 QP"));
}

// (d) Oversubscribed leaves (3 downlinks per uplink).
TEST(PlanSimgridTest, PermutationOversubscribedLeaves) {
  ClusterSpec c = fabric(48, 32, 2, false);
  c.network.oversubscription = 3;
  expect_one_shot_bounds_the_makespan(
      compare_with_simgrid(c, random_permutations(c, 1, 14), "perm 2-tier r32 3:1 oversub"));
}

}  // namespace
}  // namespace tpf::plan
