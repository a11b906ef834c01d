// Mixture-of-experts models and expert parallelism in the planner, each term against a case
// computed by hand: parameters (total and active), the experts' grouped GEMMs and the router,
// the all-to-alls (inside a node and across nodes, where the NICs bound them), expert-data-
// parallel gradients and sharded state, the capacity factor, the layout errors and the search.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "plan/cluster.h"
#include "plan/collective_planner.h"
#include "plan/compute_model.h"
#include "plan/layout.h"
#include "plan/layout_search.h"
#include "plan/model_spec.h"
#include "plan/step_model.h"
#include "support/expect_tpf_error.h"

namespace tpf::plan {
namespace {

#define EXPECT_INVALID(statement, ...) \
  EXPECT_TPF_ERROR(statement, ::tpf::ErrorCode::invalid_argument, __VA_ARGS__)

using coll::Collective;

StepEstimate estimate(const ModelSpec& model, const std::string& layout, int gpus) {
  CollectivePlanner planner(cluster_preset("dgx-h100", gpus));
  return estimate_step(model, parse_layout(layout), planner);
}

// A small Llama-style model, dense or with `experts` MLPs of which `top_k` run per token.
ModelSpec small_model(int experts, int top_k) {
  ModelSpec m = model_preset("mixtral-8x7b");
  m.name = "small";
  m.layers = 4;
  m.experts = experts;
  m.top_k = top_k;
  m.global_batch = 64;
  return m;
}

TEST(PlanMixtureOfExperts, ParametersTotalAndActive) {
  const ModelSpec m = model_preset("mixtral-8x7b");
  const double h = 4096, f = 14336, kv = 1024, v = 32000, l = 32, s = 4096;
  const double attention = 2 * h * h + 2 * h * kv, expert = 3 * h * f;
  const LayerParameters layer = m.layer_parameters();
  EXPECT_DOUBLE_EQ(layer.sharded, attention);
  EXPECT_DOUBLE_EQ(layer.experts, 8 * expert);
  EXPECT_DOUBLE_EQ(layer.replicated, 2 * h + 8 * h);  // two RMSNorms and the h x 8 router
  // Mistral AI: 46.7B parameters, 12.9B active (Jiang et al. 2024); the Hugging Face
  // checkpoint has 46,702,792,704 with the final norm (h), which this count leaves out.
  EXPECT_DOUBLE_EQ(m.parameters() + h, 46702792704.0);
  EXPECT_NEAR(m.active_parameters() / 12.9e9, 1, 0.005);
  EXPECT_NEAR(model_preset("mixtral-8x22b").parameters() / 141e9, 1, 0.005);
  EXPECT_NEAR(model_preset("mixtral-8x22b").active_parameters() / 39e9, 1, 0.01);
  // FLOPs count the router and the two experts a token passes through.
  EXPECT_DOUBLE_EQ(m.step_flops(1),
                   s * (6 * l * (attention + 8 * h + 2 * expert) + 12 * l * s * h + 6 * h * v));
}

TEST(PlanMixtureOfExperts, ExpertGemmsAndRoutingOnAHandComputedCase) {
  // One expert per token and one expert per GPU: each GPU's expert GEMMs have the dense MLP's
  // shapes (its s b tokens in, on balanced routing), so what the MoE model adds to the compute is
  // the router and the token permutations, plus the permuted inputs' element-wise traffic.
  const ModelSpec dense = small_model(0, 0), moe = small_model(8, 1);
  const std::string layout = "tp=1,pp=1,dp=8,mb=1";
  const StepEstimate d = estimate(dense, layout, 8), e = estimate(moe, layout + ",ep=8", 8);
  const ComputeModel gpu(cluster_preset("dgx-h100", 8).gpu, Precision::bf16);
  const double tokens = 4096, h = 4096, micro_batches = 64 / 8;
  const GemmShape router{tokens, 8, h};
  const double permute_bytes = 2 * (1 + 1) * tokens * h * 2;  // read 1 + write 1, then back
  const double permuted_inputs = 2 * tokens * h;              // activation bytes kept
  const double per_layer = gpu.gemm_s(router) + gpu.gemm_backward_s(router) +
                           3 * gpu.memory_s(permute_bytes) + 3 * gpu.memory_s(2 * permuted_inputs);
  EXPECT_NEAR(e.breakdown.compute_s - d.breakdown.compute_s, micro_batches * 4 * per_layer, 1e-9);
  // Two all-to-alls of the s b h routed tokens forward and two backward, per layer.
  CollectivePlanner planner(cluster_preset("dgx-h100", 8));
  const double a2a = planner.estimate(Collective::all_to_all, tokens * h * 2, {8, 1}).us * 1e-6;
  EXPECT_NEAR(e.breakdown.ep_comm_s, micro_batches * 4 * 4 * a2a, 1e-12);
  EXPECT_EQ(d.breakdown.ep_comm_s, 0);
  // The same number of FLOPs, bar the router's.
  EXPECT_NEAR(moe.step_flops(1) - dense.step_flops(1), 3 * 4096 * 4 * 2 * h * 8, 1);
}

TEST(PlanMixtureOfExperts, AllToAllAcrossNodesIsBoundByTheNics) {
  // A GPU's NIC carries the pieces for every GPU off its node: bytes (n - per node) / n. On the
  // rail-optimized fabric the pairwise steps stay on their rails, so they run at the NIC's rate
  // (4 GiB makes the per-step latency, a few microseconds, negligible: within 0.1 %).
  const ClusterSpec cluster = cluster_preset("dgx-h100", 64);
  CollectivePlanner planner(cluster);
  const double nic = cluster.nic_gbps() * cluster.network.efficiency * 1e9;
  const double bytes = 4.0 * (1 << 30);
  struct Case {
    GroupShape group;
    double off_node;  // fraction of the buffer that leaves the node
  };
  for (const Case& c : {Case{{64, 1}, 56.0 / 64}, Case{{16, 1}, 8.0 / 16}, Case{{8, 8}, 7.0 / 8},
                        Case{{16, 4}, 14.0 / 16}}) {
    const CollectiveEstimate e = planner.estimate(Collective::all_to_all, bytes, c.group);
    EXPECT_TRUE(e.crosses_network) << c.group.size << "/" << c.group.stride;
    EXPECT_EQ(e.algorithm, "pairwise(pxn)");
    EXPECT_NEAR(e.us * 1e-6 / (bytes * c.off_node / nic), 1, 1e-3)
        << c.group.size << "/" << c.group.stride;
  }
  // Inside a node it stays on NVLink.
  EXPECT_FALSE(planner.estimate(Collective::all_to_all, bytes, {8, 1}).crosses_network);
  // On an oversubscribed Ethernet fabric, never faster than the NICs allow.
  const ClusterSpec ethernet = cluster_preset("h100-ethernet", 256);
  CollectivePlanner eth(ethernet);
  const double eth_nic = ethernet.nic_gbps() * ethernet.network.efficiency * 1e9;
  const CollectiveEstimate wide = eth.estimate(Collective::all_to_all, bytes, {256, 1});
  EXPECT_GE(wide.us * 1e-6, bytes * 248.0 / 256 / eth_nic * (1 - 1e-9));
}

TEST(PlanMixtureOfExperts, ExpertStateShardsOverExpertParallelismAndItsDataParallelGroup) {
  const ModelSpec m = model_preset("mixtral-8x7b");
  const LayerParameters layer = m.layer_parameters();
  const double dense = 32 * (layer.sharded + layer.replicated) + 2 * 32000.0 * 4096;
  const double experts = 32 * layer.experts;
  // dp = 16, ep = 4: each GPU holds a quarter of the experts; ZeRO-1 shards the dense optimizer
  // state over 16 ranks and the experts' over the 4 that hold the same experts.
  const StepEstimate e = estimate(m, "tp=1,pp=1,dp=16,ep=4,zero=1,gb=256", 16);
  EXPECT_NEAR(e.memory.weights_gb * 1e9, 2 * (dense + experts / 4), 1);
  EXPECT_NEAR(e.memory.optimizer_gb * 1e9, 12 * (dense / 16 + experts / 4 / 4), 1);
  // The expert gradients reduce over dp / ep ranks: the fewer, the less traffic, none at ep = dp.
  double previous = 1e30;
  for (int ep : {1, 2, 4, 8}) {
    const StepEstimate s = estimate(m, "tp=1,pp=1,dp=8,gb=256,ep=" + std::to_string(ep), 8);
    EXPECT_LT(s.dp_comm_s, previous) << ep;
    previous = s.dp_comm_s;
    EXPECT_EQ(s.dp_reduction.algorithm.find("experts:") == std::string::npos, ep == 8) << ep;
  }
}

TEST(PlanMixtureOfExperts, FoldingRegroupsTheStageRanksForTheExperts) {
  // tp = 2, dp = 8 on 16 GPUs. Unfolded (etp = tp) an EP group of 8 takes every second GPU, two
  // nodes; folded with etp = 1 it is 8 consecutive GPUs, one node, and each expert is whole on
  // its GPU.
  Layout unfolded = parse_layout("tp=2,sp=1,dp=8,ep=8");
  Layout folded = parse_layout("tp=2,sp=1,dp=8,ep=8,etp=1");
  EXPECT_EQ(unfolded.expert_group().stride, 2);
  EXPECT_EQ(unfolded.expert_tp_group().size, 2);
  EXPECT_EQ(folded.expert_group().size, 8);
  EXPECT_EQ(folded.expert_group().stride, 1);
  EXPECT_EQ(folded.expert_tp_group().size, 1);
  EXPECT_EQ(folded.expert_gradient_group().size, 2);
  EXPECT_EQ(folded.expert_gradient_group().stride, 8);
  EXPECT_EQ(folded.to_string().find(",ep=8,etp=1") != std::string::npos, true);
  const ModelSpec m = model_preset("mixtral-8x7b");
  const StepEstimate a = estimate(m, unfolded.to_string(), 16);
  const StepEstimate b = estimate(m, folded.to_string(), 16);
  // Weights: the experts 1/(etp x ep) per GPU.
  const LayerParameters layer = m.layer_parameters();
  EXPECT_NEAR((b.memory.weights_gb - a.memory.weights_gb) * 1e9,
              2 * 32 * (layer.experts / 8 - layer.experts / 16), 1);
  // The same expert FLOPs per GPU; the folded all-to-all stays on NVLink.
  EXPECT_LT(b.breakdown.ep_comm_s, a.breakdown.ep_comm_s / 2);
  CollectivePlanner planner(cluster_preset("dgx-h100", 16));
  const double bytes = 4096.0 / 2 * 2 * 4096 * 2;  // s b / t tokens, 2 experts each, h, bf16
  EXPECT_NEAR(b.breakdown.ep_comm_s,
              256 / 8 * 32 * 4 * planner.estimate(Collective::all_to_all, bytes, {8, 1}).us * 1e-6,
              1e-9);
  EXPECT_NEAR(a.breakdown.ep_comm_s,
              256 / 8 * 32 * 4 * planner.estimate(Collective::all_to_all, bytes, {8, 2}).us * 1e-6,
              1e-9);
}

TEST(PlanMixtureOfExperts, CapacityPadsTheExpertsWorkAndTraffic) {
  const ModelSpec m = model_preset("mixtral-8x7b");
  const std::string layout = "tp=1,pp=4,dp=16,vp=8,ep=8,gb=256";
  const StepEstimate even = estimate(m, layout, 64);
  const StepEstimate padded = estimate(m, layout + ",capacity=1.25", 64);
  EXPECT_EQ(padded.layout.to_string().find("capacity=1.25") != std::string::npos, true);
  // The all-to-alls carry 1.25 x the tokens (NVLink, large messages: within 1 %).
  EXPECT_NEAR(padded.breakdown.ep_comm_s / even.breakdown.ep_comm_s, 1.25, 0.01);
  EXPECT_GT(padded.breakdown.compute_s, even.breakdown.compute_s);
  EXPECT_GT(padded.memory.activations_gb, even.memory.activations_gb);
}

TEST(PlanMixtureOfExperts, ImpossibleLayoutsAndModelsAreNamed) {
  const ModelSpec m = model_preset("mixtral-8x7b");
  EXPECT_INVALID(estimate(model_preset("llama3-8b"), "tp=1,dp=8,ep=2", 8), "ep, etp and capacity",
                 "'llama3-8b' has no experts");
  EXPECT_INVALID(estimate(m, "tp=1,dp=24,ep=3,gb=240", 24), "experts (8) are not divisible by ep");
  EXPECT_INVALID(estimate(m, "tp=2,sp=1,dp=4,ep=8", 8), "ep (8) must divide dp x cp = 4");
  EXPECT_INVALID(estimate(m, "tp=2,dp=4,ep=4", 8), "tp > 1 needs sp=1");
  EXPECT_INVALID(estimate(m, "tp=2,sp=1,dp=4,ep=8,etp=2", 8), "ep (8) must divide dp x cp = 4",
                 "etp=");
  EXPECT_INVALID(estimate(m, "tp=2,sp=1,dp=4,ep=8,etp=4", 8), "ep x etp = 32", "tp x cp x dp = 8");
  EXPECT_INVALID(estimate(m, "tp=2,sp=1,dp=2,pp=2,ep=4,etp=1,order=tp-pp-dp", 8),
                 "etp= needs pp outermost");
  EXPECT_INVALID(estimate(m, "tp=1,dp=8,ep=8,etp=3", 8), "MLP width (14336)",
                 "expert TP degree (3)");
  EXPECT_INVALID(parse_layout("capacity=0"), "capacity=0", "positive number");
  EXPECT_INVALID(parse_layout("capacity=x"), "capacity=x", "positive number");
  EXPECT_INVALID(
      parse_model_yaml("layers: 2\nhidden: 64\nheads: 4\nexperts: 4\ntop_k: 5\n", "m.yaml"),
      "m.yaml", "top_k (5)", "between 1 and experts (4)");
  EXPECT_INVALID(parse_model_yaml("layers: 2\nhidden: 64\nheads: 4\ntop_k: 2\n", "m.yaml"),
                 "top_k (2)", "applies to a mixture of experts", "experts (0)");
  const ModelSpec read = parse_model_yaml(model_to_yaml(m), "round-trip");
  EXPECT_EQ(read.experts, 8);
  EXPECT_EQ(read.active_experts(), 2);
}

TEST(PlanMixtureOfExperts, SearchTriesExpertParallelismWhereTheModelHasExperts) {
  CollectivePlanner planner(cluster_preset("dgx-h100", 64));
  const SearchResult moe = search_layouts(model_preset("mixtral-8x7b"), planner, {});
  ASSERT_GT(moe.fitting, 0);
  // The winner splits the experts; layouts that do not were tried too.
  EXPECT_GT(moe.ranked.front().layout.ep, 1);
  bool tried_without = false;
  for (const StepEstimate& e : moe.ranked) tried_without = tried_without || e.layout.ep == 1;
  EXPECT_TRUE(tried_without);
  const SearchResult dense = search_layouts(model_preset("llama3-8b"), planner, {});
  for (const StepEstimate& e : dense.ranked) EXPECT_EQ(e.layout.ep, 1);
  // Nor does it explain a dense model's best by expert choices.
  for (const std::string& why : dense.why_best) EXPECT_EQ(why.find("expert"), std::string::npos);
  bool explains_experts = false;
  for (const std::string& why : moe.why_best)
    explains_experts = explains_experts || why.find("expert parallelism") == 0;
  EXPECT_TRUE(explains_experts);
}

}  // namespace
}  // namespace tpf::plan
