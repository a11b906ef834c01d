// This machine as a planner cluster, so that `tpf plan --cluster this-host` and
// `tpf train --layout auto` predict the trainer's runs here: one node whose "accelerators" are
// the job's ranks sharing the machine's cores, each running fp32 GEMMs and element-wise kernels
// at rates measured on the spot, joined by the shared-memory fabric priced by its own cost model.
#pragma once

#include <string>

#include "coll/cost_model.h"
#include "plan/cluster.h"

namespace tpf::cli {

// The name `--cluster` takes for this machine.
inline constexpr const char* kHostClusterName = "this-host";

// What one core of this machine does, measured by measure_host_rates().
struct HostRates {
  std::string cpu;  // OpenBLAS's kernel family, e.g. "Zen"
  int cores = 1;    // the machine's hardware threads (load_cluster_or_host: the job's, TPF_CPUS)
  double memory_gb = 1;         // physical memory, 1e9 bytes
  double gemm_gflops = 1;       // fp32 GEMM of a large square shape, one thread
  double gemm_overhead_us = 0;  // the fixed cost of one small GEMM call
  double elementwise_gbps = 1;  // bytes in + out per second of LayerNorm, GELU and adds
};

// Times the trainer's own kernels (tpf::gemm_f32 on one BLAS thread, layer_norm_forward,
// gelu_forward, add_into), the median of repeated runs each, in about a fifth of a second.
// Restores the BLAS thread count it found.
HostRates measure_host_rates();

// The cluster of `ranks` processes on this machine: each gets min(1, cores / ranks) of a core's
// rates (the scheduler shares the cores among them) and 1/ranks of the memory; the scale-up link
// is shared memory at `link`'s copy rate with a step of link.step_us plus step_us_per_excess_rank
// per rank beyond the cores (what the fabric's own algorithm choice uses). FP32 is the precision
// the trainer runs; a CPU has no faster 16-bit GEMM here, so the BF16 peak equals it.
plan::ClusterSpec host_cluster(const HostRates& rates, int ranks, const coll::ShmLinkCost& link);

// `name_or_path` as `--cluster` takes it: this-host (measured now, sized to `gpus` ranks, or to
// the cores when 0), else a preset or a YAML file (plan::load_cluster).
plan::ClusterSpec load_cluster_or_host(const std::string& name_or_path, int gpus);

}  // namespace tpf::cli
