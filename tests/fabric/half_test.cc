// f16/bf16 <-> f32 conversions: known bit patterns, exhaustive round trips, ties to even, and
// (where the CPU has them) agreement with the hardware conversions the SIMD kernels use.
#include "tpf/half.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace tpf {
namespace {

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
float float_of(uint32_t u) { return std::bit_cast<float>(u); }

bool f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0; }

// The value an f16 pattern denotes, computed independently of half.cc.
double f16_value(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  if (exp == 31) return mant == 0 ? sign * INFINITY : NAN;
  return sign * std::ldexp(1024 + mant, exp - 25);
}

TEST(HalfTest, F16ToF32KnownPatterns) {
  EXPECT_EQ(bits_of(f16_to_f32(0x3c00)), bits_of(1.0f));
  EXPECT_EQ(bits_of(f16_to_f32(0xc000)), bits_of(-2.0f));
  EXPECT_EQ(bits_of(f16_to_f32(0x0000)), 0x00000000u);
  EXPECT_EQ(bits_of(f16_to_f32(0x8000)), 0x80000000u);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(bits_of(f16_to_f32(0x7c00)), 0x7f800000u);
  EXPECT_EQ(bits_of(f16_to_f32(0xfc00)), 0xff800000u);
  EXPECT_EQ(bits_of(f16_to_f32(0x7e00)), 0x7fc00000u);
  // A signalling NaN keeps its payload and becomes quiet.
  EXPECT_EQ(bits_of(f16_to_f32(0x7d00)), 0x7fe00000u);
  EXPECT_EQ(bits_of(f16_to_f32(0xfc01)), 0xffc02000u);
}

TEST(HalfTest, F16ExhaustiveValuesAndRoundTrip) {
  for (uint32_t i = 0; i <= 0xffff; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = f16_to_f32(h);
    if (f16_is_nan(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << i;
      ASSERT_EQ(f32_to_f16(f), h | 0x0200) << std::hex << i;  // quiet, payload kept
    } else {
      ASSERT_EQ(static_cast<double>(f), f16_value(h)) << std::hex << i;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << i;
      ASSERT_EQ(f32_to_f16(f), h) << std::hex << i;
    }
  }
}

TEST(HalfTest, F32ToF16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie, even is down
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie, even is up
  EXPECT_EQ(f32_to_f16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3c01);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.996f), 0x7bff);  // just under the halfway point to 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);    // tie: 65504 is odd, so up to infinity
  EXPECT_EQ(f32_to_f16(-1e10f), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);      // half the smallest subnormal: even
  EXPECT_EQ(f32_to_f16(-std::ldexp(1.0f, -25)), 0x8000);     // signed zero survives
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);      // above half: up
  EXPECT_EQ(f32_to_f16(3 * std::ldexp(1.0f, -25)), 0x0002);  // 1.5 units: tie to even 2
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(f32_to_f16(std::ldexp(2047.0f, -25)), 0x0400);  // largest subnormal + half: carries
  EXPECT_EQ(f32_to_f16(float_of(0x00000001u)), 0x0000);     // f32 subnormal
  EXPECT_EQ(f32_to_f16(float_of(0x80000001u)), 0x8000);
  EXPECT_EQ(f32_to_f16(float_of(0x7f800001u)), 0x7e00);  // NaN never becomes infinity
  EXPECT_EQ(f32_to_f16(float_of(0xffc00000u)), 0xfe00);
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t hw_f32_to_f16(float f) {
  const __m128i h = _mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return static_cast<uint16_t>(_mm_cvtsi128_si32(h) & 0xffff);
}
__attribute__((target("f16c"))) float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }

// The AVX2/AVX-512 kernels convert with F16C; the scalar reference with half.cc. They must agree.
TEST(HalfTest, MatchesF16cHardware) {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & bit_F16C) == 0) {
    GTEST_SKIP() << "CPU has no F16C";
  }
  for (uint32_t i = 0; i <= 0xffff; ++i) {
    const auto h = static_cast<uint16_t>(i);
    ASSERT_EQ(bits_of(f16_to_f32(h)), bits_of(hw_f16_to_f32(h))) << std::hex << i;
  }
  // Every f32 exponent and a spread of mantissas (a stride coprime with 2), plus all around the
  // f16 range edges in full.
  for (uint64_t u = 0; u <= 0xffffffffu; u += 4099) {
    const float f = float_of(static_cast<uint32_t>(u));
    ASSERT_EQ(f32_to_f16(f), hw_f32_to_f16(f)) << std::hex << u;
  }
  for (uint32_t u = 0x33000000u; u < 0x38800000u; u += 5) {  // subnormal f16 range, dense
    ASSERT_EQ(f32_to_f16(float_of(u)), hw_f32_to_f16(float_of(u))) << std::hex << u;
  }
  for (uint32_t u = 0x477fe000u; u < 0x47800100u; ++u) {  // around 65504..65536
    ASSERT_EQ(f32_to_f16(float_of(u)), hw_f32_to_f16(float_of(u))) << std::hex << u;
  }
}
#endif

