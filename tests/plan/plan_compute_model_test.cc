// The planner's compute model and the model/layout terms that feed it, each against a case
// computed by hand: GEMM time as a roofline plus a fixed cost, FP8 and fused attention, the
// parameters and FLOPs of GQA/SwiGLU models, uneven pipeline stages, and what overlapping TP,
// PP and DP communication hides.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

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

// Round numbers: 1000 TFLOP/s BF16, 2000 FP8, 1000 GB/s, e_max 0.5 (0.25 FP8), 10 us per GEMM;
// fused attention 0.4 at large sizes, halved at 1000 keys and at 10,000 query rows.
AcceleratorSpec round_gpu() {
  AcceleratorSpec gpu;
  gpu.name = "round";
  gpu.peak_tflops = 1000;
  gpu.fp8_peak_tflops = 2000;
  gpu.hbm_gbps = 1000;
  gpu.max_gemm_efficiency = 0.5;
  gpu.max_fp8_gemm_efficiency = 0.25;
  gpu.gemm_overhead_us = 10;
  gpu.attention_efficiency = 0.4;
  gpu.attention_half_keys = 1000;
  gpu.attention_half_rows = 10000;
  return gpu;
}

TEST(PlanComputeModel, GemmIsARooflinePlusAFixedCost) {
  const AcceleratorSpec gpu = round_gpu();
  const ComputeModel bf16(gpu, Precision::bf16);
  // 8192^3: 2 * 8192^3 = 1.0995e12 FLOPs at 500 TFLOP/s = 2.199 ms; bytes 3 * 8192^2 * 2 =
  // 402.7 MB at 1000 GB/s = 0.403 ms: compute-bound. Plus 10 us.
  const GemmShape big{8192, 8192, 8192};
  EXPECT_NEAR(bf16.gemm_s(big), 2.0 * 8192 * 8192 * 8192 / 500e12 + 10e-6, 1e-12);
  // A thin GEMM, 8192 x 8192 x 64: 8.59 GFLOPs = 17.2 us of compute; bytes (8192*64 * 2 +
  // 64*8192 * 2 + 8192^2 * 2) = 136.3 MB = 136.3 us: memory-bound.
  const GemmShape thin{8192, 8192, 64};
  const double thin_bytes = (8192.0 * 64 * 2 + 64.0 * 8192 * 2 + 8192.0 * 8192 * 2);
  EXPECT_NEAR(bf16.gemm_s(thin), thin_bytes / 1000e9 + 10e-6, 1e-12);
  // Efficiency keeps growing with each dimension and never passes e_max.
  double previous = 0;
  for (double k : {128.0, 512.0, 2048.0, 8192.0, 32768.0}) {
    const double e = bf16.gemm_efficiency({4096, 4096, k});
    EXPECT_GT(e, previous) << k;
    EXPECT_LT(e, 0.5);
    previous = e;
  }
  EXPECT_GT(previous, 0.49);
  // Backward: the input-gradient GEMM (m x k x n) and the weight-gradient GEMM (k x n x m).
  const GemmShape g{4096, 1024, 256};
  EXPECT_DOUBLE_EQ(bf16.gemm_backward_s(g),
                   bf16.gemm_s({4096, 256, 1024}) + bf16.gemm_s({256, 1024, 4096}));
  // Batched GEMMs (heads) cost count times the FLOPs and bytes, one fixed cost.
  EXPECT_NEAR(bf16.gemm_s({2048, 2048, 128, 16}) - 10e-6,
              16 * (bf16.gemm_s({2048, 2048, 128}) - 10e-6), 1e-12);
}

