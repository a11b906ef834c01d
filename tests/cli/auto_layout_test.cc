// This machine as a planner cluster (cli/host_cluster.h) and the planner's choice for
// `tpf train --layout auto` (cli/auto_layout.h), against cases computed by hand; `tpf train
// --layout auto` itself runs in tp_cli_test.cc.
#include "cli/auto_layout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>

#include "cli/host_cluster.h"
#include "model/gpt_config.h"
#include "plan/layout.h"
#include "plan/step_model.h"
#include "support/expect_tpf_error.h"
#include "support/multiproc.h"
#include "tensor/blas.h"

namespace tpf::cli {
namespace {

using testing::RankContext;
using testing::RunOptions;

// Round numbers: 2 cores of 100 GFLOP/s, 1 us per GEMM call, 8 GB/s of element-wise work.
HostRates round_rates() {
  HostRates r;
  r.cpu = "round";
  r.cores = 2;
  r.memory_gb = 16;
  r.gemm_gflops = 100;
  r.gemm_overhead_us = 1;
  r.elementwise_gbps = 8;
  return r;
}

coll::ShmLinkCost round_link() {
  coll::ShmLinkCost link;
  link.step_us = 0.5;
  link.step_us_per_excess_rank = 10;
  link.copy_gbps = 20;
  link.reduce_gbps = 40;
  return link;
}

// A 1 Gb/s link between hosts, 11 us a round.
coll::NetworkLinkCost round_network() {
  coll::NetworkLinkCost network;
  network.step_us = 11;
  network.link_gbps = 0.125;
  return network;
}

// `ranks` ranks of one host on this machine.
plan::ClusterSpec one_host(int ranks) {
  return host_cluster(round_rates(), ranks, {}, round_link(), round_network());
}

TEST(HostCluster, RanksShareTheCoresAndTheLinkPaysForExcessRanks) {
  // 4 ranks on 2 cores: half a core each; two ranks without a core of their own.
  const plan::ClusterSpec four = one_host(4);
  EXPECT_EQ(four.name, "this-host");
  EXPECT_EQ(four.total_gpus(), 4);
  EXPECT_DOUBLE_EQ(four.gpu.fp32_peak_tflops, 0.05);
  EXPECT_DOUBLE_EQ(four.gpu.peak_tflops, 0.05);
  EXPECT_DOUBLE_EQ(four.gpu.max_fp32_gemm_efficiency, 1);
  EXPECT_DOUBLE_EQ(four.gpu.gemm_overhead_us, 2);
  EXPECT_DOUBLE_EQ(four.gpu.hbm_gbps, 4);
  EXPECT_DOUBLE_EQ(four.gpu.memory_gb, 4);
  EXPECT_DOUBLE_EQ(four.scale_up.bandwidth_gbps, 20);
  EXPECT_DOUBLE_EQ(four.scale_up.latency_us, 0.5 + 2 * 10);
  // As many ranks as cores, or fewer: a whole core each (one BLAS thread), no excess.
  for (int ranks : {1, 2}) {
    const plan::ClusterSpec c = one_host(ranks);
    EXPECT_EQ(c.total_gpus(), ranks);
    EXPECT_DOUBLE_EQ(c.gpu.fp32_peak_tflops, 0.1);
    EXPECT_DOUBLE_EQ(c.gpu.hbm_gbps, 8);
    EXPECT_DOUBLE_EQ(c.scale_up.latency_us, 0.5);
  }
}

// Emulated hosts (one machine): a node per host, the machine's cores shared by every rank of
// every host, one NIC per host at the fabric's network rate and round.
TEST(HostCluster, EmulatedHostsShareTheMachinesCoresAndJoinThroughItsNetworkModel) {
  const plan::ClusterSpec two =
      host_cluster(round_rates(), 4, {2, 1}, round_link(), round_network());
  EXPECT_EQ(two.name, "this-host as 2 hosts");
  EXPECT_EQ(two.nodes, 2);
  EXPECT_EQ(two.gpus_per_node, 2);
  EXPECT_DOUBLE_EQ(two.gpu.fp32_peak_tflops, 0.05);  // 2 cores for the machine's 4 ranks
  EXPECT_DOUBLE_EQ(two.gpu.memory_gb, 4);
  EXPECT_DOUBLE_EQ(two.scale_up.latency_us, 0.5 + 2 * 10);  // the machine has 2 excess ranks
  EXPECT_EQ(two.nics_per_node, 1);
  EXPECT_DOUBLE_EQ(two.nic_gbits, 1);
  EXPECT_DOUBLE_EQ(two.nic_latency_us, 11);
  EXPECT_DOUBLE_EQ(two.network.efficiency, 1);
  // Two machines like this one, a host each: every rank has a core.
  const plan::ClusterSpec own =
      host_cluster(round_rates(), 4, {2, 2}, round_link(), round_network());
  EXPECT_EQ(own.name, "this-host x 2 machines, 2 hosts");
  EXPECT_DOUBLE_EQ(own.gpu.fp32_peak_tflops, 0.1);
  EXPECT_DOUBLE_EQ(own.gpu.memory_gb, 8);
  EXPECT_DOUBLE_EQ(own.scale_up.latency_us, 0.5);

  EXPECT_TPF_ERROR(host_cluster(round_rates(), 3, {2, 1}, round_link(), round_network()),
                   ErrorCode::invalid_argument, "3 ranks do not spread evenly over 2 hosts");
  EXPECT_TPF_ERROR(host_cluster(round_rates(), 4, {2, 4}, round_link(), round_network()),
                   ErrorCode::invalid_argument, "over 2 hosts on 4 machines");
  EXPECT_TPF_ERROR(load_cluster_or_host("dgx-h100", 16, {2, 1}), ErrorCode::invalid_argument,
                   "'dgx-h100' says its own nodes");
}

// Data parallelism across 2 hosts of one rank each: the planner's gradient all-reduce moves
// every gradient byte once through the link (a ring of 2: 2 (n - 1) / n = 1), 4 bytes per
// parameter, at 100 Mb/s; its 2 rounds of 11 us are below the tolerance.
TEST(AutoLayout, PricesGradientsAcrossHostsAtTheLinksRate) {
  RunConfig config = preset_config("tiny");
  config.train.grad_accum = 4;
  coll::NetworkLinkCost slow = round_network();
  slow.link_gbps = 0.0125;
  const plan::ClusterSpec hosts = host_cluster(round_rates(), 2, {2, 1}, round_link(), slow);
  plan::CollectivePlanner planner(hosts);
  const plan::StepEstimate e = plan::estimate_step(
      planner_model(config), plan::parse_layout(planner_layout({1, 1, 2, false}, config)), planner);
  const double by_hand = 4.0 * static_cast<double>(parameter_count(config.model)) / 0.0125e9;
  EXPECT_NEAR(e.dp_comm_s, by_hand, 0.01 * by_hand);
  // On one host the same gradients cross shared memory at 20 GB/s: a thousandth of that.
  plan::CollectivePlanner local(one_host(2));
  const plan::StepEstimate here = plan::estimate_step(
      planner_model(config), plan::parse_layout(planner_layout({1, 1, 2, false}, config)), local);
  EXPECT_LT(here.dp_comm_s, 0.01 * by_hand);
}

// The job's spread as the trainer learns it: hosts from the communicator (TPF_NODE_ID here),
// machines from the boot (all of these ranks share this one).
TEST(HostSpread, CountsHostsAndMachinesAndRefusesWhatThePlannerCannotPlace) {
  struct Case {
    std::vector<const char*> host_of_rank;
    std::string refused;  // empty: accepted as 2 hosts on 1 machine
  };
  const std::vector<Case> cases = {
      {{"a", "a", "b", "b"}, ""},
      {{"a", "b", "a", "b"}, "rank 1 is on host 1: the ranks of a host are not consecutive"},
      {{"a", "a", "b"}, "3 ranks on 2 hosts: the hosts hold different numbers of ranks"},
  };
  for (const Case& c : cases) {
    RunOptions options;
    options.deadline = std::chrono::milliseconds(60000);
    testing::expect_all_ok(testing::run_ranks_raw(
        static_cast<int>(c.host_of_rank.size()),
        [&](const RankContext& ctx) {
          ::setenv("TPF_NODE_ID", c.host_of_rank.at(static_cast<size_t>(ctx.rank)), 1);
          Communicator comm = Communicator::create(ctx.rank, ctx.size, ctx.store_address,
                                                   ctx.secret, ctx.comm_options);
          try {
            const HostSpread spread = host_spread(comm);
            TPF_CHILD_CHECK(c.refused.empty(), "accepted a spread it should refuse");
            TPF_CHILD_CHECK(spread.hosts == 2 && spread.machines == 1,
                            "hosts " + std::to_string(spread.hosts) + ", machines " +
                                std::to_string(spread.machines));
          } catch (const Error& e) {
            TPF_CHILD_CHECK(!c.refused.empty() && e.code() == ErrorCode::invalid_argument &&
                                std::string(e.what()).find(c.refused) != std::string::npos,
                            std::string("unexpected error: ") + e.what());
          }
        },
        options));
  }
}

TEST(HostCluster, MeasuresThisMachineAndRestoresTheBlasThreads) {
  set_blas_threads(2);
  const int before = blas_threads();
  const HostRates r = measure_host_rates();
  EXPECT_EQ(blas_threads(), before);
  EXPECT_EQ(r.cores, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  for (double value : {r.memory_gb, r.gemm_gflops, r.elementwise_gbps}) {
    EXPECT_TRUE(std::isfinite(value) && value > 0) << value;
  }
  EXPECT_TRUE(std::isfinite(r.gemm_overhead_us) && r.gemm_overhead_us >= 0);
  EXPECT_FALSE(r.cpu.empty());
}

TEST(AutoLayout, DescribesTheTrainersModelAndLayoutToThePlanner) {
  RunConfig config = preset_config("small");
  config.model.layers = 7;
  config.train.grad_accum = 4;
  config.train.sequence_parallel = true;
  const plan::ModelSpec model = planner_model(config);
  EXPECT_EQ(model.layers, 7);
  EXPECT_EQ(model.hidden, config.model.width);
  EXPECT_EQ(model.ffn(), 4 * config.model.width);
  EXPECT_EQ(model.vocab, 256);
  EXPECT_EQ(model.global_batch, config.train.batch_size * 4);
  // The same parameters as the trainer's model, but for the final LayerNorm (2 x width), which
  // the planner leaves out as Narayanan et al. count.
  EXPECT_DOUBLE_EQ(model.parameters() + 2 * config.model.width,
                   static_cast<double>(parameter_count(config.model)));

  // 7 layers over 3 stages: 2, 3, 2 (the trainer's split) as first= and last=.
  const plan::Layout layout =
      plan::parse_layout(planner_layout(TrainLayout{2, 3, 1, false}, config));
  EXPECT_EQ(layout.tp, 2);
  EXPECT_EQ(layout.pp, 3);
  EXPECT_EQ(layout.first_stage_layers, 2);
  EXPECT_EQ(layout.last_stage_layers, 2);
  EXPECT_EQ(layout.micro_batch, config.train.batch_size);
  EXPECT_EQ(layout.global_batch, config.train.batch_size * 4);
  EXPECT_EQ(layout.precision, plan::Precision::fp32);
  EXPECT_EQ(layout.attention, plan::AttentionKernel::materialized);
  EXPECT_TRUE(layout.sequence_parallel);
  EXPECT_TRUE(layout.overlap.dp_grads);
  EXPECT_FALSE(layout.overlap.tp);
  EXPECT_TRUE(layout.overlap.pp);  // the pipeline's sends are asynchronous
  // A gradient bucket per block: a layer's parameters on one of the 2 TP ranks (12 w^2 + 13 w in
  // all, of which the two LayerNorms' 4 w and the two row-parallel biases' 2 w are replicated).
  const double w = static_cast<double>(config.model.width);
  EXPECT_EQ(layout.bucket_params, static_cast<int>((12 * w * w + 7 * w) / 2 + 6 * w));
  EXPECT_EQ(layout.zero, 0);
  const plan::Layout zero1 = plan::parse_layout(planner_layout(TrainLayout{1, 1, 2, true}, config));
  EXPECT_EQ(zero1.zero, 1);
  EXPECT_FALSE(zero1.sequence_parallel);  // tp = 1: nothing to shard over
}

// Interleaved layouts are ranked where pp x vp divides the layers; the planner hears vp and the
// equal chunks (no first=/last=), and prices the smaller bubble.
TEST(AutoLayout, RanksInterleavedStagesWhereTheLayersDivide) {
  RunConfig config = preset_config("tiny");
  config.model.layers = 4;
  config.train.grad_accum = 4;
  TrainLayout interleaved{1, 2, 1, false};
  interleaved.vp = 2;
  const plan::Layout layout = plan::parse_layout(planner_layout(interleaved, config));
  EXPECT_EQ(layout.virtual_stages, 2);
  EXPECT_EQ(layout.first_stage_layers, 0);
  EXPECT_EQ(layout.last_stage_layers, 0);

  const LayoutChoice choice = choose_train_layout(config, 2, one_host(2));
  // tp=2, pp=2, pp=2,vp=2, dp=2, dp=2,zero1 (pp=2,vp=4 would need 8 layers).
  ASSERT_EQ(choice.candidates.size(), 5u) << choice.explanation;
  double plain = 0, chunked = 0;
  for (const LayoutCandidate& c : choice.candidates) {
    if (c.layout.pp == 2) (c.layout.vp == 2 ? chunked : plain) = c.tokens_per_s;
  }
  EXPECT_GT(plain, 0) << choice.explanation;
  EXPECT_GT(chunked, plain) << choice.explanation;
}

TEST(AutoLayout, PicksTheFastestLayoutTheTrainerAccepts) {
  RunConfig config = preset_config("tiny");  // 2 layers, 4 heads
  config.train.grad_accum = 4;
  const LayoutChoice choice = choose_train_layout(config, 4, one_host(4));
  // tp x pp x dp = 4: 6 layouts, 3 of them with dp > 1 and so also with ZeRO-1.
  ASSERT_EQ(choice.candidates.size(), 9u);
  for (size_t i = 1; i < choice.candidates.size(); ++i) {
    EXPECT_GE(choice.candidates[i - 1].tokens_per_s, choice.candidates[i].tokens_per_s);
  }
  EXPECT_EQ(choice.chosen.to_string(), choice.candidates.front().layout.to_string());
  EXPECT_GT(choice.candidates.front().tokens_per_s, 0);
  bool pp4_refused = false;
  for (const LayoutCandidate& c : choice.candidates) {
    if (c.layout.pp == 4) {
      pp4_refused = c.tokens_per_s == 0 && c.summary.find("only 2 layers") != std::string::npos;
    }
  }
  EXPECT_TRUE(pp4_refused);
  EXPECT_NE(choice.explanation.find("--layout auto chose " + choice.chosen.to_string()),
            std::string::npos)
      << choice.explanation;
  EXPECT_NE(choice.explanation.find("this-host"), std::string::npos);

  // tpf train --predict's prediction of one layout is the ranking's.
  for (const LayoutCandidate& c : choice.candidates) {
    const LayoutCandidate alone = predict_train_layout(c.layout, config, one_host(4));
    EXPECT_EQ(alone.tokens_per_s, c.tokens_per_s) << c.layout.to_string();
    EXPECT_EQ(alone.summary, c.summary);
  }

  // 3 ranks: 3 divides neither the heads, the layers nor the micro-batches; every reason listed.
  EXPECT_TPF_ERROR(choose_train_layout(config, 3, one_host(3)), ErrorCode::invalid_argument,
                   "no layout of 3 ranks can run", "tp=3", "attention heads", "pp=3", "dp=3");
}

}  // namespace
}  // namespace tpf::cli
