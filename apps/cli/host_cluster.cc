#include "cli/host_cluster.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "comm/settings.h"
#include "tensor/blas.h"
#include "tensor/kernels.h"

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

plan::ClusterSpec host_cluster(const HostRates& rates, int ranks, const coll::ShmLinkCost& link) {
  const double share = std::min(1.0, static_cast<double>(rates.cores) / ranks);
  const int excess = std::max(0, ranks - rates.cores);
  plan::ClusterSpec c;
  c.name = kHostClusterName;
  c.nodes = 1;
  c.gpus_per_node = ranks;
  c.nics_per_node = 1;  // unused: one node
  plan::AcceleratorSpec& g = c.gpu;
  g.name = "CPU rank (" + rates.cpu + ", " + std::to_string(rates.cores) + " cores / " +
           std::to_string(ranks) + " ranks)";
  g.fp32_peak_tflops = rates.gemm_gflops * share / 1e3;
  g.peak_tflops = g.fp32_peak_tflops;
  g.fp8_peak_tflops = 0;
  g.max_gemm_efficiency = g.max_fp32_gemm_efficiency = 1;  // the rate is measured, not a peak
  g.max_fp8_gemm_efficiency = 1;                           // unused without an FP8 peak
  g.gemm_overhead_us = rates.gemm_overhead_us / share;
  g.attention_efficiency = 1;  // unused: the trainer materializes attention
  g.memory_gb = rates.memory_gb / ranks;
  g.hbm_gbps = rates.elementwise_gbps * share;
  // The fabric's own link class for these ranks: its step (with the excess ranks' cost) and the
  // rate of copies through its slots.
  const coll::LinkClass shm = link.link_class(ranks, excess);
  c.scale_up.name = "shared memory";
  c.scale_up.bandwidth_gbps = shm.stage_gbps;
  c.scale_up.latency_us = shm.alpha_us;
  c.scale_up.efficiency = 1;  // the copy rate is measured
  plan::validate(c);
  return c;
}

plan::ClusterSpec load_cluster_or_host(const std::string& name_or_path, int gpus) {
  if (name_or_path != kHostClusterName || plan::is_cluster_file(name_or_path)) {
    return plan::load_cluster(name_or_path, gpus);
  }
  const detail::CommSettings settings = detail::resolve_comm_settings();
  HostRates rates = measure_host_rates();
  // The cores the job may use as the fabric counts them (TPF_CPUS under tpf run), so that the
  // excess ranks here are the ones its cost model charges for.
  rates.cores = settings.job_cpus;
  return host_cluster(rates, gpus > 0 ? gpus : rates.cores, settings.tuning.link_cost);
}

}  // namespace tpf::cli
