// OpenBLAS against oneDNN's sgemm on the GEMM shapes of a gpt-6x768 training step (batch 8 x 256
// tokens): the measurement behind docs/model.md's note on a oneDNN backend. Not built by CMake
// (libdnnl-dev is not a dependency yet); build and run by hand:
//   apt-get install libdnnl-dev
//   g++ -O2 bench/gpt/gemm_backends.cc -o gemm_backends $(pkg-config --cflags --libs openblas)
//   -ldnnl OMP_NUM_THREADS=1 env -u OPENBLAS_CORETYPE ./gemm_backends 1
// The argument is OpenBLAS's thread count; oneDNN's comes from OMP_NUM_THREADS.
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  openblas_set_num_threads(threads);
  struct S {
    int m, n, k;
    bool ta, tb;
  } shapes[] = {{2048, 2304, 768, false, false},
                {2048, 768, 3072, false, false},
                {768, 3072, 2048, true, false},
                {2048, 768, 2304, false, true},
                {256, 256, 64, false, true}};
  for (auto s : shapes) {
    std::vector<float> a((size_t)s.m * s.k, 0.5f), b((size_t)s.k * s.n, 0.25f),
        c((size_t)s.m * s.n);
    int lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    double flops = 2.0 * s.m * s.n * s.k;
    for (int impl = 0; impl < 2; ++impl) {
      int iters = s.m * (double)s.n * s.k > 1e8 ? 10 : 200;
      auto run = [&] {
        if (impl == 0)
          cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans,
                      s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.f, a.data(), lda, b.data(),
                      ldb, 0.f, c.data(), s.n);
        else
          dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.f, a.data(), lda,
                     b.data(), ldb, 0.f, c.data(), s.n);
      };
      run();
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) run();
      double sec =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
      printf("%s %dx%dx%d %c%c: %.1f GFLOP/s\n", impl ? "onednn  " : "openblas", s.m, s.n, s.k,
             s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', flops / sec / 1e9);
    }
  }
}
