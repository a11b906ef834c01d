#include "plan/step_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include "plan/invalid_input.h"
#include "plan/text_format.h"
#include "tpf/error.h"

namespace tpf::plan {
namespace {

using coll::Collective;

std::string str(int value) { return std::to_string(value); }

// Bytes per element and per parameter of a precision. BF16 and FP8: activations and weights in
// bf16; mixed-precision Adam keeps fp32 gradients (Megatron's main_grad) and fp32 master weights,
// momentum and variance: 2 + 4 + 12 = 18 bytes per parameter, or 2 + 4 + 12/dp with the
// distributed optimizer (ZeRO-1); its step reads the fp32 gradient, master weight, m and v (16
// bytes) and writes the last three and the bf16 weight (14 bytes). FP32 (tpf train): weights,
// gradients and activations in fp32 and plain AdamW's m and v (4 + 4 + 8); the step reads the
// gradient, weight, m and v and writes the last three (16 + 12 bytes). Logits are fp32 in both.
struct ByteSizes {
  double activation, weight, grad, optimizer, optimizer_traffic;
};
ByteSizes byte_sizes(Precision precision) {
  if (precision == Precision::fp32) return {4, 4, 4, 8, 28};
  return {2, 2, 4, 12, 30};
}
constexpr double kFp8WeightBytes = 1;
constexpr double kLogitBytes = 4;  // fp32 logits for the cross-entropy
// Megatron's DistributedDataParallel bucket: max(40M, 1M * dp) parameters
// (megatron/core/distributed: bucket_size default when overlap_grad_reduce is on), unless the
// layout's bucket= says otherwise.
constexpr double kBucketParams = 40e6;
constexpr double kBucketParamsPerDpRank = 1e6;
// Memory outside the model's tensors: CUDA context, NCCL and cuBLAS workspaces.
constexpr double kReserveBytes = 2e9;
constexpr double kGB = 1e9;

// The sizes everything below is written in, following Korthikanti et al. 2022's notation; r is
// the width of K (and V) over h (1 for multi-head attention, kv_heads / heads for GQA). With
// context parallelism s is a rank's share of the sequence, `context` the whole of it (the keys a
// query attends to).
// Of a mixture of experts, e experts, k per token, e_local of them per EP rank, et-way expert
// tensor parallelism, and x = k times the capacity factor: the MLP's tokens per layer token (1
// for a dense model).
struct Dims {
  double s, context, b, h, a, f, v, t, r, c;
  double e, e_local, et, x;
  bool sp, gated, flash, moe, fp8;
  double activation_bytes;  // per element: 2 (bf16, fp8) or 4 (fp32)
  double head_size() const { return h / a; }
  // Tokens of a micro-batch a GPU routes: SP splits them over TP.
  double routed_tokens() const { return s * b / (sp ? t : 1); }
  // Tokens through a GPU's expert GEMMs: x per routed token (balanced routing: an EP rank
  // receives as many as it sends), gathered over the expert-TP group.
  double expert_tokens() const { return routed_tokens() * x * et; }
};

// Activation bytes one transformer layer keeps per micro-batch on one GPU (Korthikanti et al.
// 2022, Section 4 and Table 2), generalized to an MLP of width f, GQA and gated MLPs: attention
// 11sbh + 5as^2b (QKV input 2sbh, Q 2sbh, K and V 2rsbh each, projection input 2sbh, dropout mask
// sbh), MLP 3sbh + 4sbf (gated: 3sbh + 6sbf, the gate and up outputs and their product),
// LayerNorms 4sbh. Tensor parallelism splits all but 10sbh (LayerNorm inputs, the inputs of the
// QKV and first MLP GEMMs, two dropout masks); sequence parallelism splits those too. Fused
// attention keeps no s x s tensor, only the softmax statistics (fp32, a per token).
struct LayerActivations {
  double linear;     // bytes that grow with s
  double attention;  // the 5as^2b score/softmax/dropout bytes (0 with fused attention)
  double total() const { return linear + attention; }
};

LayerActivations layer_activations(const Dims& d) {
  const double sbh = d.s * d.b * d.h;
  // A mixture of experts runs the MLP on x times the tokens and keeps their permuted inputs.
  const double mlp = d.x * (d.gated ? 6 : 4) * d.s * d.b * d.f + (d.moe ? 2 * d.x * sbh : 0);
  const double split_linear = (4 + 4 * d.r) * sbh + mlp;  // Q, K, V, projection input, MLP
  const double replicated = 10 * sbh;
  const double softmax_stats = d.flash ? 4 * d.a * d.s * d.b / d.t : 0;
  const double attention = d.flash ? 0 : 5 * d.a * d.s * d.s * d.b / d.t;
  // The counts above are bytes at 2 per element; fp32 keeps twice as many (the fp32 softmax
  // statistics excepted).
  const double scale = d.activation_bytes / 2;
  if (d.sp) return {(replicated + split_linear) / d.t * scale + softmax_stats, attention * scale};
  return {(replicated + split_linear / d.t) * scale + softmax_stats, attention * scale};
}

// Bytes an FP8 layer keeps less than a BF16 one: Transformer Engine saves the input of each FP8
// GEMM for its weight gradient in FP8, one byte per element where BF16 keeps two (TE docs,
// "Performance considerations", memory usage example 2). Those inputs are the QKV input and,
// dense, the first MLP input (in the 10sbh TP keeps whole without SP); the projection input;
// of a mixture of experts the permuted expert inputs; and the second MLP GEMM's input, sbf per
// token through the MLP.
double fp8_saved_activations(const Dims& d) {
  if (!d.fp8) return 0;
  const double sbh = d.s * d.b * d.h;
  const double whole = (d.moe ? 1 : 2) * sbh;
  const double split = sbh + (d.moe ? d.x * sbh : 0) + d.x * d.s * d.b * d.f;
  return whole / (d.sp ? d.t : 1) + split / d.t;
}

// What recomputation leaves stored per layer (Korthikanti et al. 2022, Table 2): selective drops
// the attention term; full keeps only the layer input, 2sbh (sharded by SP), in the activations'
// precision.
double stored_layer_activations(const Dims& d, Recompute recompute) {
  const LayerActivations act = layer_activations(d);
  switch (recompute) {
    case Recompute::none: return act.total() - fp8_saved_activations(d);
    case Recompute::selective: return act.linear - fp8_saved_activations(d);
    case Recompute::full: return d.activation_bytes * d.s * d.b * d.h / (d.sp ? d.t : 1.0);
  }
  return act.total();
}

// Per micro-batch, per GPU: seconds of one pipeline stage, split as the breakdown needs.
struct StageTime {
  double compute_f = 0, compute_b = 0;  // b includes recomputation
  double tp_f = 0, tp_b = 0;
  double cp_f = 0, cp_b = 0;
  double ep_f = 0, ep_b = 0;
  double p2p_f = 0, p2p_b = 0;
  double forward() const { return compute_f + tp_f + cp_f + ep_f + p2p_f; }
  double backward() const { return compute_b + tp_b + cp_b + ep_b + p2p_b; }
  double total() const { return forward() + backward(); }
};

// Seconds of one layer's compute per micro-batch on one GPU.
constexpr int kLayerGemms = 4;  // QKV, projection, MLP up (and gate), MLP down (of each expert)

struct LayerCompute {
  double gemm_f = 0, gemm_b = 0;  // the weight GEMMs
  double gemm_f_each[kLayerGemms] = {}, gemm_b_each[kLayerGemms] = {};
  double attention_f = 0, attention_b = 0;  // the attention core (scores and values)
  double elementwise_f = 0, elementwise_b = 0;
  double routing_f = 0, routing_b = 0;  // a mixture of experts' router and token permutations
  double forward() const { return gemm_f + attention_f + elementwise_f + routing_f; }
  double backward() const { return gemm_b + attention_b + elementwise_b + routing_b; }
  double gemm_efficiency = 0;  // achieved by the forward weight GEMMs
};

// Parameters one GPU of a stage holds: those replicated over DP (x CP) and the experts', which
// expert parallelism splits.
struct StageParameters {
  double dense = 0, experts = 0;
  double total() const { return dense + experts; }
};

class Estimator {
 public:
  Estimator(const ModelSpec& model, const Layout& layout, CollectivePlanner& planner)
      : model_(model),
        layout_(layout),
        planner_(planner),
        cluster_(planner.cluster()),
        bytes_(byte_sizes(layout.precision)),
        layer_compute_model_(cluster_.gpu, layout.precision),
        high_precision_model_(
            cluster_.gpu, layout.precision == Precision::fp8 ? Precision::bf16 : layout.precision) {
  }

