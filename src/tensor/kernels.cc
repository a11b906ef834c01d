#include "tensor/kernels.h"

#include <cmath>

#include "tensor/fast_math.h"
#include "tensor/vector_clones.h"

namespace tpf {

TPF_VECTOR_CLONES
void layer_norm_forward(const float* x, const float* gamma, const float* beta, int64_t rows,
                        int64_t cols, float eps, float* y, float* mean, float* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    // Two passes in double: LayerNorm inputs of a residual stream can have a large mean.
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += xr[c];
    const double m = sum / static_cast<double>(cols);
    double sq = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double d = xr[c] - m;
      sq += d * d;
    }
    const float s = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(cols) + eps));
    const float mf = static_cast<float>(m);
    for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mf) * s * gamma[c] + beta[c];
    mean[r] = mf;
    rstd[r] = s;
  }
}

TPF_VECTOR_CLONES
void layer_norm_backward(const float* dy, const float* x, const float* gamma, const float* mean,
                         const float* rstd, int64_t rows, int64_t cols, float* dx, float* dgamma,
                         float* dbeta) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* dyr = dy + r * cols;
    const float* xr = x + r * cols;
    float* dxr = dx + r * cols;
    const float m = mean[r];
    const float s = rstd[r];
    // dx = s * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma.
    float sum_g = 0, sum_gx = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const float xhat = (xr[c] - m) * s;
      const float g = dyr[c] * gamma[c];
      sum_g += g;
      sum_gx += g * xhat;
      dgamma[c] += dyr[c] * xhat;
      dbeta[c] += dyr[c];
    }
    const float inv = 1.0f / static_cast<float>(cols);
    const float mean_g = sum_g * inv;
    const float mean_gx = sum_gx * inv;
    for (int64_t c = 0; c < cols; ++c) {
      const float xhat = (xr[c] - m) * s;
      dxr[c] = s * (dyr[c] * gamma[c] - mean_g - xhat * mean_gx);
    }
  }
}

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
}  // namespace

TPF_VECTOR_CLONES
void gelu_forward(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + fast_tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v)));
  }
}

TPF_VECTOR_CLONES
void gelu_backward(const float* dy, const float* x, int64_t n, float* dx) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float t = fast_tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
    const float dinner = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * dinner);
  }
}

TPF_VECTOR_CLONES
void add_bias_rows(float* y, const float* bias, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * cols;
    for (int64_t c = 0; c < cols; ++c) yr[c] += bias[c];
  }
}

TPF_VECTOR_CLONES
void accumulate_bias_grad(const float* dy, int64_t rows, int64_t cols, float* dbias) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* dyr = dy + r * cols;
    for (int64_t c = 0; c < cols; ++c) dbias[c] += dyr[c];
  }
}

TPF_VECTOR_CLONES
void add_into(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

TPF_VECTOR_CLONES
void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, const AdamWStep& s) {
  for (int64_t j = 0; j < n; ++j) {
    const float gj = g[j] * s.grad_scale;
    m[j] = s.beta1 * m[j] + (1.0f - s.beta1) * gj;
    v[j] = s.beta2 * v[j] + (1.0f - s.beta2) * gj * gj;
    w[j] = w[j] * s.decay - s.step_size * m[j] / (std::sqrt(v[j]) * s.inv_sqrt_bias2 + s.eps);
  }
}

void dropout_in_place(float* x, int64_t n, float p, RngKey key, uint64_t first_index) {
  if (p <= 0.0f) return;
  const float scale = 1.0f / (1.0f - p);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = dropout_keeps(key, first_index + static_cast<uint64_t>(i), p) ? x[i] * scale : 0.0f;
  }
}

}  // namespace tpf
