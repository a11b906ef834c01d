#include "cli/host_cluster.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>
#include <vector>

#include "comm/settings.h"
#include "tensor/blas.h"
#include "tensor/counter_rng.h"
#include "tensor/kernels.h"
#include "topo/hosts.h"

namespace tpf::cli {
namespace {

// The median of `repeats` runs of `work` after one untimed run, in seconds: the rate a training
// run on the same (shared, noisy) machine sees, where the fastest run would be an outlier.
template <typename Work>
double median_seconds(int repeats, Work&& work) {
  work();  // first touches, clock ramp-up
  std::vector<double> seconds;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    work();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(seconds.begin(), seconds.begin() + repeats / 2, seconds.end());
  return seconds[repeats / 2];
}

// Large enough that OpenBLAS runs at its large-GEMM rate (8 MFLOP of overhead-free work per
// 1 us of call cost), small enough to take ~5 ms on one core (16 runs: ~0.1 s).
constexpr int64_t kLargeGemm = 384;
// Small enough that the call's fixed cost dominates.
constexpr int64_t kSmallGemm = 8;
constexpr int kSmallCalls = 200;
// Element-wise operands: 1 Mi floats (4 MiB), beyond the L2 caches as activations are.
constexpr int64_t kRows = 1024, kCols = 1024;

}  // namespace

HostRates measure_host_rates() {
  HostRates r;
  r.cpu = blas_kernel_name();
  r.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  r.memory_gb = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE) / 1e9;

