// Row-major single-precision GEMM through OpenBLAS, threaded by the caller, not by OpenBLAS.
//
// OpenBLAS runs single-threaded (SetSingleThreadedBlas; its pthread pool would fight the kernels'
// threads for the same cores). Sgemm instead cuts c into blocks of rows (or of columns,
// when c is wider than tall) and runs one single-threaded sgemm per block on the kernels'
// threads. The blocks depend on the shape only, so the calls, and the result bits, are the same
// for any thread count. Internal to kernels/cpu.
#pragma once

#include <cstdint>

namespace baton::cpu {

class ThreadPool;

// Smallest block of c's rows (or columns) given its own sgemm call: smaller blocks repack the
// other operand too often (each call packs it again).
inline constexpr int64_t kGemmMinBlock = 256;
// At most this many blocks: enough for 8 threads.
inline constexpr int64_t kGemmMaxBlocks = 8;

// Sets OpenBLAS's process-wide thread count to 1 (idempotent, cheap). Call it from the calling
// thread before Sgemm, not from inside a parallel region.
void SetSingleThreadedBlas();

// c = alpha * op(a) @ op(b) + beta * c, all row-major with leading dimensions in elements.
// op(a) is (m,k), op(b) is (k,n), c is (m,n). Empty shapes are fine (k == 0 scales c by beta).
// With a pool the blocks run in parallel; pass none from inside a parallel task.
void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
           ThreadPool* pool = nullptr);

}  // namespace baton::cpu