TEST(PlanComputeModel, Fp8AndFusedAttention) {
  const AcceleratorSpec gpu = round_gpu();
  const ComputeModel fp8(gpu, Precision::fp8);
  // FP8: 2000 TFLOP/s x 0.25 = 500 TFLOP/s, as BF16 here, but inputs of one byte: the thin GEMM
  // moves 8192*64 + 64*8192 + 8192^2 * 2 bytes.
  EXPECT_NEAR(fp8.gemm_s({8192, 8192, 64}),
              (8192.0 * 64 + 64.0 * 8192 + 8192.0 * 8192 * 2) / 1000e9 + 10e-6, 1e-12);
  EXPECT_DOUBLE_EQ(fp8.gemm_peak(), 2000e12);
  // Fused causal attention, in either precision: half the model FLOPs at 40 % of the BF16 peak
  // times keys / (keys + 1000) times rows / (rows + 10,000). 10 heads of 1000 queries against
  // 1000 keys, head width 100: 4e9 FLOPs at 0.4 x 0.5 x 0.5 = 0.1 of peak, the half computed.
  const AttentionShape small{10, 1000, 1000, 100};
  EXPECT_DOUBLE_EQ(small.flops(), 4e9);
  EXPECT_NEAR(fp8.attention_efficiency(small), 0.1, 1e-15);
  EXPECT_NEAR(fp8.flash_attention_s(small), 0.5 * 4e9 / 100e12, 1e-15);
  // Under context parallelism the keys are the whole context: 3000 keys give 0.75, 2000 query
  // rows 1/6.
  EXPECT_NEAR(fp8.attention_efficiency({2, 1000, 3000, 100}), 0.4 * 0.75 / 6, 1e-15);
  // Large sizes approach the 0.4.
  EXPECT_GT(fp8.attention_efficiency({64, 1e6, 1e6, 128}), 0.399);
  AcceleratorSpec a100 = cluster_preset("dgx-a100", 8).gpu;
  EXPECT_INVALID(ComputeModel(a100, Precision::fp8), "precision=fp8", "A100-SXM-80GB",
                 "fp8_peak_tflops");
}

TEST(PlanComputeModel, Fp32HasItsOwnRateAndFourByteOperands) {
  AcceleratorSpec gpu = round_gpu();
  gpu.fp32_peak_tflops = 100;
  gpu.max_fp32_gemm_efficiency = 0.5;
  const ComputeModel fp32(gpu, Precision::fp32);
  EXPECT_DOUBLE_EQ(fp32.gemm_peak(), 100e12);
  // 8192^3 at 50 TFLOP/s: 22 ms, compute-bound; plus 10 us.
  EXPECT_NEAR(fp32.gemm_s({8192, 8192, 8192}), 2.0 * 8192 * 8192 * 8192 / 50e12 + 10e-6, 1e-12);
  // The thin GEMM moves A, B and C at 4 bytes each: 8.59 GFLOPs = 172 us of compute, 270 MB =
  // 270 us at 1000 GB/s: memory-bound.
  EXPECT_NEAR(fp32.gemm_s({8192, 8192, 64}),
              (8192.0 * 64 + 64.0 * 8192 + 8192.0 * 8192) * 4 / 1000e9 + 10e-6, 1e-12);
  AcceleratorSpec no_fp32 = round_gpu();
  EXPECT_INVALID(ComputeModel(no_fp32, Precision::fp32), "precision=fp32", "round",
                 "fp32_peak_tflops");
}

TEST(PlanModelFamilies, ParametersAndFlopsOfGqaAndSwiGlu) {
  const ModelSpec m = model_preset("llama3-8b");
  const double h = 4096, f = 14336, kv = 1024, v = 128256, l = 32, s = 8192;
  // Per layer: Q and output h^2 each, K and V h x 1024 each, three h x f MLP matrices, two
  // RMSNorm scales; no biases, no position weights, untied output layer.
  const double layer = 2 * h * h + 2 * h * kv + 3 * h * f;
  EXPECT_DOUBLE_EQ(m.layer_gemm_weights(), layer);
  EXPECT_DOUBLE_EQ(m.layer_parameters().sharded, layer);
  EXPECT_DOUBLE_EQ(m.layer_parameters().replicated, 2 * h);
  EXPECT_DOUBLE_EQ(m.parameters(), l * (layer + 2 * h) + 2 * v * h);
  // FLOPs: 6 per weight and token, plus 12 s h per layer for attention, plus 6 h V for logits.
  EXPECT_DOUBLE_EQ(m.step_flops(1), s * (6 * l * layer + 12 * l * s * h + 6 * h * v));
  // A GPT keeps its count: 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)) (Narayanan et al. eq. 2).
  const ModelSpec gpt = model_preset("gpt-175b");
  const double gh = gpt.hidden, gl = gpt.layers;
  EXPECT_NEAR(gpt.parameters(),
              12 * gl * gh * gh * (1 + 13 / (12 * gh) + (51200.0 + 2048) / (12 * gl * gh)), 1);
}

