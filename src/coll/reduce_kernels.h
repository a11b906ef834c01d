// Elementwise reduction of several input arrays into one output: the arithmetic at the heart of
// all-reduce and reduce-scatter.
#pragma once

#include <cstddef>

#include "tpf/dtype.h"

namespace tpf::coll {

// dst[i] = op(srcs[0][i], srcs[1][i], ..., srcs[nsrcs-1][i]), combining strictly in that order
// (so the result is the same bit pattern whichever rank computes it). f16/bf16 accumulate in f32
// and round once at the end (nearest even); avg divides the sum by nsrcs (integers truncate toward
// zero); integer sum/prod wrap modulo 2^bits. min/max propagate NaN. nsrcs >= 1; dst may alias
// srcs[0] (and only srcs[0]). SIMD where the CPU has it, chosen at run time.
void reduce_n(DType dtype, ReduceOp op, void* dst, const void* const* srcs, int nsrcs,
              size_t count);

// data[i] = data[i] / n, as avg finishes a sum (floats divide in their accumulation type and
// round once; integers truncate toward zero): an average whose sum was reduced in several steps,
// as across hosts.
void divide_n(DType dtype, void* data, size_t count, int n);

// The plain scalar version of reduce_n: the reference the tests compare the SIMD kernels to.
void reduce_n_reference(DType dtype, ReduceOp op, void* dst, const void* const* srcs, int nsrcs,
                        size_t count);

// Which instruction set reduce_n uses on this CPU ("avx512", "avx2", "scalar"). The environment
// variable TPF_REDUCE_ISA=scalar|avx2|avx512 lowers the choice (a higher one than the CPU has falls
// back to the best available; an unknown value makes reduce_n throw Error(invalid_argument)).
const char* reduce_kernel_isa();

// Tests and benchmarks: force reduce_n to use `isa` ("scalar", "avx2", "avx512"), or pass nullptr
// to return to the automatic choice. Returns false, changing nothing, if the name is unknown or
// this CPU cannot run that instruction set.
bool set_reduce_isa_for_testing(const char* isa);

// Results that are NaN are written as the canonical quiet NaN (positive sign, empty payload): the
// payload of a NaN produced by an operation depends on operand order in ways compilers do not keep,
// and every rank must write the same bits.

namespace detail {

// The SIMD kernels (reduce_kernels_avx2.cc, reduce_kernels_avx512.cc). Arguments are already
// validated and count > 0. They return false for a dtype/op they leave to the scalar path, and on
// CPUs or builds without the instruction set.
bool reduce_n_avx2(DType dtype, ReduceOp op, void* dst, const void* const* srcs, int nsrcs,
                   size_t count);
bool reduce_n_avx512(DType dtype, ReduceOp op, void* dst, const void* const* srcs, int nsrcs,
                     size_t count);

// The scalar reference over elements [begin, end) only: the SIMD kernels finish their tails with
// it, so tails are bit-identical by construction.
void reduce_range_scalar(DType dtype, ReduceOp op, void* dst, const void* const* srcs, int nsrcs,
                         size_t begin, size_t end);

// For integer avg the SIMD kernels write the wrapped sum, then this divides dst[begin, end) in
// place by nsrcs, truncating toward zero.
void divide_range_scalar(DType dtype, void* dst, int nsrcs, size_t begin, size_t end);

}  // namespace detail

}  // namespace tpf::coll
