// The instruction-set-independent half of the vector reduction kernels: the unrolled loop, the
// scalar tail, integer avg and the dispatch over dtype and op. reduce_kernels_avx2.cc and
// reduce_kernels_avx512.cc include it, each compiling its own copy (internal linkage) for its own
// target, so the two differ only in their storage adapters and vector operations.
//
// Include it after defining TPF_SIMD_TARGET (the target attribute) and, in the anonymous namespace
// of tpf::coll::detail, the adapters F32Io, F16Io, Bf16Io, F64Io and IntIo<T> (V, kWidth, load,
// store, finish) and the binary operations AddPs ... MaxI64 (a static apply(V, V)).
#pragma once

#include <cstddef>
#include <cstdint>

#include "coll/reduce_kernels.h"
#include "tpf/dtype.h"

#ifndef TPF_SIMD_TARGET
#error "define TPF_SIMD_TARGET (the kernels' target attribute) before including this file"
#endif

namespace tpf::coll::detail {

namespace {

// ---- The loop: four vectors per step, all sources accumulated in registers, one store. --------

template <class Io, class Op>
TPF_SIMD_TARGET size_t run(void* dst, const void* const* srcs, int nsrcs, size_t begin, size_t end,
                           bool avg) {
  using V = typename Io::V;
  constexpr size_t kW = Io::kWidth;
  size_t i = begin;
  for (; i + 4 * kW <= end; i += 4 * kW) {
    const void* first = srcs[0];
    V a0 = Io::load(first, i);
    V a1 = Io::load(first, i + kW);
    V a2 = Io::load(first, i + 2 * kW);
    V a3 = Io::load(first, i + 3 * kW);
    for (int s = 1; s < nsrcs; ++s) {
      const void* src = srcs[s];
      a0 = Op::apply(a0, Io::load(src, i));
      a1 = Op::apply(a1, Io::load(src, i + kW));
      a2 = Op::apply(a2, Io::load(src, i + 2 * kW));
      a3 = Op::apply(a3, Io::load(src, i + 3 * kW));
    }
    Io::store(dst, i, Io::finish(a0, nsrcs, avg));
    Io::store(dst, i + kW, Io::finish(a1, nsrcs, avg));
    Io::store(dst, i + 2 * kW, Io::finish(a2, nsrcs, avg));
    Io::store(dst, i + 3 * kW, Io::finish(a3, nsrcs, avg));
  }
  for (; i + kW <= end; i += kW) {
    V a = Io::load(srcs[0], i);
    for (int s = 1; s < nsrcs; ++s) a = Op::apply(a, Io::load(srcs[s], i));
    Io::store(dst, i, Io::finish(a, nsrcs, avg));
  }
  return i;
}

// Runs the vector loop, then the scalar reference on the tail.
template <class Io, class Op>
TPF_SIMD_TARGET void run_with_tail(DType dtype, ReduceOp op, void* dst, const void* const* srcs,
                                   int nsrcs, size_t count) {
  const size_t done = run<Io, Op>(dst, srcs, nsrcs, 0, count, op == ReduceOp::avg);
  if (done < count) reduce_range_scalar(dtype, op, dst, srcs, nsrcs, done, count);
}

// Integer avg: the wrapped sum a cache-sized block at a time, then divide that block in place
// while it is still in L1.
template <class Io, class Op>
TPF_SIMD_TARGET void run_int_avg(DType dtype, void* dst, const void* const* srcs, int nsrcs,
                                 size_t count) {
  constexpr size_t kBlock = 4096;
  for (size_t begin = 0; begin < count; begin += kBlock) {
    const size_t end = count - begin < kBlock ? count : begin + kBlock;
    const size_t done = run<Io, Op>(dst, srcs, nsrcs, begin, end, false);
    if (done < end) reduce_range_scalar(dtype, ReduceOp::sum, dst, srcs, nsrcs, done, end);
    divide_range_scalar(dtype, dst, nsrcs, begin, end);
  }
}

template <class Io, class Add, class Mul, class Min, class Max>
TPF_SIMD_TARGET void run_op(DType dtype, ReduceOp op, void* dst, const void* const* srcs, int nsrcs,
                            size_t count) {
  switch (op) {
    case ReduceOp::sum: run_with_tail<Io, Add>(dtype, op, dst, srcs, nsrcs, count); return;
    case ReduceOp::prod: run_with_tail<Io, Mul>(dtype, op, dst, srcs, nsrcs, count); return;
    case ReduceOp::min: run_with_tail<Io, Min>(dtype, op, dst, srcs, nsrcs, count); return;
    case ReduceOp::max: run_with_tail<Io, Max>(dtype, op, dst, srcs, nsrcs, count); return;
    case ReduceOp::avg:
      if (is_floating(dtype)) {
        run_with_tail<Io, Add>(dtype, op, dst, srcs, nsrcs, count);
      } else {
        run_int_avg<Io, Add>(dtype, dst, srcs, nsrcs, count);
      }
      return;
  }
}

// reduce_n_avx2 / reduce_n_avx512: the kernel for this dtype and op, or false for a dtype left to
// the scalar path.
bool reduce_n_simd(DType dtype, ReduceOp op, void* dst, const void* const* srcs, int nsrcs,
                   size_t count) {
  switch (dtype) {
    case DType::f32:
      run_op<F32Io, AddPs, MulPs, MinPs, MaxPs>(dtype, op, dst, srcs, nsrcs, count);
      break;
    case DType::f16:
      run_op<F16Io, AddPs, MulPs, MinPs, MaxPs>(dtype, op, dst, srcs, nsrcs, count);
      break;
    case DType::bf16:
      run_op<Bf16Io, AddPs, MulPs, MinPs, MaxPs>(dtype, op, dst, srcs, nsrcs, count);
      break;
    case DType::f64:
      run_op<F64Io, AddPd, MulPd, MinPd, MaxPd>(dtype, op, dst, srcs, nsrcs, count);
      break;
    case DType::i8:
      run_op<IntIo<int8_t>, AddI8, MulI8, MinI8, MaxI8>(dtype, op, dst, srcs, nsrcs, count);
      break;
    case DType::u8:
      run_op<IntIo<uint8_t>, AddI8, MulI8, MinU8, MaxU8>(dtype, op, dst, srcs, nsrcs, count);
      break;
    case DType::i32:
      run_op<IntIo<int32_t>, AddI32, MulI32, MinI32, MaxI32>(dtype, op, dst, srcs, nsrcs, count);
      break;
    case DType::i64:
      run_op<IntIo<int64_t>, AddI64, MulI64, MinI64, MaxI64>(dtype, op, dst, srcs, nsrcs, count);
      break;
    default: return false;
  }
  return true;
}

}  // namespace

}  // namespace tpf::coll::detail