TEST(PlanModelFamilies, YamlKeysAndTheirErrors) {
  const ModelSpec m = parse_model_yaml(
      "layers: 4\nhidden: 256\nheads: 8\nkv_heads: 2\nmlp: swiglu\nnorm: rmsnorm\n"
      "biases: false\npositions: rope\ntied_embeddings: false\n",
      "llama.yaml");
  EXPECT_EQ(m.query_groups(), 2);
  EXPECT_DOUBLE_EQ(m.kv_width(), 64);
  EXPECT_TRUE(m.gated_mlp && m.rms_norm && !m.biases && !m.learned_positions && !m.tied_embeddings);
  EXPECT_INVALID(parse_model_yaml("layers: 4\nhidden: 256\nheads: 4\nmlp: relu\n", "m.yaml"),
                 "m.yaml", "mlp", "'relu'", "gelu or swiglu");
  EXPECT_INVALID(parse_model_yaml("layers: 4\nhidden: 256\nheads: 8\nkv_heads: 3\n", "m.yaml"),
                 "kv_heads (3)", "divide heads (8)");
}

StepEstimate estimate(const ModelSpec& model, const std::string& layout, int gpus,
                      const std::string& cluster = "dgx-h100") {
  CollectivePlanner planner(cluster_preset(cluster, gpus));
  return estimate_step(model, parse_layout(layout), planner);
}

TEST(PlanLayoutTerms, UnevenStagesAndTheirErrors) {
  const ModelSpec m = model_preset("llama3-405b");
  EXPECT_EQ(layers_per_stage(m, parse_layout("tp=8,pp=16,first=7,last=7")),
            (std::vector<int>{7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7}));
  EXPECT_EQ(layers_per_stage(m, parse_layout("pp=4,first=30")), (std::vector<int>{30, 32, 32, 32}));
  EXPECT_EQ(layers_per_stage(model_preset("gpt-175b"), parse_layout("pp=8")),
            std::vector<int>(8, 12));
  EXPECT_INVALID(layers_per_stage(m, parse_layout("pp=16")), "layers (126)", "first= and last=");
  EXPECT_INVALID(layers_per_stage(m, parse_layout("pp=16,first=8,last=8")),
                 "leave 110, which do not split evenly over the other 14 stages");
  EXPECT_INVALID(layers_per_stage(m, parse_layout("pp=1,first=8")), "need pp >= 2");
  EXPECT_INVALID(layers_per_stage(m, parse_layout("pp=2,first=60,last=60")),
                 "leave 6, which no other stage takes");
  EXPECT_INVALID(layers_per_stage(m, parse_layout("pp=16,vp=8,first=7,last=7")),
                 "stage 0 has 7 layers, fewer than vp = 8");
  // Priced per stage: with 7-layer end stages the largest stage is a middle one, 8 layers of
  // weights (7 layers plus the 128256 x 16384 / 8 embedding shard is less), and stage 1 holds
  // 15 micro-batches of 8 layers against stage 0's 16 of 7.
  const StepEstimate e =
      estimate(m, "tp=8,pp=16,dp=1,mb=1,gb=16,sp=1,first=7,last=7,recompute=full", 128);
  const LayerParameters layer = m.layer_parameters();
  EXPECT_NEAR(e.memory.weights_gb, 8 * (layer.sharded / 8 + layer.replicated) * 2 / 1e9, 1e-9);
  const double layer_input = 8192.0 * 16384 * 2 / 8;  // what full recomputation keeps, SP-split
  EXPECT_GT(e.memory.activations_gb, 120 * layer_input / 1e9);
  EXPECT_LT(e.memory.activations_gb, 121 * layer_input / 1e9 + 3);  // plus one layer rebuilt
}

