// OpenBLAS sgemm wrapper (see gemm.h).
#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <climits>

#include "core/error.h"

namespace baton::cpu {

void SetBlasThreads(int threads) {
  if (openblas_get_num_threads() != threads) openblas_set_num_threads(threads);
}

void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  BATON_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX &&
                  ldc <= INT_MAX,
              "GEMM ({} x {} x {}) exceeds BLAS's 32-bit sizes", m, n, k);
  if (k == 0) {  // BLAS would leave c alone for beta == 1 and scale it otherwise; be explicit
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    }
    return;
  }
  // BLAS rejects leading dimensions below 1 even when unused.
  const auto ld = [](int64_t v) { return static_cast<int>(v < 1 ? 1 : v); };
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, ld(lda), b, ld(ldb), beta, c, ld(ldc));
}

}  // namespace baton::cpu
