// AVX-512 reduction kernels. Compiled for a baseline x86-64 target: only the functions marked
// TPF_SIMD_TARGET use AVX-512, and reduce_n calls them only after checking the CPU at run time.
//
// Bit-exactness with the scalar reference: every lane does the same IEEE operation in the same
// source order as the scalar loop; there is no multiply-add anywhere (so no FMA contraction);
// f16 uses the F16C conversions (exact widening, round-to-nearest-even narrowing, like half.cc);
// bf16 narrows with integer arithmetic rather than vcvtneps2bf16, which flushes subnormals.
#include "coll/reduce_kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

// GCC 12 reports its own _mm*_undefined_*() placeholders inside the intrinsic headers as "maybe
// uninitialized" (GCC bug 105593, fixed in later releases); silence only that, only here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <cstdint>

#define TPF_SIMD_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c")))

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
  using V = __m512;
  static constexpr size_t kWidth = 16;
  TPF_SIMD_TARGET static V load(const void* p, size_t i) {
    return _mm512_loadu_ps(at<float>(p, i));
  }
  TPF_SIMD_TARGET static void store(void* p, size_t i, V v) {
    _mm512_storeu_ps(at<float>(p, i), v);
  }
  TPF_SIMD_TARGET static V finish(V v, int nsrcs, bool avg) {
    if (avg) v = _mm512_div_ps(v, _mm512_set1_ps(static_cast<float>(nsrcs)));
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(nan, v, _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
  }
};

struct F64Io {
  using V = __m512d;
  static constexpr size_t kWidth = 8;
  TPF_SIMD_TARGET static V load(const void* p, size_t i) {
    return _mm512_loadu_pd(at<double>(p, i));
  }
  TPF_SIMD_TARGET static void store(void* p, size_t i, V v) {
    _mm512_storeu_pd(at<double>(p, i), v);
  }
  TPF_SIMD_TARGET static V finish(V v, int nsrcs, bool avg) {
    if (avg) v = _mm512_div_pd(v, _mm512_set1_pd(static_cast<double>(nsrcs)));
    const __mmask8 nan = _mm512_cmp_pd_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_blend_pd(nan, v,
                                _mm512_castsi512_pd(_mm512_set1_epi64(0x7ff8000000000000LL)));
  }
};

struct F16Io {
  using V = __m512;
  static constexpr size_t kWidth = 16;
  TPF_SIMD_TARGET static V load(const void* p, size_t i) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at<uint16_t>(p, i))));
  }
  TPF_SIMD_TARGET static void store(void* p, size_t i, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(at<uint16_t>(p, i)),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  TPF_SIMD_TARGET static V finish(V v, int nsrcs, bool avg) { return F32Io::finish(v, nsrcs, avg); }
};

struct Bf16Io {
  using V = __m512;
  static constexpr size_t kWidth = 16;
  TPF_SIMD_TARGET static V load(const void* p, size_t i) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at<uint16_t>(p, i)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
  }
  TPF_SIMD_TARGET static void store(void* p, size_t i, V v) {
    // Round to nearest even on the integer bits, as f32_to_bf16 does. store() only ever sees
    // finish()'s output, where every NaN is the canonical 0x7fc00000: the rounding maps that to
    // 0x7fc0, the canonical bf16 NaN, so no NaN case is needed here.
    const __m512i x = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    const __m512i bias = _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff));
    const __m512i bits = _mm512_srli_epi32(_mm512_add_epi32(x, bias), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(at<uint16_t>(p, i)),
                        _mm512_cvtepi32_epi16(bits));
  }
  TPF_SIMD_TARGET static V finish(V v, int nsrcs, bool avg) { return F32Io::finish(v, nsrcs, avg); }
};

// Integers: avg is handled by the driver (sum, then a scalar division pass), so finish is identity.
template <class T>
struct IntIo {
  using V = __m512i;
  static constexpr size_t kWidth = 64 / sizeof(T);
  TPF_SIMD_TARGET static V load(const void* p, size_t i) { return _mm512_loadu_si512(at<T>(p, i)); }
  TPF_SIMD_TARGET static void store(void* p, size_t i, V v) { _mm512_storeu_si512(at<T>(p, i), v); }
  TPF_SIMD_TARGET static V finish(V v, int, bool) { return v; }
};