  StepEstimate run();

 private:
  void check();
  // One collective of a group shape (or of `dim`'s groups), estimated once per (op, bytes, shape).
  const CollectiveEstimate& collective(Collective op, double bytes, const GroupShape& group);
  double collective_us(Collective op, double bytes, const GroupShape& group);
  double collective_us(Collective op, double bytes, ParallelDim dim);
  // One activation all-reduce of `bytes` or its all-gather + reduce-scatter (SP).
  CollectiveEstimate tp_pair(double bytes, const GroupShape& group, bool gather_scatter);
  LayerCompute layer_compute() const;
  StageTime stage_time(int stage);
  StageParameters stage_parameters(int stage) const;
  // How many ways ZeRO stage `stage` and above shard their state: over the gradient group
  // (DP x CP; the experts' over their expert-data-parallel group), or not at all below that
  // stage.
  int shards_from(int stage) const {
    return layout_.zero >= stage ? layout_.gradient_group().size : 1;
  }
  int expert_shards_from(int stage) const {
    return layout_.zero >= stage ? layout_.expert_gradient_group().size : 1;
  }
  MemoryEstimate stage_memory(int stage) const;
  // `micro_batch`: the slowest stage's time for one micro-batch, which the reduction can hide
  // behind.
  void data_parallel(const StageParameters& params, const StageTime& micro_batch,
                     StepEstimate& out);