TEST(PlanLayoutTerms, ImpossibleCombinationsAreNamed) {
  const ClusterSpec h100 = cluster_preset("dgx-h100", 16);
  const ClusterSpec a100 = cluster_preset("dgx-a100", 8);
  // 8 key/value heads do not split over 16 TP ranks.
  EXPECT_INVALID(validate_layout(model_preset("llama3-70b"), parse_layout("tp=16,gb=16"), h100),
                 "key/value heads (8)", "tp");
  EXPECT_INVALID(
      validate_layout(model_preset("gpt-1.3b"), parse_layout("tp=8,precision=fp8"), a100),
      "precision=fp8", "A100-SXM-80GB");
  EXPECT_INVALID(
      validate_layout(model_preset("gpt-1.3b"), parse_layout("tp=8,overlap=tp+dp_grads"), a100),
      "overlap=tp needs sp=1");
}

TEST(PlanLayoutTerms, OverlapHidesWhatTheComputationCovers) {
  const ModelSpec m = model_preset("gpt-175b");
  const std::string base = "tp=8,pp=8,dp=16,mb=1,sp=1,zero=1,vp=2";
  const StepEstimate plain = estimate(m, base + ",overlap=none", 1024);
  const StepEstimate grads = estimate(m, base + ",overlap=dp_grads", 1024);
  const StepEstimate params = estimate(m, base + ",overlap=dp_grads+dp_params", 1024);
  const StepEstimate tp = estimate(m, base + ",overlap=tp+dp_grads+dp_params", 1024);
  const StepEstimate pp = estimate(m, base + ",overlap=tp+pp+dp_grads+dp_params", 1024);
  // Nothing overlapped: the whole reduction is exposed.
  EXPECT_NEAR(plain.breakdown.dp_exposed_s, plain.dp_comm_s, 1e-12);
  EXPECT_LT(grads.breakdown.dp_exposed_s, plain.breakdown.dp_exposed_s);
  EXPECT_LT(params.breakdown.dp_exposed_s, grads.breakdown.dp_exposed_s);
  EXPECT_DOUBLE_EQ(params.dp_comm_s, plain.dp_comm_s);  // the same bytes move either way
  // TP: the layers' all-gathers and reduce-scatters (2bsh bytes, well under their GEMMs here)
  // hide entirely; what is left is the output layer's all-gather forward and reduce-scatter
  // backward on the last, slowest stage, for each of the m = 1536 / 16 micro-batches. Compute
  // is unchanged.
  const double bytes = 2048.0 * 12288 * 2;
  const GroupShape group = params.layout.group_of(ParallelDim::tp);
  CollectivePlanner planner(cluster_preset("dgx-h100", 1024));
  const double output_layer_us =
      planner.estimate(coll::Collective::all_gather, bytes, group).us +
      planner.estimate(coll::Collective::reduce_scatter, bytes, group).us;
  EXPECT_GT(params.breakdown.tp_comm_s, 10 * 96 * output_layer_us * 1e-6);
  EXPECT_NEAR(tp.breakdown.tp_comm_s, 96 * output_layer_us * 1e-6, 1e-9);
  EXPECT_DOUBLE_EQ(tp.breakdown.compute_s, params.breakdown.compute_s);
  // PP: sends hide behind the chunk computed meanwhile; only the embedding-gradient exchange is
  // left.
  EXPECT_LT(pp.breakdown.pp_comm_s, tp.breakdown.pp_comm_s);
  EXPECT_LT(pp.step_s, tp.step_s);
}

