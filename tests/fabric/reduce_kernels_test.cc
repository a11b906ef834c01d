// The reduction kernels: every SIMD path equals the scalar reference bit for bit (the property that
// makes all ranks agree), and the reference equals hand-computed results.
#include "coll/reduce_kernels.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tpf/error.h"
#include "tpf/half.h"

namespace tpf::coll {
namespace {

constexpr const char* kIsas[] = {"scalar", "avx2", "avx512"};

// Forces an ISA for one test and restores the automatic choice afterwards.
class IsaScope {
 public:
  explicit IsaScope(const char* isa) : ok_(set_reduce_isa_for_testing(isa)) {}
  ~IsaScope() { set_reduce_isa_for_testing(nullptr); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;
  bool ok() const { return ok_; }

 private:
  bool ok_;
};

// Random elements with the awkward values mixed in: NaNs with assorted payloads and signs,
// infinities, signed zeros, subnormals, large values (f16 overflow), integer extremes.
class DataGen {
 public:
  explicit DataGen(uint64_t seed) : rng_(seed) {}

  void fill(DType dtype, void* out, size_t count) {
    auto* p = static_cast<unsigned char*>(out);
    for (size_t i = 0; i < count; ++i) {
      switch (dtype) {
        case DType::f32: put(p, i, next_float()); break;
        case DType::f64: put(p, i, next_double()); break;
        case DType::f16: put(p, i, next_f16()); break;
        case DType::bf16: put(p, i, next_bf16()); break;
        case DType::i8: put(p, i, static_cast<int8_t>(next_int(8))); break;
        case DType::u8: put(p, i, static_cast<uint8_t>(next_int(8))); break;
        case DType::i32: put(p, i, static_cast<int32_t>(next_int(32))); break;
        case DType::i64: put(p, i, static_cast<int64_t>(next_int(64))); break;
      }
    }
  }

 private:
  template <class T>
  static void put(unsigned char* p, size_t i, T v) {
    std::memcpy(p + i * sizeof(T), &v, sizeof(T));
  }
  uint32_t pick(uint32_t n) { return static_cast<uint32_t>(rng_() % n); }

  float next_float() {
    switch (pick(40)) {
      case 0: return std::bit_cast<float>(0x7fc00000u);
      case 1: return std::bit_cast<float>(0xffc12345u);  // negative quiet NaN with payload
      case 2:
        return std::bit_cast<float>(0x7f800001u | (static_cast<uint32_t>(rng_()) & 0x3fffffu));
      case 3: return std::numeric_limits<float>::infinity();
      case 4: return -std::numeric_limits<float>::infinity();
      case 5: return 0.0f;
      case 6: return -0.0f;
      case 7:
        return std::bit_cast<float>(static_cast<uint32_t>(rng_()) & 0x807fffffu);  // subnormal
      case 8: return (pick(2) ? 1.0f : -1.0f) * 3.0e38f;                           // sums overflow
      case 9: return (pick(2) ? 1.0f : -1.0f) * 60000.0f;  // f16 sums overflow
      default: return std::uniform_real_distribution<float>(-100.0f, 100.0f)(rng_);
    }
  }
  double next_double() {
    switch (pick(40)) {
      case 0: return std::bit_cast<double>(0xfff0000000000abcULL);
      case 1: return std::bit_cast<double>(0x7ff8000000000000ULL);
      case 2: return std::numeric_limits<double>::infinity();
      case 3: return -std::numeric_limits<double>::infinity();
      case 4: return -0.0;
      case 5: return std::bit_cast<double>(rng_() & 0x800fffffffffffffULL);
      case 6: return 1.7e308;
      default: return std::uniform_real_distribution<double>(-1e6, 1e6)(rng_);
    }
  }
  uint16_t next_f16() {
    switch (pick(8)) {
      case 0: return static_cast<uint16_t>(rng_());  // any pattern, NaNs and subnormals included
      case 1: return pick(2) ? 0x7c00 : 0xfc00;
      case 2: return pick(2) ? 0x8000 : 0x7bff;
      default: return f32_to_f16(std::uniform_real_distribution<float>(-8.0f, 8.0f)(rng_));
    }
  }
  uint16_t next_bf16() {
    switch (pick(8)) {
      case 0: return static_cast<uint16_t>(rng_());
      case 1: return pick(2) ? 0x7f80 : 0xff80;
      case 2: return pick(2) ? 0x8000 : 0x7f7f;
      default: return f32_to_bf16(std::uniform_real_distribution<float>(-8.0f, 8.0f)(rng_));
    }
  }
  uint64_t next_int(int bits) {
    const uint64_t mask = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
    const uint64_t sign = uint64_t{1} << (bits - 1);
    switch (pick(10)) {
      case 0: return sign;      // signed minimum
      case 1: return sign - 1;  // signed maximum
      case 2: return mask;      // -1 / unsigned maximum
      case 3: return 0;
      case 4: return 1;
      case 5: return rng_() % 7;  // small: products stay interesting
      case 6: return (0 - (rng_() % 7)) & mask;
      default: return rng_() & mask;
    }
  }

