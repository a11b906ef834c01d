// AVX2 (+F16C) reduction kernels. Compiled for a baseline x86-64 target: only the functions marked
// TPF_SIMD_TARGET use AVX2, and reduce_n calls them only after checking the CPU at run time.
//
// Bit-exactness with the scalar reference: every lane does the same IEEE operation in the same
// source order as the scalar loop; there is no multiply-add anywhere (so no FMA contraction);
// f16 uses the F16C conversions (exact widening, round-to-nearest-even narrowing, like half.cc);
// bf16 narrows with the same integer rounding as f32_to_bf16.
#include "coll/reduce_kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

// GCC 12 reports its own _mm*_undefined_*() placeholders inside the intrinsic headers as "maybe
// uninitialized" (GCC bug 105593, fixed in later releases); silence only that, only here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <cstdint>

#define TPF_SIMD_TARGET __attribute__((target("avx2,f16c")))

namespace tpf::coll::detail {

namespace {

template <class T>
const T* at(const void* base, size_t i) {
  return static_cast<const T*>(base) + i;
}
template <class T>
T* at(void* base, size_t i) {
  return static_cast<T*>(base) + i;
}

// ---- Loads and stores: storage <-> accumulator vector, plus the final step (avg, NaN). ---------

struct F32Io {
  using V = __m256;
  static constexpr size_t kWidth = 8;
  TPF_SIMD_TARGET static V load(const void* p, size_t i) {
    return _mm256_loadu_ps(at<float>(p, i));
  }
  TPF_SIMD_TARGET static void store(void* p, size_t i, V v) {
    _mm256_storeu_ps(at<float>(p, i), v);
  }
  TPF_SIMD_TARGET static V finish(V v, int nsrcs, bool avg) {
    if (avg) v = _mm256_div_ps(v, _mm256_set1_ps(static_cast<float>(nsrcs)));
    const V nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    return _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)), nan);
  }
};

struct F64Io {
  using V = __m256d;
  static constexpr size_t kWidth = 4;
  TPF_SIMD_TARGET static V load(const void* p, size_t i) {
    return _mm256_loadu_pd(at<double>(p, i));
  }
  TPF_SIMD_TARGET static void store(void* p, size_t i, V v) {
    _mm256_storeu_pd(at<double>(p, i), v);
  }
  TPF_SIMD_TARGET static V finish(V v, int nsrcs, bool avg) {
    if (avg) v = _mm256_div_pd(v, _mm256_set1_pd(static_cast<double>(nsrcs)));
    const V nan = _mm256_cmp_pd(v, v, _CMP_UNORD_Q);
    return _mm256_blendv_pd(v, _mm256_castsi256_pd(_mm256_set1_epi64x(0x7ff8000000000000LL)), nan);
  }
};

struct F16Io {
  using V = __m256;
  static constexpr size_t kWidth = 8;
  TPF_SIMD_TARGET static V load(const void* p, size_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at<uint16_t>(p, i))));
  }
  TPF_SIMD_TARGET static void store(void* p, size_t i, V v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(at<uint16_t>(p, i)),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  TPF_SIMD_TARGET static V finish(V v, int nsrcs, bool avg) { return F32Io::finish(v, nsrcs, avg); }
};

struct Bf16Io {
  using V = __m256;
  static constexpr size_t kWidth = 8;
  TPF_SIMD_TARGET static V load(const void* p, size_t i) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at<uint16_t>(p, i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
  }
  TPF_SIMD_TARGET static void store(void* p, size_t i, V v) {
    // Round to nearest even on the integer bits, as f32_to_bf16 does. store() only ever sees
    // finish()'s output, where every NaN is the canonical 0x7fc00000: the rounding maps that to
    // 0x7fc0, the canonical bf16 NaN, so no NaN case is needed here.
    const __m256i x = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i bias = _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff));
    const __m256i bits = _mm256_srli_epi32(_mm256_add_epi32(x, bias), 16);
    // Every lane is in [0, 0xffff], so the saturating pack is an exact narrowing.
    const __m128i packed =
        _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(at<uint16_t>(p, i)), packed);
  }
  TPF_SIMD_TARGET static V finish(V v, int nsrcs, bool avg) { return F32Io::finish(v, nsrcs, avg); }
};