// Gradient buckets (bucket=): one bucket holding a stage's whole gradient is ready only when the
// last backward pass ends, so all of its reduction is exposed; smaller buckets start reducing
// earlier and expose less. The bytes are the same.
TEST(PlanLayoutTerms, SmallerBucketsStartTheGradientReductionEarlier) {
  const ModelSpec m = model_preset("gpt-1.3b");
  const std::string base = "tp=8,dp=4,mb=1,gb=4";
  const StepEstimate one = estimate(m, base + ",bucket=1000000000", 32);
  const StepEstimate megatron = estimate(m, base, 32);  // 40M parameters a bucket
  const StepEstimate small = estimate(m, base + ",bucket=4000000", 32);
  std::printf("exposed DP: one bucket %.3g s, 40M %.3g s, 4M %.3g s (of %.3g s)\n",
              one.breakdown.dp_exposed_s, megatron.breakdown.dp_exposed_s,
              small.breakdown.dp_exposed_s, one.dp_comm_s);
  EXPECT_NEAR(one.breakdown.dp_exposed_s, one.dp_comm_s, 1e-12);
  EXPECT_LT(megatron.breakdown.dp_exposed_s, one.breakdown.dp_exposed_s);
  EXPECT_LT(small.breakdown.dp_exposed_s, megatron.breakdown.dp_exposed_s);
  EXPECT_NEAR(small.dp_comm_s, one.dp_comm_s, 0.05 * one.dp_comm_s);  // plus 40 steps' latency
  EXPECT_EQ(parse_layout(base + ",bucket=4000000").to_string(),
            "tp=8,pp=1,dp=4,mb=1,gb=4,sp=0,vp=1,recompute=none,order=tp-dp-pp,zero=0,"
            "precision=bf16,attention=flash,overlap=dp_grads,bucket=4000000");
  EXPECT_INVALID(parse_layout("bucket=0"), "bucket=0", "at least 1");
}

// Context parallelism: CP ranks sit right outside TP's; gradients reduce over DP x CP; each
// rank holds and computes a cp-th of every sequence (attending to all of it).
TEST(PlanLayoutTerms, ContextParallelismSplitsTheSequence) {
  const Layout y = parse_layout("tp=8,cp=2,pp=4,dp=4");
  EXPECT_EQ(y.gpus(), 256);
  EXPECT_EQ(y.group_of(ParallelDim::tp).stride, 1);
  EXPECT_EQ(y.group_of(ParallelDim::cp).size, 2);
  EXPECT_EQ(y.group_of(ParallelDim::cp).stride, 8);
  EXPECT_EQ(y.group_of(ParallelDim::dp).stride, 16);
  EXPECT_EQ(y.group_of(ParallelDim::pp).stride, 64);
  EXPECT_EQ(y.gradient_group().size, 8);
  EXPECT_EQ(y.gradient_group().stride, 8);
  EXPECT_EQ(parse_layout(y.to_string()).to_string(), y.to_string());
  EXPECT_INVALID(parse_layout("tp=8,cp=2,dp=4,order=dp-tp-pp").gradient_group(),
                 "dp must come right after tp");

  const ModelSpec m = model_preset("llama3-8b");
  const ClusterSpec eight = cluster_preset("dgx-h100", 8);
  EXPECT_INVALID(validate_layout(m, parse_layout("tp=8,cp=3,gb=6"), cluster_preset("dgx-h100", 24)),
                 "seq_len (8192) divisible by 2 x cp");
  EXPECT_INVALID(validate_layout(m, parse_layout("tp=4,cp=2,attention=materialized"), eight),
                 "attention=flash");

  // One sequence on 8 GPUs against the same sequence split over two groups of 8: half the
  // activations (all of them grow with the tokens a rank holds, with fused attention) and about
  // half the compute (the GEMMs see half the tokens, attention half the queries).
  const StepEstimate whole = estimate(m, "tp=8,pp=1,dp=1,mb=1,gb=1,sp=1", 8);
  const StepEstimate split = estimate(m, "tp=8,cp=2,pp=1,dp=1,mb=1,gb=1,sp=1", 16);
  EXPECT_NEAR(split.memory.activations_gb, whole.memory.activations_gb / 2, 1e-9);
  EXPECT_NEAR(split.breakdown.compute_s, whole.breakdown.compute_s / 2,
              0.1 * whole.breakdown.compute_s);
  EXPECT_EQ(whole.breakdown.cp_comm_s, 0);
  // The ring's K/V transfers (8 key/value heads: 1/4 of h) hide behind attention at 8192 tokens
  // over NVLink; across nodes at 1024 tokens (cp = 16, 64 tokens per rank) they do not.
  EXPECT_EQ(split.breakdown.cp_comm_s, 0);
  ModelSpec short_seq = m;
  short_seq.seq_len = 1024;
  const StepEstimate exposed = estimate(short_seq, "tp=8,cp=16,pp=1,dp=1,mb=1,gb=1,sp=1", 128);
  EXPECT_GT(exposed.breakdown.cp_comm_s, 0);
  EXPECT_NEAR(exposed.step_s,
              exposed.breakdown.compute_s + exposed.breakdown.tp_comm_s +
                  exposed.breakdown.cp_comm_s + exposed.breakdown.optimizer_s +
                  exposed.breakdown.dp_exposed_s,
              1e-12);
}