  std::mt19937_64 rng_;
};

std::string describe(const char* isa, DType dtype, ReduceOp op, int nsrcs, size_t count) {
  return std::string(isa) + " " + dtype_name(dtype) + " " + reduce_op_name(op) +
         " nsrcs=" + std::to_string(nsrcs) + " count=" + std::to_string(count);
}

class ReduceMatchesReference : public ::testing::TestWithParam<std::tuple<const char*, DType>> {};

TEST_P(ReduceMatchesReference, BitExactForEveryOpCountAndSourceCount) {
  const auto [isa, dtype] = GetParam();
  IsaScope scope(isa);
  if (!scope.ok()) GTEST_SKIP() << "this CPU cannot run " << isa;
  ASSERT_STREQ(reduce_kernel_isa(), isa);

  const size_t size = dtype_size(dtype);
  DataGen gen(1000 + static_cast<uint64_t>(dtype));
  for (int op_index = 0; op_index < kNumReduceOps; ++op_index) {
    const auto op = static_cast<ReduceOp>(op_index);
    for (int nsrcs : {1, 2, 3, 4, 8}) {
      for (size_t count : {0, 1, 7, 33, 1000, 4097}) {
        const std::string what = describe(isa, dtype, op, nsrcs, count);
        // One allocation per source, each starting at a different misalignment.
        std::vector<std::vector<unsigned char>> storage(nsrcs);
        std::vector<const void*> srcs(nsrcs);
        for (int s = 0; s < nsrcs; ++s) {
          storage[s].resize((count + 8) * size);
          void* p = storage[s].data() + (s % 4) * size;
          gen.fill(dtype, p, count);
          srcs[s] = p;
        }
        std::vector<unsigned char> expected(count * size + 1), actual(count * size + 1, 0xab);
        reduce_n_reference(dtype, op, expected.data(), srcs.data(), nsrcs, count);
        reduce_n(dtype, op, actual.data(), srcs.data(), nsrcs, count);
        ASSERT_EQ(std::memcmp(expected.data(), actual.data(), count * size), 0) << what;
        ASSERT_EQ(actual[count * size], 0xab) << what << ": wrote past the end";

        // dst aliasing srcs[0], as reduce-scatter does in place.
        std::vector<unsigned char> inplace(count * size + 1);
        std::memcpy(inplace.data(), srcs[0], count * size);
        std::vector<const void*> aliased = srcs;
        aliased[0] = inplace.data();
        reduce_n(dtype, op, inplace.data(), aliased.data(), nsrcs, count);
        ASSERT_EQ(std::memcmp(expected.data(), inplace.data(), count * size), 0)
            << what << " (dst == srcs[0])";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsasAndDTypes, ReduceMatchesReference,
                         ::testing::Combine(::testing::ValuesIn(kIsas),
                                            ::testing::Values(DType::f32, DType::f64, DType::f16,
                                                              DType::bf16, DType::i8, DType::u8,
                                                              DType::i32, DType::i64)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) + "_" +
                                  dtype_name(std::get<1>(info.param));
                         });

// ---- The reference against hand-computed results. -----------------------------------------------

template <class T>
std::vector<T> reduce_values(DType dtype, ReduceOp op, const std::vector<std::vector<T>>& inputs) {
  std::vector<const void*> srcs;
  for (const auto& v : inputs) srcs.push_back(v.data());
  std::vector<T> out(inputs[0].size());
  reduce_n_reference(dtype, op, out.data(), srcs.data(), static_cast<int>(srcs.size()), out.size());
  // And the fast path on every ISA this CPU has agrees.
  for (const char* isa : kIsas) {
    IsaScope scope(isa);
    if (!scope.ok()) continue;
    std::vector<T> fast(out.size());
    reduce_n(dtype, op, fast.data(), srcs.data(), static_cast<int>(srcs.size()), fast.size());
    EXPECT_EQ(std::memcmp(fast.data(), out.data(), out.size() * sizeof(T)), 0) << isa;
  }
  return out;
}

TEST(ReduceReferenceTest, HalfFormatsAccumulateInF32AndRoundOnce) {
  // 1 + 2^-11 + 2^-11: rounding after each step would stay at 1.0 (two ties to even); f32
  // accumulation gives 1 + 2^-10 exactly, one f16 ulp above 1.
  const uint16_t one = 0x3c00, half_ulp = 0x1000;
  EXPECT_EQ(reduce_values<uint16_t>(DType::f16, ReduceOp::sum, {{one}, {half_ulp}, {half_ulp}})[0],
            0x3c01);
  // The same for bf16: 1 + 2^-8 + 2^-8 = 1 + 2^-7.
  const uint16_t bone = 0x3f80, bhalf_ulp = 0x3b80;
  EXPECT_EQ(
      reduce_values<uint16_t>(DType::bf16, ReduceOp::sum, {{bone}, {bhalf_ulp}, {bhalf_ulp}})[0],
      0x3f81);
  // avg of 1, 2, 4 in f16: 7/3 in f32, then rounded once.
  EXPECT_EQ(reduce_values<uint16_t>(DType::f16, ReduceOp::avg, {{0x3c00}, {0x4000}, {0x4400}})[0],
            f32_to_f16(7.0f / 3.0f));
  // f16 overflow to infinity happens only at the final rounding: 60000 + 60000 - 60000 = 60000.
  const uint16_t big = f32_to_f16(60000.0f), neg_big = f32_to_f16(-60000.0f);
  EXPECT_EQ(reduce_values<uint16_t>(DType::f16, ReduceOp::sum, {{big}, {big}, {neg_big}})[0], big);
}

TEST(ReduceReferenceTest, FloatOpsAndNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float payload_nan = std::bit_cast<float>(0xffc12345u);
  const auto canonical = 0x7fc00000u;
  auto f32 = [](ReduceOp op, std::vector<std::vector<float>> in) {
    return reduce_values<float>(DType::f32, op, in);
  };
  EXPECT_EQ(f32(ReduceOp::sum, {{1.5f, -2.0f}, {2.25f, 2.0f}}), (std::vector<float>{3.75f, 0.0f}));
  EXPECT_EQ(f32(ReduceOp::avg, {{1.0f}, {2.0f}})[0], 1.5f);
  EXPECT_EQ(f32(ReduceOp::prod, {{3.0f}, {-2.0f}, {0.5f}})[0], -3.0f);
  EXPECT_EQ(f32(ReduceOp::min, {{3.0f}, {-2.0f}, {0.5f}})[0], -2.0f);
  EXPECT_EQ(f32(ReduceOp::max, {{3.0f}, {-2.0f}, {0.5f}})[0], 3.0f);
  // min/max propagate NaN wherever it is; every NaN result is the canonical one.
  for (ReduceOp op : {ReduceOp::min, ReduceOp::max, ReduceOp::sum, ReduceOp::prod}) {
    EXPECT_EQ(std::bit_cast<uint32_t>(f32(op, {{nan}, {1.0f}, {0.0f}})[0]), canonical);
    EXPECT_EQ(std::bit_cast<uint32_t>(f32(op, {{1.0f}, {0.0f}, {payload_nan}})[0]), canonical);
  }
  EXPECT_EQ(std::bit_cast<uint32_t>(f32(ReduceOp::sum, {{payload_nan}})[0]), canonical);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(std::bit_cast<uint32_t>(f32(ReduceOp::sum, {{inf}, {-inf}})[0]), canonical);
  EXPECT_EQ(f32(ReduceOp::sum, {{-0.0f}, {-0.0f}})[0], 0.0f);
  EXPECT_TRUE(std::signbit(f32(ReduceOp::sum, {{-0.0f}, {-0.0f}})[0]));
  // bf16 min with a NaN gives the canonical bf16 NaN.
  EXPECT_EQ(reduce_values<uint16_t>(DType::bf16, ReduceOp::min, {{0x3f80}, {0xff81}})[0], 0x7fc0);
  EXPECT_EQ(reduce_values<uint16_t>(DType::f16, ReduceOp::max, {{0xfd00}, {0x3c00}})[0], 0x7e00);
}

TEST(ReduceReferenceTest, IntegersWrapAndAvgTruncates) {
  EXPECT_EQ(reduce_values<int8_t>(DType::i8, ReduceOp::sum, {{100}, {100}})[0], -56);
  EXPECT_EQ(reduce_values<int8_t>(DType::i8, ReduceOp::prod, {{16}, {16}})[0], 0);
  EXPECT_EQ(reduce_values<int8_t>(DType::i8, ReduceOp::prod, {{-128}, {-1}})[0], -128);
  EXPECT_EQ(reduce_values<int8_t>(DType::i8, ReduceOp::min, {{-128}, {127}})[0], -128);
  EXPECT_EQ(reduce_values<uint8_t>(DType::u8, ReduceOp::max, {{200}, {100}})[0], 200);
  EXPECT_EQ(reduce_values<uint8_t>(DType::u8, ReduceOp::prod, {{255}, {255}})[0], 1);
  const int32_t i32_max = std::numeric_limits<int32_t>::max();
  EXPECT_EQ(reduce_values<int32_t>(DType::i32, ReduceOp::sum, {{i32_max}, {1}})[0],
            std::numeric_limits<int32_t>::min());
  EXPECT_EQ(reduce_values<int32_t>(DType::i32, ReduceOp::prod, {{65536}, {65536}})[0], 0);
  const int64_t i64_max = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(reduce_values<int64_t>(DType::i64, ReduceOp::prod, {{i64_max}, {2}})[0], -2);
  EXPECT_EQ(reduce_values<int64_t>(DType::i64, ReduceOp::min, {{-5}, {3}, {i64_max}})[0], -5);
  // avg: truncating division of the wrapped sum.
  EXPECT_EQ(reduce_values<int32_t>(DType::i32, ReduceOp::avg, {{-7}, {0}})[0], -3);
  EXPECT_EQ(reduce_values<int32_t>(DType::i32, ReduceOp::avg, {{7}, {0}})[0], 3);
  EXPECT_EQ(reduce_values<uint8_t>(DType::u8, ReduceOp::avg, {{255}, {255}, {255}})[0], 84);
  EXPECT_EQ(reduce_values<int8_t>(DType::i8, ReduceOp::avg, {{-128}, {-1}})[0], 63);
  const int64_t i64_min = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(reduce_values<int64_t>(DType::i64, ReduceOp::avg, {{i64_min}})[0], i64_min);
  EXPECT_EQ(reduce_values<int64_t>(DType::i64, ReduceOp::avg, {{-9}, {0}, {0}, {0}})[0], -2);
}

TEST(ReduceKernelsTest, BadArgumentsThrowClearErrors) {
  float a[4] = {}, b[4] = {};
  const void* srcs[2] = {a, b};
  auto expect_invalid = [](auto&& call, const char* needle) {
    try {
      call();
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_invalid([&] { reduce_n(DType::f32, ReduceOp::sum, a, srcs, 0, 4); }, "nsrcs");
  expect_invalid([&] { reduce_n(DType::f32, ReduceOp::sum, nullptr, srcs, 2, 4); }, "dst");
  const void* with_null[2] = {a, nullptr};
  expect_invalid([&] { reduce_n(DType::f32, ReduceOp::sum, a, with_null, 2, 4); }, "srcs[1]");
  expect_invalid([&] { reduce_n(static_cast<DType>(77), ReduceOp::sum, a, srcs, 2, 4); }, "77");
  expect_invalid([&] { reduce_n_reference(DType::f32, static_cast<ReduceOp>(9), a, srcs, 2, 4); },
                 "9");
  // count 0 touches nothing, so null buffers are fine.
  EXPECT_NO_THROW(reduce_n(DType::f32, ReduceOp::sum, nullptr, nullptr, 1, 0));
}

TEST(ReduceKernelsTest, IsaSelection) {
  EXPECT_FALSE(set_reduce_isa_for_testing("sse9"));
  {
    IsaScope scope("scalar");
    ASSERT_TRUE(scope.ok());
    EXPECT_STREQ(reduce_kernel_isa(), "scalar");
  }
  const std::string automatic = reduce_kernel_isa();
  EXPECT_TRUE(automatic == "scalar" || automatic == "avx2" || automatic == "avx512") << automatic;
}

}  // namespace
}  // namespace tpf::coll