// ---- Combining operators. min/max: vminps(a, b) is "a < b ? a : b", the reference's order; the
// blend adds NaN propagation from a (a NaN in b already comes out).
// --------------------------------

#define TPF_BINOP(Name, V, expr)                              \
  struct Name {                                               \
    TPF_SIMD_TARGET static V apply(V a, V b) { return expr; } \
  };

TPF_BINOP(AddPs, __m512, _mm512_add_ps(a, b))
TPF_BINOP(MulPs, __m512, _mm512_mul_ps(a, b))
TPF_BINOP(MinPs, __m512,
          _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), _mm512_min_ps(a, b), a))
TPF_BINOP(MaxPs, __m512,
          _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), _mm512_max_ps(a, b), a))
TPF_BINOP(AddPd, __m512d, _mm512_add_pd(a, b))
TPF_BINOP(MulPd, __m512d, _mm512_mul_pd(a, b))
TPF_BINOP(MinPd, __m512d,
          _mm512_mask_blend_pd(_mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), _mm512_min_pd(a, b), a))
TPF_BINOP(MaxPd, __m512d,
          _mm512_mask_blend_pd(_mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), _mm512_max_pd(a, b), a))
TPF_BINOP(AddI8, __m512i, _mm512_add_epi8(a, b))
TPF_BINOP(MinI8, __m512i, _mm512_min_epi8(a, b))
TPF_BINOP(MaxI8, __m512i, _mm512_max_epi8(a, b))
TPF_BINOP(MinU8, __m512i, _mm512_min_epu8(a, b))
TPF_BINOP(MaxU8, __m512i, _mm512_max_epu8(a, b))
TPF_BINOP(AddI32, __m512i, _mm512_add_epi32(a, b))
TPF_BINOP(MulI32, __m512i, _mm512_mullo_epi32(a, b))
TPF_BINOP(MinI32, __m512i, _mm512_min_epi32(a, b))
TPF_BINOP(MaxI32, __m512i, _mm512_max_epi32(a, b))
TPF_BINOP(AddI64, __m512i, _mm512_add_epi64(a, b))
TPF_BINOP(MulI64, __m512i, _mm512_mullo_epi64(a, b))
TPF_BINOP(MinI64, __m512i, _mm512_min_epi64(a, b))
TPF_BINOP(MaxI64, __m512i, _mm512_max_epi64(a, b))

#undef TPF_BINOP

// There is no 8-bit multiply: the low byte of a 16-bit product depends only on the low bytes, so
// multiply the even bytes and the odd bytes (shifted down) in 16-bit lanes and merge.
struct MulI8 {
  TPF_SIMD_TARGET static __m512i apply(__m512i a, __m512i b) {
    const __m512i low_bytes = _mm512_set1_epi16(0x00ff);
    const __m512i even = _mm512_and_si512(_mm512_mullo_epi16(a, b), low_bytes);
    const __m512i odd =
        _mm512_slli_epi16(_mm512_mullo_epi16(_mm512_srli_epi16(a, 8), _mm512_srli_epi16(b, 8)), 8);
    return _mm512_or_si512(even, odd);
  }
};

}  // namespace

}  // namespace tpf::coll::detail

#include "coll/reduce_simd_driver.h"

namespace tpf::coll::detail {

bool reduce_n_avx512(DType dtype, ReduceOp op, void* dst, const void* const* srcs, int nsrcs,
                     size_t count) {
  return reduce_n_simd(dtype, op, dst, srcs, nsrcs, count);
}

}  // namespace tpf::coll::detail

#else  // not x86-64: no AVX-512 kernels; reduce_n never selects them.

namespace tpf::coll::detail {

bool reduce_n_avx512(DType, ReduceOp, void*, const void* const*, int, size_t) { return false; }

}  // namespace tpf::coll::detail

#endif