// ZeRO-2 shards the gradients and reduce-scatters every micro-batch's; ZeRO-3 (FSDP) shards the
// parameters too and gathers them for every micro-batch's forward and backward.
TEST(PlanLayoutTerms, ZeroStagesShardStateAndMoveMore) {
  const ModelSpec m = model_preset("gpt-1.3b");
  const double params = m.parameters();
  const LayerParameters layer = m.layer_parameters();
  auto with_zero = [&](int zero) {
    return estimate(m, "tp=1,pp=1,dp=8,mb=4,zero=" + std::to_string(zero), 8);
  };
  const StepEstimate z1 = with_zero(1), z2 = with_zero(2), z3 = with_zero(3);
  EXPECT_NEAR(z1.memory.weights_gb * 1e9, 2 * params, 1);
  EXPECT_NEAR(z1.memory.gradients_gb * 1e9, 4 * params, 1);
  EXPECT_NEAR(z2.memory.gradients_gb * 1e9, 4 * params / 8, 1);
  EXPECT_NEAR(z2.memory.optimizer_gb * 1e9, 12 * params / 8, 1);
  EXPECT_NEAR(z3.memory.weights_gb * 1e9,
              2 * params / 8 + 2 * 2 * (layer.sharded + layer.replicated), 1);
  // m = 512 / (8 x 4) = 16 micro-batches. ZeRO-1 moves R (gradients) + G (parameters) a step;
  // ZeRO-2 16 R + G; ZeRO-3 16 (2 G + R).
  const double r = (z2.dp_comm_s - z1.dp_comm_s) / 15, g = z1.dp_comm_s - r;
  EXPECT_GT(r, 0);
  EXPECT_GT(g, 0);
  EXPECT_NEAR(z3.dp_comm_s, 16 * (2 * g + r), 1e-9);
  // Each micro-batch's traffic here hides behind the next micro-batch's work: ZeRO-2 exposes what
  // ZeRO-1 does (the last reduction's tail and the parameter all-gather after the step), ZeRO-3
  // less (it has no all-gather after the step).
  EXPECT_NEAR(z2.breakdown.dp_exposed_s, z1.breakdown.dp_exposed_s, 1e-12);
  EXPECT_LT(z3.breakdown.dp_exposed_s, z1.breakdown.dp_exposed_s);
  EXPECT_DOUBLE_EQ(z3.breakdown.compute_s, z1.breakdown.compute_s);
}

TEST(PlanLayoutTerms, SearchSplitsLayersWithLighterEndStagesAndKeepsTheFrameworkOptions) {
  CollectivePlanner planner(cluster_preset("dgx-h100", 1024));
  SearchOptions options;
  options.framework = parse_framework_options("precision=fp8,overlap=tp+dp_grads");
  options.micro_batches = {1};
  options.virtual_stages = {1};
  const SearchResult result = search_layouts(model_preset("llama3-405b"), planner, options);
  bool saw_uneven = false;
  for (const StepEstimate& e : result.ranked) {
    EXPECT_EQ(e.layout.precision, Precision::fp8);
    EXPECT_TRUE(e.layout.overlap.tp && e.layout.overlap.dp_grads && !e.layout.overlap.dp_params);
    EXPECT_TRUE(e.layout.sequence_parallel || e.layout.tp == 1);  // overlap=tp needs SP
    EXPECT_NE(e.layout.recompute, Recompute::selective);          // as none with fused attention
    if (e.layout.pp == 16) {
      EXPECT_EQ(e.layout.first_stage_layers, 7);
      EXPECT_EQ(e.layout.last_stage_layers, 7);
      saw_uneven = true;
    }
  }
  EXPECT_TRUE(saw_uneven);
  EXPECT_INVALID(parse_framework_options("precision=fp8,tp=2"), "'precision=fp8,tp=2'",
                 "precision, attention and overlap only");
  EXPECT_INVALID(parse_framework_options("gb=64"), "'gb=64'", "precision, attention and overlap");
  CollectivePlanner a100(cluster_preset("dgx-a100", 64));
  EXPECT_INVALID(search_layouts(model_preset("gpt-1.3b"), a100, options), "precision=fp8");
}

