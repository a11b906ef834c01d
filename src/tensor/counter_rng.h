// Counter-based random numbers: a value is a pure function of (seed, stream, index), with no state
// to advance. That is what makes tensor parallelism reproducible: a rank holding columns 512..767
// of a weight draws exactly the numbers a single rank holding the whole weight draws for those
// columns, and dropout masks depend on an element's global index, not on who computes it.
// The mixing function is SplitMix64's finalizer (Steele, Lea, Flood: "Fast splittable
// pseudorandom number generators", OOPSLA 2014), applied to a counter.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

namespace tpf {

inline uint64_t mix64(uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

// FNV-1a: turns a tensor's name into a stream id, so streams do not depend on creation order.
inline uint64_t stream_of(std::string_view name) noexcept {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  return h;
}

struct RngKey {
  uint64_t seed = 0;
  uint64_t stream = 0;
  // A key for a sub-stream (e.g. one training step's dropout at one site).
  RngKey derive(uint64_t salt) const noexcept { return {seed, mix64(stream ^ mix64(salt + 1))}; }
};

inline uint64_t counter_bits(RngKey key, uint64_t index) noexcept {
  const uint64_t base = mix64(key.seed ^ 0x9E3779B97F4A7C15ull) ^ key.stream;
  return mix64(base + index * 0x9E3779B97F4A7C15ull);
}

// Uniform in [0, 1) with 24 random bits (exactly representable in f32).
inline float counter_uniform(RngKey key, uint64_t index) noexcept {
  return static_cast<float>(counter_bits(key, index) >> 40) * (1.0f / 16777216.0f);
}

// Standard normal by Box-Muller from the two 32-bit halves of one draw.
inline float counter_normal(RngKey key, uint64_t index) noexcept {
  const uint64_t bits = counter_bits(key, index);
  const double u1 = (static_cast<double>(bits >> 32) + 1.0) * (1.0 / 4294967297.0);  // (0, 1]
  const double u2 = static_cast<double>(bits & 0xFFFFFFFFull) * (1.0 / 4294967296.0);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

// Dropout decision: element `index` is kept with probability 1 - p.
inline bool dropout_keeps(RngKey key, uint64_t index, float p) noexcept {
  return counter_uniform(key, index) >= p;
}

}  // namespace tpf
