// exp and tanh for f32 kernels, written so that loops over them vectorize (no library calls).
// exp's relative error is below 3e-7 (about 4 ulp) over the whole f32 range and tanh's absolute
// error below 2e-7 (tests/model/tensor_kernels_test.cc checks both against the C library).
#pragma once

#include <bit>
#include <cstdint>

namespace tpf {

// exp(x) = 2^n e^r with n = round(x / ln 2) and |r| <= ln2 / 2 (Cody-Waite reduction with ln 2
// split in two constants so that n ln 2 is exact), e^r by its Taylor polynomial of degree 6
// (truncation error r^7 / 7! < 1.3e-7). Inputs are clamped to [-87, 88]: the f32 range.
inline float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : x;  // selects, not branches: the loop stays vectorizable
  x = x > 88.0f ? 88.0f : x;
  // Round to nearest by adding and subtracting 1.5 * 2^23 (no call to nearbyint).
  constexpr float kRound = 12582912.0f;
  const float n = (x * 1.44269504f + kRound) - kRound;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return p * scale;
}

// tanh(x) = 1 - 2 / (e^{2x} + 1): saturates cleanly to +-1 through fast_exp's clamp.
inline float fast_tanh(float x) { return 1.0f - 2.0f / (fast_exp(2.0f * x) + 1.0f); }

}  // namespace tpf
