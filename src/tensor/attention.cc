#include "tensor/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tensor/blas.h"
#include "tensor/fast_math.h"
#include "tensor/vector_clones.h"

namespace tpf {

namespace {

uint64_t prob_index(const AttentionShape& s, int64_t b, int64_t h, int64_t i, int64_t j) {
  return static_cast<uint64_t>(((b * s.total_heads + s.head_offset + h) * s.seq + i) * s.seq + j);
}

// dst = p with dropout applied (the probabilities the values are mixed with).
TPF_VECTOR_CLONES
void dropped_probs(const float* p, const AttentionShape& s, int64_t b, int64_t h, float dropout,
                   RngKey key, float* dst) {
  const float scale = 1.0f / (1.0f - dropout);
  for (int64_t i = 0; i < s.seq; ++i) {
    for (int64_t j = 0; j < s.seq; ++j) {
      const float v = p[i * s.seq + j];
      dst[i * s.seq + j] =
          (v != 0.0f && dropout_keeps(key, prob_index(s, b, h, i, j), dropout)) ? v * scale : 0.0f;
    }
  }
}

}  // namespace

TPF_VECTOR_CLONES
void causal_attention_forward(const float* qkv, const AttentionShape& s, float dropout, RngKey key,
                              float* probs, float* out) {
  const int64_t w = s.width();
  const int64_t ld = 3 * w;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const int64_t tt = s.seq * s.seq;
  std::vector<float> dropped(dropout > 0 ? static_cast<size_t>(tt) : 0);
  for (int64_t b = 0; b < s.batch; ++b) {
    const float* base = qkv + b * s.seq * ld;
    for (int64_t h = 0; h < s.heads; ++h) {
      const float* q = base + h * s.head_dim;
      const float* k = base + w + h * s.head_dim;
      const float* v = base + 2 * w + h * s.head_dim;
      float* p = probs + (b * s.heads + h) * tt;
      gemm_f32(false, true, s.seq, s.seq, s.head_dim, scale, q, ld, k, ld, 0.0f, p, s.seq);
      for (int64_t i = 0; i < s.seq; ++i) {
        float* row = p + i * s.seq;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, row[j]);
        float sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          row[j] = fast_exp(row[j] - mx);
          sum += row[j];
        }
        const float inv = 1.0f / sum;
        for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
        for (int64_t j = i + 1; j < s.seq; ++j) row[j] = 0.0f;
      }
      const float* mix = p;
      if (dropout > 0) {
        dropped_probs(p, s, b, h, dropout, key, dropped.data());
        mix = dropped.data();
      }
      gemm_f32(false, false, s.seq, s.head_dim, s.seq, 1.0f, mix, s.seq, v, ld, 0.0f,
               out + b * s.seq * w + h * s.head_dim, w);
    }
  }
}

TPF_VECTOR_CLONES
void causal_attention_backward(const float* dout, const float* qkv, const float* probs,
                               const AttentionShape& s, float dropout, RngKey key, float* dqkv,
                               float* scratch) {
  const int64_t w = s.width();
  const int64_t ld = 3 * w;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const int64_t tt = s.seq * s.seq;
  float* dp = scratch;
  float* dropped = scratch + tt;
  for (int64_t b = 0; b < s.batch; ++b) {
    const float* base = qkv + b * s.seq * ld;
    float* dbase = dqkv + b * s.seq * ld;
    const float* dO = dout + b * s.seq * w;
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t off = h * s.head_dim;
      const float* q = base + off;
      const float* k = base + w + off;
      const float* v = base + 2 * w + off;
      const float* p = probs + (b * s.heads + h) * tt;
      const float* mix = p;
      if (dropout > 0) {
        dropped_probs(p, s, b, h, dropout, key, dropped);
        mix = dropped;
      }
      // dV = mix^T dO; d(mix) = dO V^T.
      gemm_f32(true, false, s.seq, s.head_dim, s.seq, 1.0f, mix, s.seq, dO + off, w, 0.0f,
               dbase + 2 * w + off, ld);
      gemm_f32(false, true, s.seq, s.seq, s.head_dim, 1.0f, dO + off, w, v, ld, 0.0f, dp, s.seq);
      // Through dropout, then the softmax: dS = P * (dP - rowsum(P * dP)), times the 1/sqrt(d).
      const float keep_scale = 1.0f / (1.0f - dropout);
      for (int64_t i = 0; i < s.seq; ++i) {
        float* dpr = dp + i * s.seq;
        const float* pr = p + i * s.seq;
        if (dropout > 0) {
          const float* mr = dropped + i * s.seq;
          for (int64_t j = 0; j <= i; ++j) dpr[j] = mr[j] != 0.0f ? dpr[j] * keep_scale : 0.0f;
        }
        float dot = 0;
        for (int64_t j = 0; j <= i; ++j) dot += pr[j] * dpr[j];
        for (int64_t j = 0; j <= i; ++j) dpr[j] = pr[j] * (dpr[j] - dot) * scale;
        for (int64_t j = i + 1; j < s.seq; ++j) dpr[j] = 0.0f;
      }
      // dQ = dS K; dK = dS^T Q.
      gemm_f32(false, false, s.seq, s.head_dim, s.seq, 1.0f, dp, s.seq, k, ld, 0.0f, dbase + off,
               ld);
      gemm_f32(true, false, s.seq, s.head_dim, s.seq, 1.0f, dp, s.seq, q, ld, 0.0f, dbase + w + off,
               ld);
    }
  }
}

TPF_VECTOR_CLONES
void cached_attention_step(const float* q, const float* k_cache, const float* v_cache,
                           int64_t heads, int64_t head_dim, int64_t capacity, int64_t length,
                           float* scores, float* out) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (int64_t h = 0; h < heads; ++h) {
    const float* qh = q + h * head_dim;
    const float* kh = k_cache + h * capacity * head_dim;
    const float* vh = v_cache + h * capacity * head_dim;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < length; ++j) {
      float dot = 0;
      for (int64_t c = 0; c < head_dim; ++c) dot += qh[c] * kh[j * head_dim + c];
      scores[j] = dot * scale;
      mx = std::max(mx, scores[j]);
    }
    float sum = 0;
    for (int64_t j = 0; j < length; ++j) {
      scores[j] = std::exp(scores[j] - mx);
      sum += scores[j];
    }
    float* oh = out + h * head_dim;
    std::fill(oh, oh + head_dim, 0.0f);
    for (int64_t j = 0; j < length; ++j) {
      const float wgt = scores[j] / sum;
      for (int64_t c = 0; c < head_dim; ++c) oh[c] += wgt * vh[j * head_dim + c];
    }
  }
}

}  // namespace tpf
