#include "tensor/blas.h"

#include <cblas.h>

#include <string>

#include "tpf/error.h"

namespace tpf {

void gemm_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
              int64_t ldc) {
  if (m < 0 || n < 0 || k < 0) {
    throw Error(ErrorCode::invalid_argument, "gemm: negative size m=" + std::to_string(m) + " n=" +
                                                 std::to_string(n) + " k=" + std::to_string(k));
  }
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

void set_blas_threads(int threads) {
  if (threads < 1) {
    throw Error(ErrorCode::invalid_argument,
                "BLAS thread count must be at least 1, got " + std::to_string(threads));
  }
  openblas_set_num_threads(threads);
}

int blas_threads() { return openblas_get_num_threads(); }

std::string blas_kernel_name() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "unknown";
}

}  // namespace tpf
