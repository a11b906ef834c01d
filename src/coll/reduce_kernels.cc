// The scalar reduction kernels (the reference every SIMD kernel must match bit for bit), argument
// checks, and the run-time choice of instruction set.
#include "coll/reduce_kernels.h"

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "tpf/error.h"
#include "tpf/half.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

namespace tpf::coll {

namespace {

// ---- Element access: load converts storage to the accumulator type, store converts back. -------

template <class T>
T load_elem(const void* base, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(base) + i * sizeof(T), sizeof(T));
  return v;
}

template <class T>
void store_elem(void* base, size_t i, T v) {
  std::memcpy(static_cast<char*>(base) + i * sizeof(T), &v, sizeof(T));
}

template <class T>
T canonical_nan() {
  if constexpr (std::is_same_v<T, float>) {
    return std::bit_cast<float>(uint32_t{0x7fc00000u});
  } else {
    return std::bit_cast<double>(uint64_t{0x7ff8000000000000u});
  }
}

// Floating formats: Acc is what we add in (f32 for the 16-bit formats), avg divides in Acc and
// every NaN result becomes the canonical one.
template <class Acc, class Storage, Acc (*kWiden)(Storage), Storage (*kNarrow)(Acc)>
struct FloatIo {
  using A = Acc;
  static A load(const void* p, size_t i) { return kWiden(load_elem<Storage>(p, i)); }
  static void store(void* p, size_t i, A v) { store_elem<Storage>(p, i, kNarrow(v)); }
  static A finish(A v, int nsrcs, bool avg) {
    if (avg) v = v / static_cast<A>(nsrcs);
    return std::isnan(v) ? canonical_nan<A>() : v;
  }
  static A add(A a, A b) { return a + b; }
  static A mul(A a, A b) { return a * b; }
  // x86 minps/maxps semantics (b unless a is strictly smaller/larger) plus NaN from either side.
  static A min(A a, A b) { return (a < b || std::isnan(a)) ? a : b; }
  static A max(A a, A b) { return (a > b || std::isnan(a)) ? a : b; }
};

template <class T>
T identity(T v) {
  return v;
}

using F32Io = FloatIo<float, float, identity<float>, identity<float>>;
using F64Io = FloatIo<double, double, identity<double>, identity<double>>;
using F16Io = FloatIo<float, uint16_t, f16_to_f32, f32_to_f16>;
using Bf16Io = FloatIo<float, uint16_t, bf16_to_f32, f32_to_bf16>;

// bf16 for the blocked fast path, inlined: a call into half.cc per element costs several times the
// arithmetic. Widening need not quiet NaNs and narrowing needs no NaN case, because finish()
// turns every NaN result into 0x7fc00000, which the rounding maps to the canonical bf16 NaN 0x7fc0.
// The tests hold this path to the reference bit for bit.
float bf16_widen_inline(uint16_t bits) { return std::bit_cast<float>(uint32_t{bits} << 16); }
uint16_t bf16_narrow_inline(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
using Bf16InlineIo = FloatIo<float, uint16_t, bf16_widen_inline, bf16_narrow_inline>;

// Integers: sum and prod are computed in unsigned arithmetic so they wrap without signed-overflow
// UB; W is at least unsigned int so 8-bit products never promote to a signed int.
template <class T>
struct IntIo {
  using A = T;
  using U = std::make_unsigned_t<T>;
  using W = decltype(U{} + 0u);
  static A load(const void* p, size_t i) { return load_elem<T>(p, i); }
  static void store(void* p, size_t i, A v) { store_elem<T>(p, i, v); }
  static A finish(A v, int nsrcs, bool avg) {
    if (!avg) return v;
    if constexpr (std::is_signed_v<T>) {
      return static_cast<T>(static_cast<int64_t>(v) / static_cast<int64_t>(nsrcs));
    } else {
      return static_cast<T>(static_cast<uint64_t>(v) / static_cast<uint64_t>(nsrcs));
    }
  }
  static A add(A a, A b) { return static_cast<T>(static_cast<W>(U(a)) + static_cast<W>(U(b))); }
  static A mul(A a, A b) { return static_cast<T>(static_cast<W>(U(a)) * static_cast<W>(U(b))); }
  static A min(A a, A b) { return a < b ? a : b; }
  static A max(A a, A b) { return a > b ? a : b; }
};

template <class Io>
struct AddOp {
  static typename Io::A apply(typename Io::A a, typename Io::A b) { return Io::add(a, b); }
};
template <class Io>
struct MulOp {
  static typename Io::A apply(typename Io::A a, typename Io::A b) { return Io::mul(a, b); }
};
template <class Io>
struct MinOp {
  static typename Io::A apply(typename Io::A a, typename Io::A b) { return Io::min(a, b); }
};
template <class Io>
struct MaxOp {
  static typename Io::A apply(typename Io::A a, typename Io::A b) { return Io::max(a, b); }
};

// Calls f.template operator()<Io, Op>() for the run-time dtype and op (avg uses AddOp). kInline
// picks the inlined bf16 conversions of the fast path instead of half.cc's.
template <bool kInline = false, class F>
void dispatch(DType dtype, ReduceOp op, F&& f) {
  auto with_io = [&]<class Io>() {
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg: f.template operator()<Io, AddOp<Io>>(); return;
      case ReduceOp::prod: f.template operator()<Io, MulOp<Io>>(); return;
      case ReduceOp::min: f.template operator()<Io, MinOp<Io>>(); return;
      case ReduceOp::max: f.template operator()<Io, MaxOp<Io>>(); return;
    }
  };
  switch (dtype) {
    case DType::f32: with_io.template operator()<F32Io>(); return;
    case DType::f64: with_io.template operator()<F64Io>(); return;
    case DType::f16: with_io.template operator()<F16Io>(); return;
    case DType::bf16:
      with_io.template operator()<std::conditional_t<kInline, Bf16InlineIo, Bf16Io>>();
      return;
    case DType::i8: with_io.template operator()<IntIo<int8_t>>(); return;
    case DType::u8: with_io.template operator()<IntIo<uint8_t>>(); return;
    case DType::i32: with_io.template operator()<IntIo<int32_t>>(); return;
    case DType::i64: with_io.template operator()<IntIo<int64_t>>(); return;
  }
}

// The reference: one element at a time, sources strictly in order.
template <class Io, class Op>
void reference_range(void* dst, const void* const* srcs, int nsrcs, size_t begin, size_t end,
                     bool avg) {
  for (size_t i = begin; i < end; ++i) {
    typename Io::A acc = Io::load(srcs[0], i);
    for (int s = 1; s < nsrcs; ++s) acc = Op::apply(acc, Io::load(srcs[s], i));
    Io::store(dst, i, Io::finish(acc, nsrcs, avg));
  }
}

// The portable fast path: the same arithmetic, but a block of accumulators at a time so the
// compiler can vectorize with whatever the baseline target has (SSE2, NEON). Each element still
// sees its sources in order, so the bits equal the reference.
template <class Io, class Op>
void blocked_range(void* dst, const void* const* srcs, int nsrcs, size_t count, bool avg) {
  constexpr size_t kBlock = 256;
  typename Io::A acc[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t len = count - base < kBlock ? count - base : kBlock;
    for (size_t j = 0; j < len; ++j) acc[j] = Io::load(srcs[0], base + j);
    for (int s = 1; s < nsrcs; ++s) {
      const void* src = srcs[s];
      for (size_t j = 0; j < len; ++j) acc[j] = Op::apply(acc[j], Io::load(src, base + j));
    }
    for (size_t j = 0; j < len; ++j) Io::store(dst, base + j, Io::finish(acc[j], nsrcs, avg));
  }
}

// ---- Instruction set choice. --------------------------------------------------------------------

enum class Isa : int { scalar = 0, avx2 = 1, avx512 = 2 };
constexpr int kNoOverride = -1;

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    case Isa::scalar: break;
  }
  return "scalar";
}