TEST(PlanLayoutTerms, Fp8KeepsGemmInputsAndAWeightCopyInOneByte) {
  // Llama 3 8B, tp = pp = 1: every GPU holds all 32 layers, one micro-batch of them.
  const ModelSpec m = model_preset("llama3-8b");
  const std::string layout = "tp=1,pp=1,dp=8,mb=1,zero=1";
  const StepEstimate bf16 = estimate(m, layout, 8);
  const StepEstimate fp8 = estimate(m, layout + ",precision=fp8", 8);
  const double s = 8192, h = 4096, f = 14336, layers = 32;
  // The QKV, first-MLP and projection inputs (s h each) and the second MLP input (s f) are kept
  // in one byte instead of two.
  EXPECT_NEAR((bf16.memory.activations_gb - fp8.memory.activations_gb) * 1e9,
              layers * (3 * s * h + s * f), 1);
  // And every layer weight has a one-byte copy.
  EXPECT_NEAR((fp8.memory.weights_gb - bf16.memory.weights_gb) * 1e9,
              layers * m.layer_parameters().sharded, 1);
  EXPECT_DOUBLE_EQ(fp8.memory.gradients_gb, bf16.memory.gradients_gb);
  // Full recomputation keeps only the BF16 layer inputs: the same in both, bar the one layer
  // rebuilt in the backward pass.
  const StepEstimate full_bf16 = estimate(m, layout + ",recompute=full", 8);
  const StepEstimate full_fp8 = estimate(m, layout + ",recompute=full,precision=fp8", 8);
  EXPECT_NEAR((full_bf16.memory.activations_gb - full_fp8.memory.activations_gb) * 1e9,
              3 * s * h + s * f, 1);
}

TEST(PlanLayoutTerms, SearchTriesContextParallelismAndDeeperZeroWhereTheyAreNeeded) {
  // Llama 3 8B at 64k tokens: activations need the sequence split.
  ModelSpec long_context = model_preset("llama3-8b");
  long_context.seq_len = 65536;
  long_context.global_batch = 64;
  CollectivePlanner planner(cluster_preset("dgx-h100", 64));
  SearchOptions options;
  options.micro_batches = {1};
  const SearchResult result = search_layouts(long_context, planner, options);
  ASSERT_GT(result.fitting, 0);
  EXPECT_GT(result.ranked.front().layout.cp, 1);
  std::map<std::string, bool> fits;
  for (const StepEstimate& e : result.ranked) fits[e.layout.to_string()] = e.fits;
  int deeper = 0;
  for (const StepEstimate& e : result.ranked) {
    // CP only where each rank keeps two chunks of at least 2048 tokens: 65536 / cp >= 4096.
    EXPECT_LE(e.layout.cp, 16);
    if (e.layout.zero < 2) continue;
    // ZeRO-2 and -3 only where the stage below did not fit.
    Layout below = e.layout;
    --below.zero;
    ASSERT_TRUE(fits.count(below.to_string())) << e.layout.to_string();
    EXPECT_FALSE(fits[below.to_string()]) << e.layout.to_string();
    ++deeper;
  }
  EXPECT_GT(deeper, 0);
  // A 2048-token model is never split.
  const SearchResult short_context = search_layouts(model_preset("gpt-1.3b"), planner, options);
  for (const StepEstimate& e : short_context.ranked) EXPECT_EQ(e.layout.cp, 1);
}

}  // namespace
}  // namespace tpf::plan
