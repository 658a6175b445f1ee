// Row-major single-precision GEMM through OpenBLAS, and OpenBLAS's thread count.
//
// OpenBLAS keeps one process-wide thread pool; SetBlasThreads changes it for every caller, so the
// CPU backend sets it before each call (a no-op when unchanged). Internal to kernels/cpu.
#pragma once

#include <cstdint>

namespace baton::cpu {

void SetBlasThreads(int threads);

// c = alpha * op(a) @ op(b) + beta * c, all row-major with leading dimensions in elements.
// op(a) is (m,k), op(b) is (k,n), c is (m,n). Empty shapes are fine (k == 0 scales c by beta).
void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace baton::cpu
