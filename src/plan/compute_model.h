// How fast one accelerator runs the kernels of a training step: a GEMM of a given shape in a
// given precision (a roofline of the large-GEMM rate and HBM traffic plus a fixed per-kernel
// cost, so efficiency keeps growing with every dimension), FlashAttention-style fused attention,
// and memory-bound element-wise work at HBM speed. The step model asks it; nothing else does.
#pragma once

#include "plan/cluster.h"

namespace tpf::plan {

// The number format of the GEMMs' inputs (Transformer Engine's FP8 keeps attention, element-wise
// work and the optimizer in 16 bits). fp32 is everything in 32 bits, as `tpf train` runs on CPUs.
enum class Precision { bf16, fp8, fp32 };
const char* to_string(Precision precision);

// `count` independent GEMMs (heads of a batched GEMM) of an m x k by k x n product.
struct GemmShape {
  double m = 0, n = 0, k = 0;
  double count = 1;
  double flops() const { return 2 * m * n * k * count; }
};

// Fused attention on one GPU: `heads` (of all its micro-batch's sequences) of `queries` each
// against `keys` (the whole context under context parallelism), of width `head_dim`.
struct AttentionShape {
  double heads = 0, queries = 0, keys = 0, head_dim = 0;
  // Megatron-LM's count: QK^T and PV over the full queries x keys, the mask ignored.
  double flops() const { return 4 * heads * queries * keys * head_dim; }
};

class ComputeModel {
 public:
  // Throws Error(invalid_argument) for fp8 on an accelerator without an FP8 peak.
  ComputeModel(const AcceleratorSpec& gpu, Precision precision);

  // Seconds of the GEMMs: max(FLOPs at the large-GEMM rate, bytes at HBM speed) plus the fixed
  // cost of one kernel (launch, prologue, the last partial wave of tiles).
  double gemm_s(const GemmShape& gemm) const;
  // The forward GEMM and the two backward ones (input and weight gradient), which have the same
  // FLOPs and the transposed shapes.
  double gemm_backward_s(const GemmShape& gemm) const;
  // Achieved fraction of the precision's peak over `gemm`.
  double gemm_efficiency(const GemmShape& gemm) const;
  // Forward pass of fused causal attention (FlashAttention; the backward pass takes twice as
  // long): its model FLOPs, of which the kernel computes the unmasked half, at the accelerator's
  // attention efficiency for this shape.
  double flash_attention_s(const AttentionShape& attention) const;
  // Achieved fraction of BF16 peak over the model FLOPs of `attention`: the large-size rate
  // scaled down by the keys each query tile visits and by the rows that fill the GPU.
  double attention_efficiency(const AttentionShape& attention) const;
  // Memory-bound work that moves `bytes` through HBM.
  double memory_s(double bytes) const;
  // The peak the GEMMs run against, FLOP/s.
  double gemm_peak() const { return peak_; }

 private:
  AcceleratorSpec gpu_;      // a copy: callers pass temporaries
  double peak_;              // FLOP/s of the GEMMs' precision
  double large_gemm_eff_;    // achieved fraction of peak_ by a large GEMM
  double input_bytes_;       // per element of A and B
  double output_bytes_ = 2;  // per element of C: 16 bits under bf16 and fp8
};

}  // namespace tpf::plan