  const int threads = blas_threads();
  set_blas_threads(1);
  {
    const int64_t n = kLargeGemm;
    std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
    const double s = median_seconds(15, [&] {
      gemm_f32(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    });
    r.gemm_gflops = 2.0 * n * n * n / s / 1e9;
  }
  {
    const int64_t n = kSmallGemm;
    std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
    const double s = median_seconds(7, [&] {
      for (int i = 0; i < kSmallCalls; ++i) {
        gemm_f32(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
      }
    });
    r.gemm_overhead_us =
        std::max(0.0, s / kSmallCalls * 1e6 - 2.0 * n * n * n / r.gemm_gflops / 1e3);
  }
  set_blas_threads(threads);
  {
    const int64_t n = kRows * kCols;
    std::vector<float> x(n, 0.5f), y(n), z(n), gamma(kCols, 1.0f), beta(kCols, 0.0f);
    std::vector<float> mean(kRows), rstd(kRows);
    const double s = median_seconds(7, [&] {
      layer_norm_forward(x.data(), gamma.data(), beta.data(), kRows, kCols, 1e-5f, y.data(),
                         mean.data(), rstd.data());
      gelu_forward(y.data(), n, z.data());
      add_into(z.data(), x.data(), n);
    });
    // Each kernel reads one tensor and writes one (the add reads two, writes one).
    const double bytes = 4.0 * n * (2 + 2 + 3);
    r.elementwise_gbps = bytes / s / 1e9;
  }
  return r;
}

HostSpread host_spread(Communicator& comm) {
  const int size = comm.size();
  // Every rank learns every rank's machine, so all of them reach the same verdict below.
  const std::string key = topo::local_machine_key();
  const int64_t mine = static_cast<int64_t>(stream_of(key));
  std::vector<int64_t> machine_of(static_cast<size_t>(size));
  comm.all_gather(&mine, machine_of.data(), 1, DType::i64);

  HostSpread spread;
  spread.hosts = comm.host_count();
  if (size % spread.hosts != 0) {
    throw Error(ErrorCode::invalid_argument,
                std::to_string(size) + " ranks on " + std::to_string(spread.hosts) +
                    " hosts: the hosts hold different numbers of ranks");
  }
  const int per_host = size / spread.hosts;
  for (int r = 0; r < size; ++r) {
    if (comm.host_of(r) != r / per_host) {
      throw Error(ErrorCode::invalid_argument,
                  "rank " + std::to_string(r) + " is on host " + std::to_string(comm.host_of(r)) +
                      ": the ranks of a host are not consecutive (the planner puts ranks " +
                      std::to_string(per_host) + "n .. " + std::to_string(per_host) + "n + " +
                      std::to_string(per_host - 1) + " on node n)");
    }
  }
  std::map<int64_t, int> ranks_on_machine;
  for (int64_t m : machine_of) ++ranks_on_machine[m];
  spread.machines = static_cast<int>(ranks_on_machine.size());
  const bool even = spread.hosts % spread.machines == 0 &&
                    std::all_of(ranks_on_machine.begin(), ranks_on_machine.end(),
                                [&](const auto& m) { return m.second * spread.machines == size; });
  if (!even) {
    throw Error(ErrorCode::invalid_argument, std::to_string(spread.hosts) + " hosts on " +
                                                 std::to_string(spread.machines) +
                                                 " machines that hold different numbers of ranks");
  }
  return spread;
}

plan::ClusterSpec host_cluster(const HostRates& rates, int ranks, const HostSpread& spread,
                               const coll::ShmLinkCost& link,
                               const coll::NetworkLinkCost& network) {
  if (spread.hosts < 1 || spread.machines < 1 || ranks % spread.hosts != 0 ||
      spread.hosts % spread.machines != 0) {
    throw Error(
        ErrorCode::invalid_argument,
        std::to_string(ranks) + " ranks do not spread evenly over " + std::to_string(spread.hosts) +
            " hosts" +
            (spread.machines == 1 ? std::string()
                                  : " on " + std::to_string(spread.machines) + " machines"));
  }
  const int per_host = ranks / spread.hosts;
  const int per_machine = ranks / spread.machines;
  const double share = std::min(1.0, static_cast<double>(rates.cores) / per_machine);
  const int excess = std::max(0, per_machine - rates.cores);
  plan::ClusterSpec c;
  c.name = kHostClusterName;
  if (spread.hosts > 1) {
    c.name += spread.machines == 1 ? " as " + std::to_string(spread.hosts) + " hosts"
                                   : " x " + std::to_string(spread.machines) + " machines, " +
                                         std::to_string(spread.hosts) + " hosts";
  }
  c.nodes = spread.hosts;
  c.gpus_per_node = per_host;
  plan::AcceleratorSpec& g = c.gpu;
  g.name = "CPU rank (" + rates.cpu + ", " + std::to_string(rates.cores) + " cores / " +
           std::to_string(per_machine) + " ranks)";
  g.fp32_peak_tflops = rates.gemm_gflops * share / 1e3;
  g.peak_tflops = g.fp32_peak_tflops;
  g.fp8_peak_tflops = 0;
  g.max_gemm_efficiency = g.max_fp32_gemm_efficiency = 1;  // the rate is measured, not a peak
  g.max_fp8_gemm_efficiency = 1;                           // unused without an FP8 peak
  g.gemm_overhead_us = rates.gemm_overhead_us / share;
  g.attention_efficiency = 1;  // unused: the trainer materializes attention
  g.memory_gb = rates.memory_gb / per_machine;
  g.hbm_gbps = rates.elementwise_gbps * share;
  // The fabric's own link class for a host's ranks: its step (with the machine's excess ranks'
  // cost) and the rate of copies through its slots.
  const coll::LinkClass shm = link.link_class(per_host, excess);
  c.scale_up.name = "shared memory";
  c.scale_up.bandwidth_gbps = shm.stage_gbps;
  c.scale_up.latency_us = shm.alpha_us;
  c.scale_up.efficiency = 1;  // the copy rate is measured
  // The network as the fabric's cost model prices it: each host's one link at its rate (stated,
  // as the fabric's is, by TPF_NET_GBPS), a round of step_us, a bridge that adds nothing.
  c.nics_per_node = 1;
  c.nic_gbits = network.link_gbps * 8;
  c.nic_latency_us = network.step_us;
  c.network.link_latency_us = 0;
  c.network.efficiency = 1;
  plan::validate(c);
  return c;
}

plan::ClusterSpec load_cluster_or_host(const std::string& name_or_path, int gpus,
                                       const HostSpread& spread) {
  if (name_or_path != kHostClusterName || plan::is_cluster_file(name_or_path)) {
    if (spread.hosts > 1) {
      throw Error(ErrorCode::invalid_argument, "--hosts spreads this-host over emulated hosts; '" +
                                                   name_or_path + "' says its own nodes");
    }
    return plan::load_cluster(name_or_path, gpus);
  }
  const detail::CommSettings settings = detail::resolve_comm_settings();
  HostRates rates = measure_host_rates();
  // The cores the job may use as the fabric counts them (TPF_CPUS under tpf run), so that the
  // excess ranks here are the ones its cost model charges for.
  rates.cores = settings.job_cpus;
  return host_cluster(rates, gpus > 0 ? gpus : rates.cores, spread, settings.tuning.link_cost,
                      settings.tuning.network_cost);
}

}  // namespace tpf::cli
