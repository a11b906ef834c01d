// Portable bit-level conversions between f32 and the 16-bit float formats. They must agree bit for
// bit with the hardware conversions used by the SIMD reduction kernels (F16C vcvtph2ps/vcvtps2ph
// with round-to-nearest-even), so that every rank computes the same bits whichever path it takes.
#include "tpf/half.h"

#include <bit>

namespace tpf {

namespace {

constexpr uint32_t kF32Sign = 0x80000000u;
constexpr uint32_t kF32ExpMask = 0x7f800000u;
constexpr uint32_t kF32MantMask = 0x007fffffu;
constexpr uint32_t kF32QuietBit = 0x00400000u;

constexpr uint16_t kF16Inf = 0x7c00;
constexpr uint16_t kF16QuietBit = 0x0200;
constexpr uint16_t kBf16QuietBit = 0x0040;

}  // namespace

float f16_to_f32(uint16_t bits) noexcept {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t mant = bits & 0x3ffu;
  uint32_t out;
  if (exp == 0x1f) {
    // Infinity keeps its bits; a NaN keeps its payload and becomes quiet.
    out = sign | kF32ExpMask | (mant << 13);
    if (mant != 0) out |= kF32QuietBit;
  } else if (exp != 0) {
    out = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  } else if (mant == 0) {
    out = sign;
  } else {
    // Subnormal f16: every one is a normal f32. Shift the leading one up to the implicit bit.
    int e = -14;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    mant &= 0x3ffu;
    out = sign | (static_cast<uint32_t>(e + 127) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(out);
}

uint16_t f32_to_f16(float value) noexcept {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t exp = (x >> 23) & 0xffu;
  const uint32_t mant = x & kF32MantMask;
  if (exp == 0xff) {
    if (mant == 0) return sign | kF16Inf;
    // NaN: keep the top of the payload, force quiet (never turn a NaN into infinity).
    return static_cast<uint16_t>(sign | kF16Inf | kF16QuietBit | (mant >> 13));
  }
  if (exp == 0) return sign;  // f32 zero or subnormal: far below half the smallest f16 subnormal
  const int e = static_cast<int>(exp) - 127;
  if (e > 15) return sign | kF16Inf;       // at least 2^16: beyond f16's range, rounds to infinity
  const uint32_t full = mant | 0x800000u;  // 24-bit significand with the implicit one
  if (e >= -14) {
    // Normal f16. Drop 13 bits, round to nearest even; a carry out of the significand correctly
    // bumps the exponent (and 65520 and above become infinity).
    uint32_t h = (static_cast<uint32_t>(e + 15) << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0)) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  // Subnormal f16: the value in units of 2^-24 is full * 2^(e + 1).
  const int shift = -e - 1;     // >= 14
  if (shift > 24) return sign;  // below a quarter unit: rounds to zero
  uint32_t q = full >> shift;
  const uint32_t rem = full & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u) != 0)) ++q;  // may carry into the smallest normal
  return static_cast<uint16_t>(sign | q);
}

float bf16_to_f32(uint16_t bits) noexcept {
  uint32_t out = static_cast<uint32_t>(bits) << 16;
  if ((out & kF32ExpMask) == kF32ExpMask && (out & kF32MantMask) != 0) out |= kF32QuietBit;
  return std::bit_cast<float>(out);
}

uint16_t f32_to_bf16(float value) noexcept {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & ~kF32Sign) > kF32ExpMask) {
    // NaN: truncate the payload and force quiet, so it cannot round into infinity.
    return static_cast<uint16_t>((x >> 16) | kBf16QuietBit);
  }
  // Round to nearest even on the integer bits: adding 0x7fff plus the lowest kept bit carries into
  // the kept part exactly when the dropped part is above half, or half with an odd kept part. This
  // is right for subnormals and rounds the largest finite values up to infinity as it should.
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

}  // namespace tpf