TEST(HalfTest, Bf16KnownPatterns) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_bf16(float_of(0x3f808000u)), 0x3f80);  // tie, even is down
  EXPECT_EQ(f32_to_bf16(float_of(0x3f818000u)), 0x3f82);  // tie, even is up
  EXPECT_EQ(f32_to_bf16(float_of(0x3f808001u)), 0x3f81);  // above half
  EXPECT_EQ(f32_to_bf16(float_of(0x3f807fffu)), 0x3f80);  // below half
  EXPECT_EQ(f32_to_bf16(float_of(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to infinity
  EXPECT_EQ(f32_to_bf16(float_of(0xff7fffffu)), 0xff80);
  EXPECT_EQ(f32_to_bf16(float_of(0x7f800000u)), 0x7f80);
  EXPECT_EQ(f32_to_bf16(float_of(0x80000000u)), 0x8000);
  EXPECT_EQ(f32_to_bf16(float_of(0x00008000u)), 0x0000);  // subnormal tie: even (not flushed)
  EXPECT_EQ(f32_to_bf16(float_of(0x00018000u)), 0x0002);
  EXPECT_EQ(f32_to_bf16(float_of(0x00010001u)), 0x0001);
  EXPECT_EQ(f32_to_bf16(float_of(0x007fffffu)), 0x0080);  // largest subnormal carries to normal
  EXPECT_EQ(f32_to_bf16(float_of(0x7f800001u)), 0x7fc0);  // NaN stays NaN, quiet
  EXPECT_EQ(f32_to_bf16(float_of(0x7fffffffu)), 0x7fff);
  EXPECT_EQ(f32_to_bf16(float_of(0xffc00001u)), 0xffc0);

  EXPECT_EQ(bits_of(bf16_to_f32(0x3f80)), 0x3f800000u);
  EXPECT_EQ(bits_of(bf16_to_f32(0x0001)), 0x00010000u);
  EXPECT_EQ(bits_of(bf16_to_f32(0xff80)), 0xff800000u);
  EXPECT_EQ(bits_of(bf16_to_f32(0x7f81)), 0x7fc10000u);  // signalling NaN becomes quiet
}

TEST(HalfTest, Bf16ExhaustiveRoundTrip) {
  for (uint32_t i = 0; i <= 0xffff; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = bf16_to_f32(h);
    if (bf16_is_nan(h)) {
      ASSERT_TRUE(std::isnan(f));
      ASSERT_EQ(f32_to_bf16(f), h | 0x0040) << std::hex << i;
    } else {
      ASSERT_EQ(bits_of(f), i << 16) << std::hex << i;
      ASSERT_EQ(f32_to_bf16(f), h) << std::hex << i;
    }
  }
}

// Random finite f32 values: the result must be the nearer of the two bf16 neighbours, and the even
// one on a tie. Infinity stands in for 2^128 as the neighbour above the largest finite bf16.
TEST(HalfTest, Bf16RandomIsNearestEven) {
  std::mt19937 rng(12345);
  for (int n = 0; n < 1'000'000; ++n) {
    const uint32_t u = rng();
    if ((u & 0x7f800000u) == 0x7f800000u) continue;  // inf/NaN covered above
    const float x = float_of(u);
    const uint32_t down = u >> 16;  // toward zero
    const uint32_t up = down + 1;   // away from zero (same sign)
    auto value = [](uint32_t pattern) {
      if ((pattern & 0x7fff) == 0x7f80)
        return (pattern & 0x8000) ? -std::ldexp(1.0, 128) : std::ldexp(1.0, 128);
      return static_cast<double>(float_of(pattern << 16));
    };
    const double d_down = std::fabs(static_cast<double>(x) - value(down));
    const double d_up = std::fabs(static_cast<double>(x) - value(up));
    const uint32_t expect = d_down < d_up ? down : d_up < d_down ? up : ((down & 1) ? up : down);
    ASSERT_EQ(f32_to_bf16(x), expect) << std::hex << u;
  }
}

}  // namespace
}  // namespace tpf