bool parse_isa(const char* name, Isa* out) {
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512}) {
    if (std::strcmp(name, isa_name(isa)) == 0) {
      *out = isa;
      return true;
    }
  }
  return false;
}

Isa best_supported_isa() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return Isa::avx512;
  }
  // F16C came with every AVX2 CPU shipped, but check rather than assume. Through cpuid because
  // Clang's __builtin_cpu_supports does not know "f16c"; AVX2 being usable already implies the OS
  // saves the YMM state F16C needs.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  if (__builtin_cpu_supports("avx2") && f16c) return Isa::avx2;
#endif
  return Isa::scalar;
}

// The automatic choice: the best the CPU has, lowered by TPF_REDUCE_ISA. A function-local static so
// that a bad value throws from every call (initialization is retried after an exception).
Isa automatic_isa() {
  static const Isa chosen = [] {
    Isa best = best_supported_isa();
    const char* env = std::getenv("TPF_REDUCE_ISA");
    if (env == nullptr || *env == '\0') return best;
    Isa wanted;
    if (!parse_isa(env, &wanted)) {
      throw Error(ErrorCode::invalid_argument,
                  std::string("reduce kernels: TPF_REDUCE_ISA='") + env +
                      "' is not one of scalar, avx2, avx512; set one of those or unset it");
    }
    return static_cast<int>(wanted) < static_cast<int>(best) ? wanted : best;
  }();
  return chosen;
}

