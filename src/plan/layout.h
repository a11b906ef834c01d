// A parallel layout: TP x PP x DP degrees, batch split, schedule and memory options, and the rank
// order that maps it onto GPUs. Written on the command line as "tp=8,pp=4,dp=16,mb=1,...".
#pragma once

#include <array>
#include <string>

#include "plan/collective_planner.h"
#include "plan/compute_model.h"

namespace tpf::plan {

enum class Recompute { none, selective, full };
const char* to_string(Recompute recompute);

// How the attention core runs: fused (FlashAttention: no s x s tensor in memory, the default of
// every current framework) or materialized (scores, softmax and dropout as separate kernels with
// s x s tensors, as Megatron-LM ran before 2022).
enum class AttentionKernel { flash, materialized };
const char* to_string(AttentionKernel attention);

// Which dimension varies fastest over consecutive GPUs (Megatron's default: tp, then dp, then pp).
// Context parallelism has no place of its own in the order: its ranks sit right outside TP's, as
// in Megatron's tp-cp-dp-pp.
enum class ParallelDim { tp, cp, dp, pp };

// Which communication runs beside computation, as a framework schedules it.
struct Overlap {
  bool tp = false;         // TP all-gathers / reduce-scatters beside GEMMs (tp-comm-overlap; SP)
  bool pp = false;         // pipeline sends beside the next chunk's compute (overlap_p2p_comm)
  bool dp_grads = true;    // gradient buckets beside the last backward pass (overlap_grad_reduce)
  bool dp_params = false;  // parameter all-gather beside the first forward (overlap_param_gather)
};

struct Layout {
  int tp = 1, pp = 1, dp = 1;
  // Context parallelism (ring attention, Megatron's context_parallel_size): each sequence split
  // over cp ranks, keys and values passed around them.
  int cp = 1;
  // Expert parallelism (mixture-of-experts models): each MoE layer's experts split over ep of
  // the DP (x CP) ranks, tokens sent to their experts and back by all-to-alls. The experts'
  // gradients reduce over the remaining dp x cp / ep ranks (Megatron's expert data parallelism).
  int ep = 1;
  // Expert tensor parallelism: the TP degree of the experts' GEMMs. 0 = tp (Megatron's
  // default). Otherwise Megatron-Core's "parallel folding": the tp x cp x dp ranks of a pipeline
  // stage are regrouped for the MoE layers as etp (innermost), then ep, then the expert data
  // parallelism, so an EP group may sit where the TP ranks of the attention do.
  int etp = 0;
  // Tokens an expert processes, as a multiple of the mean (Megatron's moe_expert_capacity_factor
  // with padding): 1 = perfectly balanced routing.
  double capacity = 1;
  int micro_batch = 1;
  int global_batch = 0;  // 0 = the model's
  bool sequence_parallel = false;
  int virtual_stages = 1;  // interleaved 1F1B: model chunks per pipeline rank
  Recompute recompute = Recompute::none;
  // ZeRO stage over DP (x CP): 1 shards the optimizer state (Megatron's distributed optimizer),
  // 2 the gradients too, 3 the parameters too (FSDP full sharding).
  int zero = 0;
  Precision precision = Precision::bf16;
  AttentionKernel attention = AttentionKernel::flash;
  Overlap overlap;
  // Layers of the first and last pipeline stages when they differ from the others' (Megatron's
  // decoder_first/last_pipeline_num_layers; Llama 3 gives them one layer less for the embedding
  // and the output layer). 0 = the even share.
  int first_stage_layers = 0, last_stage_layers = 0;
  // Parameters per data-parallel gradient bucket (Megatron's ddp bucket_size; PyTorch DDP's
  // bucket_cap_mb in parameters). 0 = Megatron's default, max(40M, 1M x the DP group).
  int bucket_params = 0;
  std::array<ParallelDim, 3> order = {ParallelDim::tp, ParallelDim::dp, ParallelDim::pp};

  long long gpus() const { return static_cast<long long>(tp) * cp * pp * dp; }
  // The GroupShape of each dimension's groups under `order`.
  GroupShape group_of(ParallelDim dim) const;
  // The ranks that hold the same weights and reduce their gradients together: DP, or with
  // context parallelism DP x CP (Megatron reduces over both). Throws Error(invalid_argument)
  // where they do not form one group (cp > 1 and dp not right after tp in the order).
  GroupShape gradient_group() const;
  int expert_tp() const { return etp > 0 ? etp : tp; }
  bool folded() const { return expert_tp() != tp; }
  // The ranks of one MoE layer's experts: the innermost ep of the gradient group (Megatron's
  // tp-cp-ep-dp order) or, folded, ep groups at stride etp; the ranks that split each expert's
  // GEMMs (TP's, or folded the innermost etp); and those holding the same experts (dp x cp / ep
  // of them, folded tp x cp x dp / (etp x ep)).
  GroupShape expert_group() const;
  GroupShape expert_tp_group() const;
  GroupShape expert_gradient_group() const;
  // "tp=8,pp=4,dp=16,mb=1,gb=1536,sp=1,vp=1,recompute=selective,order=tp-dp-pp,zero=1,
  // precision=bf16,attention=flash,overlap=dp_grads", then cp=, ep=, etp=, capacity=, first=,
  // last= and bucket= where set.
  std::string to_string() const;
};

// Parses "key=value,..." (keys: tp cp ep etp pp dp mb gb sp vp recompute order zero precision
// attention overlap first last capacity bucket; zero1=0|1 is read as zero=0|1; overlap= takes tp,
// pp, dp_grads, dp_params joined by '+', or none). Throws Error(invalid_argument) naming the key
// for unknown keys and bad values.
Layout parse_layout(const std::string& text);

}  // namespace tpf::plan
