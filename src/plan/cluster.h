// A cluster as the planner sees it: identical nodes of accelerators joined by a scale-up domain
// (NVLink + NVSwitch), NICs into a scale-out fat-tree, a routing policy and failed links. Read
// from YAML (schema in docs/plan.md) or built from a preset sized by a GPU count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tpf::plan {

// The largest cluster the planner accepts (its fabric then has about 6 million links).
inline constexpr long long kMaxClusterGpus = 1'000'000;

// Kernels inside a training step run slower than the same kernels alone at their best shape
// (sustained clocks, other kernels' memory traffic, gaps between kernels). This factor is the
// planner's one number fitted to end-to-end runs: on Narayanan et al. 2021, Table 1 (in-sample;
// PlanStepValidation.NarayananWeakScalingOnA100 fits it again and checks this value).
inline constexpr double kInTrainingFraction = 0.81;

// An accelerator's memory and achieved kernel rates (ComputeModel). The defaults are an
// H100-SXM's: each rate is a published kernel benchmark times kInTrainingFraction. Large GEMMs:
// the best torch.matmul throughput over a sweep of shapes ("Maximum Achievable Matmul FLOPS", S.
// Bekman, ml-engineering): H100-SXM BF16 794.5 of 989 TFLOP/s (80.3 %), FP8 1402.6 of 1979
// (70.9 %). Fused causal attention, forward + backward over its model FLOPs: measured on an
// H200 (the H100's chip; docs/results/hopper-kernels-h200, cuDNN's kernel) as 54.7 % of the
// BF16 peak at large sizes, halved by the keys (784) and by the query rows (17,920) below.
struct AcceleratorSpec {
  std::string name = "H100-SXM";
  double peak_tflops = 989;       // dense BF16/FP16 tensor FLOP/s, in TFLOP/s
  double fp8_peak_tflops = 1979;  // dense FP8 tensor FLOP/s; 0 = no FP8 tensor cores
  double fp32_peak_tflops = 0;    // dense FP32 FLOP/s; 0 = precision=fp32 is not modelled
  double memory_gb = 80;          // HBM capacity (1e9 bytes)
  double hbm_gbps = 3350;         // HBM bandwidth, GB/s
  // Fractions of peak_tflops, fp8_peak_tflops and fp32_peak_tflops a large GEMM achieves in
  // training.
  double max_gemm_efficiency = 0.803 * kInTrainingFraction;
  double max_fp8_gemm_efficiency = 0.709 * kInTrainingFraction;
  double max_fp32_gemm_efficiency = 1;  // of fp32_peak_tflops
  double gemm_overhead_us = 5;          // fixed cost of one GEMM kernel (launch, tail wave)
  // Fused causal attention (FlashAttention), forward and backward, as a fraction of
  // peak_tflops over its model FLOPs, at sizes large enough to saturate the kernel. Smaller
  // problems run at that rate times keys / (keys + attention_half_keys), the fixed cost of each
  // query tile against the keys it visits, times rows / (rows + attention_half_rows), rows
  // being one GPU's heads x micro-batch x queries: too few to fill every SM.
  double attention_efficiency = 0.547 * kInTrainingFraction;
  double attention_half_keys = 784;
  double attention_half_rows = 17920;
};

// The scale-up domain: every accelerator of a node reaches every other at `bandwidth_gbps` per
// direction (a non-blocking NVSwitch).
struct ScaleUpSpec {
  std::string name = "nvlink4";
  double bandwidth_gbps = 450;  // per accelerator, per direction, GB/s
  double latency_us = 2.0;      // one step of a collective (launch + sync)
  double efficiency = 0.85;     // achievable fraction of bandwidth (protocol, SM copy limits)
};

enum class RoutingMode { ecmp, spray, adaptive };
const char* to_string(RoutingMode mode);

struct RoutingSpec {
  RoutingMode mode = RoutingMode::ecmp;
  uint64_t seed = 1;    // ECMP hash seed: different seeds give different collisions
  int queue_pairs = 1;  // each flow is split over this many QPs, hashed independently
  // Each switch mixes its own id into the hash. Off, every tier makes the same choice from the
  // same hash and traffic polarises onto a few upper links.
  bool per_switch_hash = true;
};

// A link taken out of service: by name (see FabricTopology::link_name) or a count of random
// switch-to-switch links chosen with `seed`.
struct FailureSpec {
  std::vector<std::string> links;
  int random_links = 0;
  uint64_t seed = 1;
};

struct NetworkSpec {
  int tiers = 0;                  // 2 (leaf-spine) or 3 (fat-tree with pods); 0 = fewest that fit
  int switch_radix = 64;          // ports per switch
  double oversubscription = 1.0;  // leaf downlinks per uplink (1 = non-blocking)
  bool rail_optimized = true;     // NIC i of every node in a group goes to leaf i of the group
  // PXN (NCCL >= 2.12): a transfer to a GPU on another rail first crosses NVLink to the sending
  // node's GPU on the receiver's rail and leaves through that GPU's NIC, staying on one rail.
  bool pxn = true;
  int planes = 1;                // independent copies of the fabric; NIC ports split over them
  double link_latency_us = 1.0;  // per switch hop, including the switch
  double efficiency = 0.94;      // achievable fraction of link bandwidth (headers, protocol)
};

struct ClusterSpec {
  std::string name = "custom";
  int nodes = 1;
  int gpus_per_node = 8;
  AcceleratorSpec gpu;
  ScaleUpSpec scale_up;
  int nics_per_node = 8;
  double nic_gbits = 400;       // Gbit/s per NIC, per direction
  double nic_latency_us = 2.0;  // endpoint latency of one network step (NIC + software)
  NetworkSpec network;
  RoutingSpec routing;
  FailureSpec failures;

  int total_gpus() const { return nodes * gpus_per_node; }  // validate() bounds the product
  double nic_gbps() const { return nic_gbits / 8.0; }       // GB/s
};

// Throws Error(invalid_argument) naming the field for anything inconsistent (non-positive sizes,
// GPUs not divisible by NICs, an oversubscription below 1, ...).
void validate(const ClusterSpec& cluster);

// The names `--cluster` accepts besides a file: dgx-h100, dgx-a100 (and the others listed).
std::vector<std::string> cluster_preset_names();
// A preset sized to `gpus` accelerators (a whole number of nodes); throws for an unknown name or
// a GPU count that is not a multiple of the node size.
ClusterSpec cluster_preset(const std::string& name, int gpus);

// Parses YAML text; `origin` names the file in error messages. Unknown keys are errors.
ClusterSpec parse_cluster_yaml(const std::string& text, const std::string& origin);
// Whether `name_or_path` is a cluster file (it exists) rather than a preset's name. A file says
// how many nodes the cluster has; a preset is sized by the caller.
bool is_cluster_file(const std::string& name_or_path);
// `name_or_path`: a preset name or a YAML file. `gpus` > 0 resizes (nodes = gpus / gpus_per_node).
ClusterSpec load_cluster(const std::string& name_or_path, int gpus);
// The YAML form of a cluster (what `tpf plan show-cluster` prints); parses back to the same spec.
std::string cluster_to_yaml(const ClusterSpec& cluster);

}  // namespace tpf::plan
