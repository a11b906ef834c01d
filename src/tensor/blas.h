// Matrix products through OpenBLAS (Debian's libopenblas-dev), row-major, f32.
#pragma once

#include <cstdint>
#include <string>

namespace tpf {

// C[m, n] = alpha * op(A) * op(B) + beta * C, all row-major; op(X) is X or X^T. lda/ldb/ldc are
// row strides in elements of the matrices as stored.
void gemm_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
              int64_t ldc);

// Threads OpenBLAS may use for one product. Tensor-parallel ranks that share a machine's cores
// each want (cores / ranks); a lone rank wants all of them.
void set_blas_threads(int threads);
int blas_threads();
// The kernel family OpenBLAS chose for this CPU ("Haswell", "SkylakeX", ...).
std::string blas_kernel_name();

}  // namespace tpf
