// This machine as a planner cluster, so that `tpf plan --cluster this-host` and
// `tpf train --layout auto` predict the trainer's runs here: one node whose "accelerators" are
// the job's ranks sharing the machine's cores, each running fp32 GEMMs and element-wise kernels
// at rates measured on the spot, joined by the shared-memory fabric priced by its own cost model.
// A job across hosts (emulated ones on this machine, or machines like this one) is one node per
// host, joined by the network the fabric's cost model describes.
#pragma once

#include <string>

#include "coll/cost_model.h"
#include "coll/network_cost.h"
#include "plan/cluster.h"
#include "tpf/comm.h"

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

// How a job's ranks lie over hosts (communicator hosts: shared memory inside one, the network
// between): `hosts` hosts of equally many consecutive ranks (the planner's placement, TP
// innermost), on `machines` machines whose cores the hosts on each share (the emulated hosts of
// scripts/emulated-hosts.sh share this one's). `machines` divides `hosts`.
struct HostSpread {
  int hosts = 1;
  int machines = 1;
};

// The spread of `comm`'s ranks: collective (every rank calls it; one all-gather of each rank's
// machine, topo::local_machine_key). Throws Error(invalid_argument), alike on every rank, where
// the planner cannot place the job: hosts with different numbers of ranks, hosts whose ranks are
// not consecutive, or machines holding different numbers of ranks.
HostSpread host_spread(Communicator& comm);

// The cluster of `ranks` processes spread as `spread` says: one node per host of ranks / hosts
// accelerators. Each rank gets min(1, cores / n) of a core's rates and 1/n of the memory, n the
// ranks on its machine (the scheduler shares a machine's cores among all of them, whichever host
// they are in); the scale-up link is shared memory at `link`'s copy rate with a step of
// link.step_us plus step_us_per_excess_rank per rank of the machine beyond its cores (the
// fabric's cost model). Across hosts each node has one NIC at `network`'s link rate, a network
// round of its step_us, through one switch (a bridge): what the fabric's own network cost model
// assumes, so TPF_NET_GBPS must state the links' rate. FP32 is the precision the trainer runs; a
// CPU has no faster 16-bit GEMM here, so the BF16 peak equals it. Throws Error(invalid_argument)
// where `spread` does not divide `ranks`.
plan::ClusterSpec host_cluster(const HostRates& rates, int ranks, const HostSpread& spread,
                               const coll::ShmLinkCost& link, const coll::NetworkLinkCost& network);

// `name_or_path` as `--cluster` takes it: this-host (measured now, sized to `gpus` ranks, or to
// the cores when 0, spread over hosts as `spread` says), else a preset or a YAML file
// (plan::load_cluster), where a spread over several hosts is an error (they say their nodes).
plan::ClusterSpec load_cluster_or_host(const std::string& name_or_path, int gpus,
                                       const HostSpread& spread = {});

}  // namespace tpf::cli