// Integers: avg is handled by the driver (sum, then a scalar division pass), so finish is identity.
template <class T>
struct IntIo {
  using V = __m256i;
  static constexpr size_t kWidth = 32 / sizeof(T);
  TPF_SIMD_TARGET static V load(const void* p, size_t i) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at<T>(p, i)));
  }
  TPF_SIMD_TARGET static void store(void* p, size_t i, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(at<T>(p, i)), v);
  }
  TPF_SIMD_TARGET static V finish(V v, int, bool) { return v; }
};

// ---- Combining operators. min/max: vminps(a, b) is "a < b ? a : b", the reference's order; the
// blend adds NaN propagation from a (a NaN in b already comes out).
// --------------------------------

#define TPF_BINOP(Name, V, expr)                              \
  struct Name {                                               \
    TPF_SIMD_TARGET static V apply(V a, V b) { return expr; } \
  };

TPF_BINOP(AddPs, __m256, _mm256_add_ps(a, b))
TPF_BINOP(MulPs, __m256, _mm256_mul_ps(a, b))
TPF_BINOP(MinPs, __m256,
          _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q)))
TPF_BINOP(MaxPs, __m256,
          _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q)))
TPF_BINOP(AddPd, __m256d, _mm256_add_pd(a, b))
TPF_BINOP(MulPd, __m256d, _mm256_mul_pd(a, b))
TPF_BINOP(MinPd, __m256d,
          _mm256_blendv_pd(_mm256_min_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q)))
TPF_BINOP(MaxPd, __m256d,
          _mm256_blendv_pd(_mm256_max_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q)))
TPF_BINOP(AddI8, __m256i, _mm256_add_epi8(a, b))
TPF_BINOP(MinI8, __m256i, _mm256_min_epi8(a, b))
TPF_BINOP(MaxI8, __m256i, _mm256_max_epi8(a, b))
TPF_BINOP(MinU8, __m256i, _mm256_min_epu8(a, b))
TPF_BINOP(MaxU8, __m256i, _mm256_max_epu8(a, b))
TPF_BINOP(AddI32, __m256i, _mm256_add_epi32(a, b))
TPF_BINOP(MulI32, __m256i, _mm256_mullo_epi32(a, b))
TPF_BINOP(MinI32, __m256i, _mm256_min_epi32(a, b))
TPF_BINOP(MaxI32, __m256i, _mm256_max_epi32(a, b))
TPF_BINOP(AddI64, __m256i, _mm256_add_epi64(a, b))
TPF_BINOP(MinI64, __m256i, _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b)))
TPF_BINOP(MaxI64, __m256i, _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(b, a)))

#undef TPF_BINOP

// There is no 8-bit multiply: the low byte of a 16-bit product depends only on the low bytes, so
// multiply the even bytes and the odd bytes (shifted down) in 16-bit lanes and merge.
struct MulI8 {
  TPF_SIMD_TARGET static __m256i apply(__m256i a, __m256i b) {
    const __m256i low_bytes = _mm256_set1_epi16(0x00ff);
    const __m256i even = _mm256_and_si256(_mm256_mullo_epi16(a, b), low_bytes);
    const __m256i odd =
        _mm256_slli_epi16(_mm256_mullo_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8)), 8);
    return _mm256_or_si256(even, odd);
  }
};

// No 64-bit multiply before AVX-512DQ: the low 64 bits of a*b are lo*lo + ((lo*hi + hi*lo) << 32).
struct MulI64 {
  TPF_SIMD_TARGET static __m256i apply(__m256i a, __m256i b) {
    const __m256i lo = _mm256_mul_epu32(a, b);
    const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                           _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
    return _mm256_add_epi64(lo, _mm256_slli_epi64(cross, 32));
  }
};

}  // namespace

}  // namespace tpf::coll::detail

#include "coll/reduce_simd_driver.h"

namespace tpf::coll::detail {

bool reduce_n_avx2(DType dtype, ReduceOp op, void* dst, const void* const* srcs, int nsrcs,
                   size_t count) {
  return reduce_n_simd(dtype, op, dst, srcs, nsrcs, count);
}

}  // namespace tpf::coll::detail

#else  // not x86-64: no AVX2 kernels; reduce_n never selects them.

namespace tpf::coll::detail {

bool reduce_n_avx2(DType, ReduceOp, void*, const void* const*, int, size_t) { return false; }

}  // namespace tpf::coll::detail

#endif