  const ModelSpec& model_;
  Layout layout_;
  CollectivePlanner& planner_;
  const ClusterSpec& cluster_;
  const ByteSizes bytes_;
  // The transformer layers' GEMMs run in the layout's precision; under FP8 the output layer and
  // attention stay in BF16 (Transformer Engine's FP8 covers the layers' linear modules only).
  ComputeModel layer_compute_model_;
  ComputeModel high_precision_model_;
  Dims d_{};
  int m_ = 1;  // micro-batches per step
  std::vector<int> stage_layers_;
  LayerCompute layer_;          // what layer_compute() returns, for every stage
  CollectiveEstimate tp_pair_;  // what tp_pair() returns, for every stage
  std::map<std::tuple<int, double, int, int>, CollectiveEstimate> cache_;
};

}  // namespace

std::vector<int> layers_per_stage(const ModelSpec& model, const Layout& y) {
  const std::string where = "layout " + y.to_string() + ": ";
  const int p = y.pp, v = y.virtual_stages;
  if (y.first_stage_layers == 0 && y.last_stage_layers == 0) {
    if (model.layers % (p * v) != 0) {
      invalid(where + "the model's layers (" + str(model.layers) +
              ") are not divisible into pp x vp = " + str(p * v) +
              " model chunks (first= and last= give the end stages other layer counts)");
    }
    return std::vector<int>(p, model.layers / p);
  }
  if (p < 2) invalid(where + "first= and last= need pp >= 2");
  const int first = y.first_stage_layers, last = y.last_stage_layers;
  const int middle_stages = p - (first > 0) - (last > 0);
  const int rest = model.layers - first - last;
  if (rest < middle_stages || (middle_stages == 0 && rest != 0) ||
      (middle_stages > 0 && rest % middle_stages != 0)) {
    invalid(where + "the model's " + str(model.layers) + " layers less first=" + str(first) +
            " and last=" + str(last) + " leave " + str(rest) + ", which " +
            (middle_stages == 0
                 ? std::string("no other stage takes")
                 : "do not split evenly over the other " + str(middle_stages) + " stages"));
  }
  std::vector<int> layers(p, middle_stages > 0 ? rest / middle_stages : 0);
  if (first > 0) layers.front() = first;
  if (last > 0) layers.back() = last;
  // Uneven stages may have uneven chunks (Llama 3 interleaves stages of 7 and 8 layers), but
  // every chunk needs a layer.
  for (int stage = 0; stage < p; ++stage) {
    if (layers[stage] < v) {
      invalid(where + "pipeline stage " + str(stage) + " has " + str(layers[stage]) +
              " layers, fewer than vp = " + str(v) + " model chunks");
    }
  }
  return layers;
}

int validate_layout(const ModelSpec& model, const Layout& y, const ClusterSpec& cluster) {
  validate(model);
  const std::string where = "layout " + y.to_string() + ": ";
  if (y.tp < 1 || y.pp < 1 || y.dp < 1 || y.micro_batch < 1 || y.virtual_stages < 1 ||
      y.global_batch < 0 || y.first_stage_layers < 0 || y.last_stage_layers < 0) {
    invalid(where + "tp, pp, dp, mb and vp must be at least 1 (gb, first and last at least 0)");
  }
  if (y.cp < 1) invalid(where + "cp must be at least 1");
  if (y.gpus() != cluster.total_gpus()) {
    invalid(where + "tp x cp x pp x dp = " + str(y.tp) + " x " + str(y.cp) + " x " + str(y.pp) +
            " x " + str(y.dp) + " = " + str(y.gpus()) + " GPUs, but the cluster has " +
            str(cluster.total_gpus()));
  }
  if (y.cp > 1) {
    if (model.seq_len % (2 * y.cp) != 0) {
      invalid(where + "context parallelism needs seq_len (" + str(model.seq_len) +
              ") divisible by 2 x cp (each rank takes two balanced chunks of the causal mask)");
    }
    if (y.attention != AttentionKernel::flash) {
      invalid(where + "context parallelism needs attention=flash (ring attention is fused)");
    }
    y.gradient_group();  // the gradients must reduce over DP x CP as one group
  }
  if (model.heads % y.tp != 0) {
    invalid(where + "the model's heads (" + str(model.heads) + ") are not divisible by tp");
  }
  if (model.query_groups() % y.tp != 0) {
    invalid(where + "the model's key/value heads (" + str(model.query_groups()) +
            ") are not divisible by tp");
  }
  if (model.ffn() % y.tp != 0) {
    invalid(where + "the model's MLP width (" + str(model.ffn()) + ") is not divisible by tp");
  }
  if (y.sequence_parallel && model.seq_len % y.tp != 0) {
    invalid(where + "sequence parallelism needs seq_len (" + str(model.seq_len) +
            ") divisible by tp");
  }
  if (y.virtual_stages > 1 && y.pp < 2) invalid(where + "vp > 1 (interleaving) needs pp >= 2");
  if (y.overlap.tp && y.tp > 1 && !y.sequence_parallel) {
    invalid(where + "overlap=tp needs sp=1 (it overlaps SP's all-gathers and reduce-scatters)");
  }
  if (!model.moe() && (y.ep > 1 || y.capacity != 1 || y.folded())) {
    invalid(where + "ep, etp and capacity apply to mixture-of-experts models; model '" +
            model.name + "' has no experts");
  }
  if (model.moe()) {
    if (model.experts % y.ep != 0) {
      invalid(where + "the model's experts (" + str(model.experts) + ") are not divisible by ep");
    }
    if (model.ffn() % y.expert_tp() != 0) {
      invalid(where + "the experts' MLP width (" + str(model.ffn()) +
              ") is not divisible by the expert TP degree (" + str(y.expert_tp()) + ")");
    }
    if (!y.folded() && (y.dp * y.cp) % y.ep != 0) {
      invalid(where + "ep (" + str(y.ep) + ") must divide dp x cp = " + str(y.dp * y.cp) +
              ": expert parallelism splits the data-parallel ranks (or give etp= to fold it "
              "over TP's too)");
    }
    if (y.folded()) {
      const int stage_ranks = y.tp * y.cp * y.dp, expert_ranks = y.ep * y.expert_tp();
      if (stage_ranks % expert_ranks != 0) {
        invalid(where + "ep x etp = " + str(expert_ranks) + " must divide tp x cp x dp = " +
                str(stage_ranks) + " (the ranks of a pipeline stage, which etp= regroups)");
      }
      if (y.pp > 1 && y.order.back() != ParallelDim::pp) {
        invalid(where + "etp= needs pp outermost in the order (it regroups each stage's ranks)");
      }
    }
    if (y.tp > 1 && !y.sequence_parallel) {
      invalid(where +
              "a mixture of experts with tp > 1 needs sp=1 (Megatron-Core requires "
              "sequence parallelism with tensor-parallel experts)");
    }
  }
  layers_per_stage(model, y);
  const ComputeModel precision_check(cluster.gpu, y.precision);  // fp8 needs an FP8 peak
  const int gb = y.global_batch > 0 ? y.global_batch : model.global_batch;
  if (gb % (y.dp * y.micro_batch) != 0) {
    invalid(where + "the global batch (" + str(gb) +
            ") is not divisible by dp x mb = " + str(y.dp) + " x " + str(y.micro_batch));
  }
  const int m = gb / (y.dp * y.micro_batch);
  // Megatron's interleaved schedule runs micro-batches in groups of pp.
  if (y.virtual_stages > 1 && m % y.pp != 0) {
    invalid(where + "the interleaved schedule needs the micro-batches per step (" + str(m) +
            " = gb / (dp x mb)) to be a multiple of pp");
  }
  return gb;
}

namespace {

void Estimator::check() {
  layout_.global_batch = validate_layout(model_, layout_, cluster_);
  m_ = layout_.global_batch / (layout_.dp * layout_.micro_batch);
  stage_layers_ = layers_per_stage(model_, layout_);
}

const CollectiveEstimate& Estimator::collective(Collective op, double bytes,
                                                const GroupShape& group) {
  const auto key = std::make_tuple(static_cast<int>(op), bytes, group.size, group.stride);
  auto it = cache_.find(key);
  if (it == cache_.end()) it = cache_.emplace(key, planner_.estimate(op, bytes, group)).first;
  return it->second;
}

double Estimator::collective_us(Collective op, double bytes, const GroupShape& group) {
  if (group.size <= 1 && op != Collective::send_recv) return 0;
  return collective(op, bytes, group).us;
}

double Estimator::collective_us(Collective op, double bytes, ParallelDim dim) {
  return collective_us(op, bytes, layout_.group_of(dim));
}

CollectiveEstimate Estimator::tp_pair(double bytes, const GroupShape& group, bool gather_scatter) {
  if (group.size <= 1) return {};
  if (!gather_scatter) return collective(Collective::all_reduce, bytes, group);
  CollectiveEstimate gather = collective(Collective::all_gather, bytes, group);
  const CollectiveEstimate& scatter = collective(Collective::reduce_scatter, bytes, group);
  gather.us += scatter.us;
  gather.algorithm =
      "all_gather(" + gather.algorithm + ")+reduce_scatter(" + scatter.algorithm + ")";
  // Reported as the all-reduce it replaces moves the same bytes.
  gather.busbw_gbps =
      bytes / (gather.us * 1e3) * coll::bus_bandwidth_factor(Collective::all_reduce, group.size);
  gather.crosses_network = gather.crosses_network || scatter.crosses_network;
  return gather;
}

// Compute (Narayanan et al. 2021, appendix): the forward weight GEMMs (QKV, projection, MLP) with
// m = bs tokens, their output or input width split over TP; backward, the input- and
// weight-gradient GEMMs of each. The attention core (4bs^2h/t FLOPs forward) fused, or as
// batched GEMMs of a/t heads with the s x s scores in memory. Element-wise work (norms,
// activation functions, dropout, softmax when materialized, residual adds) is memory-bound: each
// activation byte of Korthikanti et al.'s count is written once and read once in the forward
// pass, and the backward pass moves twice that (saved input and gradient in, gradient out).
// Without SP the 10sbh replicated part is repeated on every TP rank.
LayerCompute Estimator::layer_compute() const {
  const Dims& d = d_;
  const ComputeModel& gpu = layer_compute_model_;
  const double tokens = d.b * d.s;
  // Of a mixture of experts, each of a GPU's e_local experts runs as one GEMM of a grouped GEMM
  // over its share of the GPU's expert tokens, its width split over expert TP.
  const double mlp_tokens = d.moe ? d.expert_tokens() / d.e_local : tokens;
  const double mlp_split = d.moe ? d.et : d.t;
  const GemmShape gemms[kLayerGemms] = {
      {tokens, (d.h + 2 * d.r * d.h) / d.t, d.h},                         // QKV
      {tokens, d.h, d.h / d.t},                                           // projection
      {mlp_tokens, (d.gated ? 2 : 1) * d.f / mlp_split, d.h, d.e_local},  // MLP up (and gate)
      {mlp_tokens, d.h, d.f / mlp_split, d.e_local},                      // MLP down
  };
  LayerCompute c;
  double flops = 0;
  for (int i = 0; i < kLayerGemms; ++i) {
    c.gemm_f_each[i] = gpu.gemm_s(gemms[i]);
    c.gemm_b_each[i] = gpu.gemm_backward_s(gemms[i]);
    c.gemm_f += c.gemm_f_each[i];
    c.gemm_b += c.gemm_b_each[i];
    flops += gemms[i].flops();
  }
  c.gemm_efficiency = flops / (c.gemm_f * gpu.gemm_peak());
  if (d.flash) {
    const AttentionShape attention{d.b * d.a / d.t, d.s, d.context, d.head_size()};
    c.attention_f = gpu.flash_attention_s(attention);
    c.attention_b = 2 * c.attention_f;
  } else {
    // Attention GEMMs stay in BF16 under FP8 too.
    const ComputeModel& hp = high_precision_model_;
    const double heads = d.b * d.a / d.t;
    const GemmShape scores{d.s, d.s, d.head_size(), heads};
    const GemmShape values{d.s, d.head_size(), d.s, heads};
    c.attention_f = hp.gemm_s(scores) + hp.gemm_s(values);
    c.attention_b = hp.gemm_backward_s(scores) + hp.gemm_backward_s(values);
  }
  const LayerActivations act = layer_activations(d);
  c.elementwise_f = gpu.memory_s(2 * act.total());
  c.elementwise_b = 2 * c.elementwise_f;
  if (d.moe) {
    // The router's h x e GEMM (BF16) over the GPU's tokens; permuting them into expert order
    // reads each token once and writes x copies, and combining them back reads the x copies and
    // writes one.
    const ComputeModel& hp = high_precision_model_;
    const double routed = d.routed_tokens();
    const GemmShape router{routed, d.e, d.h};
    const double permute_bytes = 2 * (1 + d.x) * routed * d.h * bytes_.activation;
    c.routing_f = hp.gemm_s(router) + hp.memory_s(permute_bytes);
    c.routing_b = hp.gemm_backward_s(router) + hp.memory_s(2 * permute_bytes);
  }
  return c;
}

StageTime Estimator::stage_time(int stage) {
  const Dims& d = d_;
  const int p = layout_.pp;
  const bool first = stage == 0, last = stage == p - 1;
  const double layers = stage_layers_[stage];
  const LayerCompute& c = layer_;
  StageTime st;
  // Full recomputation repeats the forward pass in the backward one; selective recomputation
  // the attention core (Korthikanti et al. 2022, Section 5), which a fused kernel never stores.
  const double forward = c.forward();
  double backward = c.backward();
  if (layout_.recompute == Recompute::full) backward += forward;
  if (layout_.recompute == Recompute::selective && !d.flash) {
    backward += c.attention_f + layer_compute_model_.memory_s(2 * layer_activations(d).attention);
  }
  st.compute_f = layers * forward;
  st.compute_b = layers * backward;
  if (last) {
    // Output layer: logits GEMM bs x V/t x h (vocab-parallel, BF16 under FP8), never recomputed,
    // and the fp32 softmax/cross-entropy over the logits.
    const ComputeModel& hp = high_precision_model_;
    const GemmShape logits{d.b * d.s, d.v / d.t, d.h};
    const double logit_bytes = d.b * d.s * d.v / d.t * kLogitBytes;
    st.compute_f += hp.gemm_s(logits) + hp.memory_s(2 * logit_bytes);
    st.compute_b += hp.gemm_backward_s(logits) + hp.memory_s(4 * logit_bytes);
  }

  // TP collectives, on the critical path (Shoeybi et al. 2019, Figure 4): per layer 2 all-reduces
  // forward and 2 backward of bsh activations (Korthikanti et al. 2022: an all-gather and a
  // reduce-scatter in place of each with SP); full recomputation repeats the forward ones.
  // A mixture of experts gathers its expert tokens (those routed to the GPU, after the
  // dispatching all-to-all) over the expert-TP group and scatters the results back.
  const GroupShape tp_group = layout_.group_of(ParallelDim::tp);
  const GroupShape mlp_group = d.moe ? layout_.expert_tp_group() : tp_group;
  if (tp_group.size > 1 || mlp_group.size > 1) {
    const double bytes = d.s * d.b * d.h * bytes_.activation;
    const double mlp_bytes = d.moe ? d.expert_tokens() * d.h * bytes_.activation : bytes;
    const double pair = tp_pair_.us * 1e-6;
    const double mlp_pair = d.moe ? tp_pair(mlp_bytes, mlp_group, true).us * 1e-6 : pair;
    double layer_tp_f = pair + mlp_pair, layer_tp_b = pair + mlp_pair;
    if (layout_.overlap.tp) {
      // Megatron's tp-comm-overlap (SP only): each all-gather runs in chunks beside the GEMM
      // that consumes it, each reduce-scatter beside the GEMM that produces it (forward; in the
      // backward pass beside the input- and weight-gradient GEMMs); only what the GEMM does not
      // cover is exposed. The GEMMs' slowdown from sharing the SMs is not modelled.
      auto ag = [&](double n, const GroupShape& group) {
        return collective_us(Collective::all_gather, n, group) * 1e-6;
      };
      auto rs = [&](double n, const GroupShape& group) {
        return collective_us(Collective::reduce_scatter, n, group) * 1e-6;
      };
      // QKV, projection, MLP up, MLP down
      const double comm[kLayerGemms] = {ag(bytes, tp_group), rs(bytes, tp_group),
                                        ag(mlp_bytes, mlp_group), rs(mlp_bytes, mlp_group)};
      layer_tp_f = layer_tp_b = 0;
      for (int i = 0; i < kLayerGemms; ++i) {
        layer_tp_f += std::max(0.0, comm[i] - c.gemm_f_each[i]);
        layer_tp_b += std::max(0.0, comm[i] - c.gemm_b_each[i]);
      }
    }
    if (layout_.recompute == Recompute::full) layer_tp_b += layer_tp_f;
    st.tp_f = layers * layer_tp_f;
    st.tp_b = layers * layer_tp_b;
    // The vocab-parallel embedding reduces its output (g: all-reduce forward; with SP a
    // reduce-scatter forward and an all-gather backward); the output layer's input is f
    // (all-reduce backward; with SP all-gather forward, reduce-scatter backward).
    const double ar = d.sp ? 0 : collective_us(Collective::all_reduce, bytes, ParallelDim::tp);
    const double ag = d.sp ? collective_us(Collective::all_gather, bytes, ParallelDim::tp) : 0;
    const double rs = d.sp ? collective_us(Collective::reduce_scatter, bytes, ParallelDim::tp) : 0;
    if (first) {
      st.tp_f += (d.sp ? rs : ar) * 1e-6;
      st.tp_b += ag * 1e-6;
    }
    if (last) {
      st.tp_f += ag * 1e-6;
      st.tp_b += (d.sp ? rs : ar) * 1e-6;
    }
  }

  // Context parallelism (ring attention): per layer, cp - 1 steps pass a rank's K and V chunk
  // to the next CP rank (backward: K and V again and their gradients), each beside the
  // attention of the block in hand; exposed where the transfers outlast the attention.
  if (d.c > 1) {
    const double kv_bytes = 2 * d.b * d.s * d.r * d.h / d.t * bytes_.activation;
    const double step = collective_us(Collective::send_recv, kv_bytes, ParallelDim::cp) * 1e-6;
    const double layer_f = std::max(0.0, (d.c - 1) * step - c.attention_f);
    double layer_b = std::max(0.0, 2 * (d.c - 1) * step - c.attention_b);
    if (layout_.recompute == Recompute::full) layer_b += layer_f;
    st.cp_f = layers * layer_f;
    st.cp_b = layers * layer_b;
  }

  // Expert parallelism: per MoE layer an all-to-all sends the routed tokens (x per token) to
  // their experts' GPUs and one brings the results back; the backward pass does the same with
  // the gradients. Not overlapped (Megatron-Core's batch-level overlap is not modelled).
  if (d.moe && layout_.ep > 1) {
    const double bytes = d.routed_tokens() * d.x * d.h * bytes_.activation;
    const double a2a = collective_us(Collective::all_to_all, bytes, layout_.expert_group()) * 1e-6;
    double layer_b = 2 * a2a;
    if (layout_.recompute == Recompute::full) layer_b += 2 * a2a;
    st.ep_f = layers * 2 * a2a;
    st.ep_b = layers * layer_b;
  }

  // Pipeline p2p: each of the stage's vp chunks receives bsh activations forward and sends their
  // gradient backward per micro-batch. With TP only a 1/t shard travels between stages: with SP
  // the activations are sharded already; without it Megatron scatters them and all-gathers them
  // over NVLink at the receiver (the scatter/gather optimization, Narayanan et al. 2021, 4.1).
  if (layout_.pp > 1) {
    const double full = d.s * d.b * d.h * bytes_.activation;
    double p2p = collective_us(Collective::send_recv, full / d.t, ParallelDim::pp) * 1e-6;
    if (d.t > 1 && !d.sp)
      p2p += collective_us(Collective::all_gather, full, ParallelDim::tp) * 1e-6;
    // Overlapped (Megatron's overlap_p2p_comm), a transfer hides behind the chunk computed
    // meanwhile; what it does not cover is exposed.
    const double chunks = layout_.virtual_stages;
    if (layout_.overlap.pp) {
      st.p2p_f = chunks * std::max(0.0, p2p - st.forward() / chunks);
      st.p2p_b = chunks * std::max(0.0, p2p - st.backward() / chunks);
    } else {
      st.p2p_f = st.p2p_b = chunks * p2p;
    }
  }
  return st;
}

// Parameters held by one GPU of a stage: the layers' TP-split and replicated parameters; the
// first stage holds the vocab-parallel token embedding and learned positions, the last the
// output layer (tied to the embedding: a second copy when pp > 1, as Megatron keeps).
StageParameters Estimator::stage_parameters(int stage) const {
  const bool first = stage == 0, last = stage == layout_.pp - 1;
  const LayerParameters layer = model_.layer_parameters();
  StageParameters params;
  params.dense = stage_layers_[stage] * (layer.sharded / d_.t + layer.replicated);
  params.experts = stage_layers_[stage] * layer.experts / (d_.et * layout_.ep);
  if (first) {
    params.dense += d_.v * d_.h / d_.t + (model_.learned_positions ? model_.seq_len * d_.h : 0);
  }
  if (last && (!first || !model_.tied_embeddings)) params.dense += d_.v * d_.h / d_.t;
  return params;
}

MemoryEstimate Estimator::stage_memory(int stage) const {
  const Dims& d = d_;
  const int p = layout_.pp, v = layout_.virtual_stages;
  const bool last = stage == p - 1;
  const StageParameters params = stage_parameters(stage);
  // Bytes per parameter times parameters per GPU, ZeRO stage `zero` and above sharding them.
  auto held_gb = [&](double bytes_per_param, int zero) {
    return (params.dense / shards_from(zero) + params.experts / expert_shards_from(zero)) *
           bytes_per_param / kGB;
  };
  MemoryEstimate mem;
  mem.weights_gb = held_gb(bytes_.weight, 3);
  if (layout_.zero == 3) {
    // FSDP holds the layer in hand and the next one gathered.
    const LayerParameters layer = model_.layer_parameters();
    const double gathered =
        layer.sharded / d.t + layer.replicated + layer.experts / (d.et * layout_.ep);
    mem.weights_gb += 2 * gathered * bytes_.weight / kGB;
  }
  if (d.fp8) {
    // Transformer Engine's FP8 copy of every layer GEMM weight it runs, one byte each (the same
    // TE example): the stage's layers, or under ZeRO-3 the two gathered ones.
    const LayerParameters layer = model_.layer_parameters();
    const double per_layer = layer.sharded / d.t + layer.experts / (d.et * layout_.ep);
    const double layers_copied = layout_.zero == 3 ? 2 : stage_layers_[stage];
    mem.weights_gb += layers_copied * per_layer * kFp8WeightBytes / kGB;
  }
  mem.gradients_gb = held_gb(bytes_.grad, 2);
  mem.optimizer_gb = held_gb(bytes_.optimizer, 1);

  // Layers whose activations are held at the peak: in 1F1B, stage i has min(m, p - i)
  // micro-batches in flight, each over its layers (stage 0: L layers' worth, Korthikanti et al.
  // 2022, Section 4.2.3); in Megatron's interleaved schedule stage i warms up with
  // 2(p - i - 1) + (v - 1)p chunk passes plus the one in progress, each of a v-th of its layers
  // (stage 0: L (1 + (p - 1)/(pv))).
  const double layers = stage_layers_[stage];
  double layers_held = 0;
  if (v == 1) {
    layers_held = std::min(m_, p - stage) * layers;
  } else {
    const double chunks = std::min(m_ * v, 2 * (p - stage - 1) + (v - 1) * p + 1);
    layers_held = chunks * layers / v;
  }
  double act = layers_held * stored_layer_activations(d, layout_.recompute);
  // Recomputation rebuilds what it dropped, one layer at a time, in the backward pass.
  const LayerActivations one = layer_activations(d);
  if (layout_.recompute == Recompute::full) act += one.total() - fp8_saved_activations(d);
  if (layout_.recompute == Recompute::selective) act += one.attention;
  if (last) act += d.b * d.s * d.v / d.t * kLogitBytes;
  mem.activations_gb = act / kGB;
  mem.other_gb = kReserveBytes / kGB;
  return mem;
}

// Gradient reduction over DP (x CP), bucketed like Megatron's DistributedDataParallel and
// (overlap dp_grads, the default) overlapped with the backward pass of the last micro-batch:
// bucket i (of n) is ready (i + 1)/n of the way through that pass, buckets go one after
// another, and what ends after the pass is exposed. ZeRO stages:
// - 1 (Megatron's distributed optimizer): the buckets are reduce-scattered and, after the
//   optimizer step, the bf16 parameters all-gathered: exposed, or (dp_params) beside the next
//   step's first forward pass.
// - 2: gradients are sharded too, so every micro-batch's gradients are reduce-scattered, not
//   just the last one's: those of the m - 1 earlier ones run beside the following micro-batch's
//   work, exposed where they outlast it.
// - 3 (FSDP full sharding): parameters are sharded as well and all-gathered for every
//   micro-batch's forward and again for its backward (one layer ahead, beside the layer in
//   hand); no all-gather after the step.
void Estimator::data_parallel(const StageParameters& params, const StageTime& micro_batch,
                              StepEstimate& out) {
  // Megatron buckets the dense and the expert gradients apart, each kind reducing over its own
  // group; a bucket is ready when the backward pass has produced its share of its kind.
  struct Bucket {
    double params;
    GroupShape group;
    double ready;  // fraction of the backward pass
  };
  std::vector<Bucket> buckets;
  auto add_buckets = [&](double n, const GroupShape& group) {
    if (!(n > 0) || group.size <= 1) return;
    const double size = layout_.bucket_params > 0
                            ? layout_.bucket_params
                            : std::max(kBucketParams, kBucketParamsPerDpRank * group.size);
    const int count = std::max(1, static_cast<int>(std::ceil(n / size)));
    for (int i = 0; i < count; ++i) {
      buckets.push_back({i + 1 < count ? size : n - (count - 1) * size, group,
                         static_cast<double>(i + 1) / count});
    }
  };
  const GroupShape dense_group = layout_.gradient_group();
  const GroupShape expert_group = layout_.expert_gradient_group();
  add_buckets(params.dense, dense_group);
  add_buckets(params.experts, expert_group);
  if (buckets.empty()) return;
  std::stable_sort(buckets.begin(), buckets.end(),
                   [](const Bucket& x, const Bucket& y) { return x.ready < y.ready; });

  const int zero = layout_.zero;
  const double forward_s = micro_batch.forward(), backward_s = micro_batch.backward();
  const Collective op = zero >= 1 ? Collective::reduce_scatter : Collective::all_reduce;
  auto bucketed = [&](Collective collective_op, double bytes_per_param) {
    double seconds = 0;
    for (const Bucket& b : buckets)
      seconds += collective_us(collective_op, b.params * bytes_per_param, b.group) * 1e-6;
    return seconds;
  };
  double end = 0, reduction = 0;
  for (const Bucket& b : buckets) {
    const double us = collective_us(op, b.params * bytes_.grad, b.group);
    // Not overlapped, every bucket waits for the whole backward pass.
    const double ready = layout_.overlap.dp_grads ? backward_s * b.ready : backward_s;
    end = std::max(end, ready) + us * 1e-6;
    reduction += us * 1e-6;
  }
  double exposed = std::max(0.0, end - backward_s);
  double total = reduction;
  if (zero >= 2) {
    // The parameters of each micro-batch's forward and backward (FSDP), then its gradients.
    const double gathers = zero == 3 ? 2 * bucketed(Collective::all_gather, bytes_.weight) : 0;
    const double per_micro_batch = gathers + reduction;
    exposed += (m_ - 1) * std::max(0.0, per_micro_batch - micro_batch.total());
    exposed += std::max(0.0, gathers - forward_s);  // the last micro-batch's
    total = m_ * per_micro_batch;
  }
  if (zero == 1 || zero == 2) {
    const double gather = bucketed(Collective::all_gather, bytes_.weight);
    // Overlapped, the next step's first forward pass covers what it can.
    exposed += layout_.overlap.dp_params ? std::max(0.0, gather - forward_s) : gather;
    total += gather;
  }
  out.breakdown.dp_exposed_s = exposed;
  out.dp_comm_s = total;
  // For the report: each collective over all of a GPU's gradients (or parameters) at once, the
  // dense and the experts' one after the other.
  auto whole = [&](Collective collective_op, double bytes_per_param) {
    CollectiveEstimate e;
    if (dense_group.size > 1)
      e = planner_.estimate(collective_op, params.dense * bytes_per_param, dense_group);
    if (params.experts > 0 && expert_group.size > 1) {
      const CollectiveEstimate experts =
          planner_.estimate(collective_op, params.experts * bytes_per_param, expert_group);
      e.us += experts.us;
      e.algorithm += "+experts:" + experts.algorithm;
      e.crosses_network = e.crosses_network || experts.crosses_network;
    }
    return e;
  };
  out.dp_reduction = whole(op, bytes_.grad);
  if (zero >= 1) {
    const CollectiveEstimate gather = whole(Collective::all_gather, bytes_.weight);
    out.dp_reduction.us += gather.us;
    out.dp_reduction.algorithm =
        "reduce_scatter(" + out.dp_reduction.algorithm + ")+all_gather(" + gather.algorithm + ")";
    out.dp_reduction.crosses_network = out.dp_reduction.crosses_network || gather.crosses_network;
  }
}

StepEstimate Estimator::run() {
  check();
  const AcceleratorSpec& gpu = cluster_.gpu;
  d_.c = layout_.cp;
  d_.context = model_.seq_len;
  d_.s = model_.seq_len / d_.c;
  d_.b = layout_.micro_batch;
  d_.h = model_.hidden;
  d_.a = model_.heads;
  d_.f = model_.ffn();
  d_.v = model_.vocab;
  d_.t = layout_.tp;
  d_.r = model_.kv_width() / model_.hidden;
  d_.sp = layout_.sequence_parallel && layout_.tp > 1;
  d_.gated = model_.gated_mlp;
  d_.flash = layout_.attention == AttentionKernel::flash;
  d_.fp8 = layout_.precision == Precision::fp8;
  d_.activation_bytes = bytes_.activation;
  d_.moe = model_.moe();
  d_.e = model_.moe() ? model_.experts : 1;
  d_.e_local = d_.e / layout_.ep;
  d_.et = model_.moe() ? layout_.expert_tp() : d_.t;
  d_.x = model_.moe() ? model_.active_experts() * layout_.capacity : 1;
  StepEstimate out;
  out.layout = layout_;
  layer_ = layer_compute();
  out.gemm_efficiency = layer_.gemm_efficiency;
  tp_pair_ =
      tp_pair(d_.s * d_.b * d_.h * bytes_.activation, layout_.group_of(ParallelDim::tp), d_.sp);
  out.tp_all_reduce = tp_pair_;

  // The pipeline runs at the pace of its slowest stage (the first holds the embedding, the last
  // the output layer, the stages between them are alike).
  const int p = layout_.pp, v = layout_.virtual_stages;
  StageTime slowest = stage_time(0);
  for (int stage : {1, p - 1}) {
    if (stage < p) {
      const StageTime st = stage_time(stage);
      if (st.total() > slowest.total()) slowest = st;
    }
  }
  // 1F1B: (m + p - 1)(t_f + t_b); interleaved over v chunks: m (t_f + t_b) + (p - 1)(t_f + t_b)/v
  // (Narayanan et al. 2021, Section 2.2). The (p - 1) part is the bubble.
  StepBreakdown& bd = out.breakdown;
  bd.compute_s = m_ * (slowest.compute_f + slowest.compute_b);
  bd.tp_comm_s = m_ * (slowest.tp_f + slowest.tp_b);
  bd.cp_comm_s = m_ * (slowest.cp_f + slowest.cp_b);
  bd.ep_comm_s = m_ * (slowest.ep_f + slowest.ep_b);
  bd.pp_comm_s = m_ * (slowest.p2p_f + slowest.p2p_b);
  bd.pp_bubble_s = (p - 1) * slowest.total() / v;
  if (p > 1 && model_.tied_embeddings) {
    // The tied embedding's gradient is all-reduced between the first and last stage once a step
    // (fp32, V h / t per GPU); modelled as a pipeline send of that size.
    bd.pp_comm_s +=
        collective_us(Collective::send_recv, d_.v * d_.h / d_.t * bytes_.grad, ParallelDim::pp) *
        1e-6;
  }

  // Memory: the stage that needs the most.
  out.memory = stage_memory(0);
  int worst_stage = 0;
  for (int stage = 1; stage < p; ++stage) {
    const MemoryEstimate mem = stage_memory(stage);
    if (mem.total_gb() > out.memory.total_gb()) {
      out.memory = mem;
      worst_stage = stage;
    }
  }

  StageParameters params;
  for (int stage = 0; stage < p; ++stage) {
    const StageParameters held = stage_parameters(stage);
    if (held.total() > params.total()) params = held;
  }
  data_parallel(params, slowest, out);
  const double optimizer_params =
      params.dense / shards_from(1) + params.experts / expert_shards_from(1);
  bd.optimizer_s = optimizer_params * bytes_.optimizer_traffic / (gpu.hbm_gbps * 1e9);

  out.step_s = 0;
  for (const BreakdownPart& part : kBreakdownParts) out.step_s += bd.*part.seconds;
  const double gb = layout_.global_batch;
  out.tokens_per_s = gb * model_.seq_len / out.step_s;
  // Against the BF16 peak in either precision, as MFU is usually quoted.
  out.mfu = model_.step_flops(gb) / (out.step_s * layout_.gpus() * gpu.peak_tflops * 1e12);
  out.fits = out.memory.total_gb() <= gpu.memory_gb;

  if (!out.fits) {
    const MemoryEstimate& mem = out.memory;
    const std::pair<double, const char*> parts[] = {{mem.activations_gb, "activations"},
                                                    {mem.optimizer_gb, "optimizer state"},
                                                    {mem.gradients_gb, "gradients"},
                                                    {mem.weights_gb, "weights"}};
    const auto* largest = std::max_element(std::begin(parts), std::end(parts),
                                           [](auto& x, auto& y) { return x.first < y.first; });
    out.notes.push_back("does not fit: " + format("%.1f", mem.total_gb()) + " GB > " +
                        format("%.0f", gpu.memory_gb) + " GB (" + largest->second + " " +
                        format("%.1f", largest->first) + " GB" +
                        (p > 1 ? ", pipeline stage " + str(worst_stage) : std::string()) + ")");
  }
  if (bd.pp_bubble_s > 0.1 * out.step_s) {
    out.notes.push_back("pipeline bubble is " + format("%.0f", 100 * bd.pp_bubble_s / out.step_s) +
                        "% of the step: " + str(m_) +
                        " micro-batches per pipeline; more (larger gb, smaller mb or dp) or "
                        "interleaving (vp) shrink it");
  }
  if (out.tp_all_reduce.crosses_network) {
    out.notes.push_back("TP groups of " + str(layout_.tp) +
                        " span nodes: their activation collectives cross the network");
  }
  if (bd.dp_exposed_s > 0.1 * out.step_s) {
    out.notes.push_back("gradient reduction is exposed for " +
                        format("%.1f", bd.dp_exposed_s * 1e3) + " ms (" +
                        format("%.0f", 100 * bd.dp_exposed_s / out.step_s) + "% of the step)");
  }
  return out;
}

}  // namespace

StepEstimate estimate_step(const ModelSpec& model, const Layout& layout,
                           CollectivePlanner& planner) {
  return Estimator(model, layout, planner).run();
}

}  // namespace tpf::plan