std::atomic<int> g_isa_override{kNoOverride};

Isa active_isa() {
  const int forced = g_isa_override.load(std::memory_order_relaxed);
  return forced == kNoOverride ? automatic_isa() : static_cast<Isa>(forced);
}

void check_args(const char* fn, DType dtype, ReduceOp op, const void* dst, const void* const* srcs,
                int nsrcs, size_t count) {
  auto fail = [&](const std::string& what) {
    throw Error(ErrorCode::invalid_argument, std::string(fn) + ": " + what);
  };
  if (!is_valid(dtype)) {
    fail("invalid dtype value " + std::to_string(static_cast<unsigned>(dtype)) +
         "; pass a tpf::DType enumerator");
  }
  if (!is_valid(op)) {
    fail("invalid reduce op value " + std::to_string(static_cast<unsigned>(op)) +
         "; pass a tpf::ReduceOp enumerator");
  }
  if (nsrcs < 1) fail("nsrcs is " + std::to_string(nsrcs) + "; it must be at least 1");
  if (count == 0) return;
  if (dst == nullptr) fail("dst is null with count " + std::to_string(count));
  if (srcs == nullptr) fail("srcs is null with count " + std::to_string(count));
  for (int s = 0; s < nsrcs; ++s) {
    if (srcs[s] == nullptr) {
      fail("srcs[" + std::to_string(s) + "] is null with count " + std::to_string(count));
    }
  }
}

}  // namespace

void reduce_n_reference(DType dtype, ReduceOp op, void* dst, const void* const* srcs, int nsrcs,
                        size_t count) {
  check_args("reduce_n_reference", dtype, op, dst, srcs, nsrcs, count);
  if (count == 0) return;
  detail::reduce_range_scalar(dtype, op, dst, srcs, nsrcs, 0, count);
}

void reduce_n(DType dtype, ReduceOp op, void* dst, const void* const* srcs, int nsrcs,
              size_t count) {
  check_args("reduce_n", dtype, op, dst, srcs, nsrcs, count);
  if (count == 0) return;
  switch (active_isa()) {
    case Isa::avx512:
      if (detail::reduce_n_avx512(dtype, op, dst, srcs, nsrcs, count)) return;
      break;
    case Isa::avx2:
      if (detail::reduce_n_avx2(dtype, op, dst, srcs, nsrcs, count)) return;
      break;
    case Isa::scalar: break;
  }
  const bool avg = op == ReduceOp::avg;
  dispatch<true>(dtype, op, [&]<class Io, class Op>() {
    blocked_range<Io, Op>(dst, srcs, nsrcs, count, avg);
  });
}

void divide_n(DType dtype, void* data, size_t count, int n) {
  dispatch(dtype, ReduceOp::sum, [&]<class Io, class Op>() {
    for (size_t i = 0; i < count; ++i) Io::store(data, i, Io::finish(Io::load(data, i), n, true));
  });
}

const char* reduce_kernel_isa() { return isa_name(active_isa()); }

bool set_reduce_isa_for_testing(const char* isa) {
  if (isa == nullptr) {
    g_isa_override.store(kNoOverride, std::memory_order_relaxed);
    return true;
  }
  Isa wanted;
  if (!parse_isa(isa, &wanted)) return false;
  if (static_cast<int>(wanted) > static_cast<int>(best_supported_isa())) return false;
  g_isa_override.store(static_cast<int>(wanted), std::memory_order_relaxed);
  return true;
}

namespace detail {

void reduce_range_scalar(DType dtype, ReduceOp op, void* dst, const void* const* srcs, int nsrcs,
                         size_t begin, size_t end) {
  const bool avg = op == ReduceOp::avg;
  dispatch(dtype, op, [&]<class Io, class Op>() {
    reference_range<Io, Op>(dst, srcs, nsrcs, begin, end, avg);
  });
}

void divide_range_scalar(DType dtype, void* dst, int nsrcs, size_t begin, size_t end) {
  auto divide = [&]<class T>() {
    for (size_t i = begin; i < end; ++i) {
      store_elem<T>(dst, i, IntIo<T>::finish(load_elem<T>(dst, i), nsrcs, true));
    }
  };
  switch (dtype) {
    case DType::i8: divide.template operator()<int8_t>(); return;
    case DType::u8: divide.template operator()<uint8_t>(); return;
    case DType::i32: divide.template operator()<int32_t>(); return;
    case DType::i64: divide.template operator()<int64_t>(); return;
    default:
      throw Error(
          ErrorCode::internal,
          std::string("reduce kernels: integer avg divide called for ") + dtype_name(dtype));
  }
}

}  // namespace detail

}  // namespace tpf::coll
