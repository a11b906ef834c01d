// The element-wise and row-wise kernels of a GPT layer, f32, on row-major [rows, cols] data.
// Each backward kernel ACCUMULATES parameter gradients (+=) so that gradient accumulation over
// micro-batches needs no extra buffers, and OVERWRITES input gradients.
#pragma once

#include <cstdint>

#include "tensor/counter_rng.h"

namespace tpf {

// y = (x - mean) / sqrt(var + eps) * gamma + beta per row; saves mean and rstd (one per row).
void layer_norm_forward(const float* x, const float* gamma, const float* beta, int64_t rows,
                        int64_t cols, float eps, float* y, float* mean, float* rstd);
void layer_norm_backward(const float* dy, const float* x, const float* gamma, const float* mean,
                         const float* rstd, int64_t rows, int64_t cols, float* dx, float* dgamma,
                         float* dbeta);

// GELU, tanh approximation (GPT-2's): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_forward(const float* x, int64_t n, float* y);
// dx = dy * gelu'(x).
void gelu_backward(const float* dy, const float* x, int64_t n, float* dx);

// y[r, :] += bias for every row.
void add_bias_rows(float* y, const float* bias, int64_t rows, int64_t cols);
// dbias += sum over rows of dy.
void accumulate_bias_grad(const float* dy, int64_t rows, int64_t cols, float* dbias);

// y += x.
void add_into(float* y, const float* x, int64_t n);

// One AdamW update of n elements (Loshchilov & Hutter 2019): g' = g * grad_scale;
// m = b1 m + (1 - b1) g'; v = b2 v + (1 - b2) g'^2;
// w = w * decay - step_size * m / (sqrt(v) * inv_sqrt_bias2 + eps).
struct AdamWStep {
  float beta1, beta2, step_size, inv_sqrt_bias2, eps, decay, grad_scale;
};
void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, const AdamWStep& s);

// Inverted dropout with a counter-based mask: x[i] *= keep(first_index + i) / (1 - p), in place.
// first_index is the global index of x[0], so a shard drops what the whole tensor would.
// The backward pass is the same call on the gradient (the mask is recomputed, not stored).
void dropout_in_place(float* x, int64_t n, float p, RngKey key, uint64_t first_index);

}  // namespace tpf
