#include "plan/compute_model.h"

#include <algorithm>

#include "plan/invalid_input.h"

namespace tpf::plan {
namespace {

// A causal mask leaves half of the s x s blocks for a fused kernel to compute.
constexpr double kCausalFraction = 0.5;

}  // namespace

const char* to_string(Precision precision) {
  switch (precision) {
    case Precision::bf16: return "bf16";
    case Precision::fp8: return "fp8";
    case Precision::fp32: return "fp32";
  }
  return "?";
}

ComputeModel::ComputeModel(const AcceleratorSpec& gpu, Precision precision) : gpu_(gpu) {
  if (precision == Precision::fp8) {
    if (!(gpu.fp8_peak_tflops > 0)) {
      invalid("precision=fp8: the accelerator " + gpu.name +
              " has no FP8 peak (node.gpu.fp8_peak_tflops is 0)");
    }
    peak_ = gpu.fp8_peak_tflops * 1e12;
    large_gemm_eff_ = gpu.max_fp8_gemm_efficiency;
    input_bytes_ = 1;
  } else if (precision == Precision::fp32) {
    if (!(gpu.fp32_peak_tflops > 0)) {
      invalid("precision=fp32: the accelerator " + gpu.name +
              " has no FP32 peak (node.gpu.fp32_peak_tflops is 0)");
    }
    peak_ = gpu.fp32_peak_tflops * 1e12;
    large_gemm_eff_ = gpu.max_fp32_gemm_efficiency;
    input_bytes_ = 4;
    output_bytes_ = 4;
  } else {
    peak_ = gpu.peak_tflops * 1e12;
    large_gemm_eff_ = gpu.max_gemm_efficiency;
    input_bytes_ = 2;
  }
}

double ComputeModel::gemm_s(const GemmShape& g) const {
  const double compute = g.flops() / (peak_ * large_gemm_eff_);
  const double bytes =
      g.count * ((g.m * g.k + g.k * g.n) * input_bytes_ + g.m * g.n * output_bytes_);
  return std::max(compute, memory_s(bytes)) + gpu_.gemm_overhead_us * 1e-6;
}

double ComputeModel::gemm_backward_s(const GemmShape& g) const {
  const GemmShape input_grad{g.m, g.k, g.n, g.count};   // dY (m x n) times W^T (n x k)
  const GemmShape weight_grad{g.k, g.n, g.m, g.count};  // X^T (k x m) times dY (m x n)
  return gemm_s(input_grad) + gemm_s(weight_grad);
}

double ComputeModel::gemm_efficiency(const GemmShape& g) const {
  return g.flops() / (gemm_s(g) * peak_);
}

double ComputeModel::attention_efficiency(const AttentionShape& a) const {
  const double rows = a.heads * a.queries;
  return gpu_.attention_efficiency * a.keys / (a.keys + gpu_.attention_half_keys) * rows /
         (rows + gpu_.attention_half_rows);
}

double ComputeModel::flash_attention_s(const AttentionShape& attention) const {
  return kCausalFraction * attention.flops() /
         (gpu_.peak_tflops * 1e12 * attention_efficiency(attention));
}

double ComputeModel::memory_s(double bytes) const { return bytes / (gpu_.hbm_gbps * 1e9); }

}  // namespace tpf::plan
