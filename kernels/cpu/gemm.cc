// OpenBLAS sgemm, threaded by fixed blocks of c (see gemm.h).
#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <climits>

#include "core/error.h"
#include "kernels/cpu/parallel.h"

namespace baton::cpu {
namespace {

// One single-threaded sgemm; sizes already checked to fit BLAS's int.
void SgemmCall(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc) {
  // BLAS rejects leading dimensions below 1 even when unused.
  const auto ld = [](int64_t v) { return static_cast<int>(std::max<int64_t>(v, 1)); };
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, ld(lda), b, ld(ldb), beta, c, ld(ldc));
}

}  // namespace

void SetSingleThreadedBlas() {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
           ThreadPool* pool) {
  if (m == 0 || n == 0) return;
  BATON_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX &&
                  ldc <= INT_MAX,
              "GEMM ({} x {} x {}) exceeds BLAS's 32-bit sizes", m, n, k);
  if (k == 0) {  // BLAS leaves c alone for beta == 1 and may skip the scaling; be explicit
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    }
    return;
  }
  // Split the longer side of c: each call repacks the operand along the other side.
  const bool split_rows = m >= n;
  const int64_t extent = split_rows ? m : n;
  const int64_t per_block = (extent + kGemmMaxBlocks - 1) / kGemmMaxBlocks;
  const int64_t block = std::max(kGemmMinBlock, (per_block + 63) / 64 * 64);
  const int64_t blocks = (extent + block - 1) / block;
  ParallelFor(blocks, pool, block * (split_rows ? n : m) * k, [&](int64_t index) {
    const int64_t begin = index * block;
    const int64_t size = std::min(block, extent - begin);
    if (split_rows) {  // row `begin` of op(a) is a row of a, or a column when transposed
      const float* a_rows = trans_a ? a + begin : a + begin * lda;
      SgemmCall(trans_a, trans_b, size, n, k, alpha, a_rows, lda, b, ldb, beta, c + begin * ldc,
                ldc);
    } else {  // column `begin` of op(b) is a column of b, or a row when transposed
      const float* b_cols = trans_b ? b + begin * ldb : b + begin;
      SgemmCall(trans_a, trans_b, m, size, k, alpha, a, lda, b_cols, ldb, beta, c + begin, ldc);
    }
  });
}

}  // namespace baton::cpu
