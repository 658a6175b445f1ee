// Row-major GEMMs through oneDNN matmul primitives (or OpenBLAS sgemm), threaded by the caller,
// not by the library.
//
// Each library call runs on one thread (oneDNN's OpenMP team size is set to 1 in every thread
// that calls it; OpenBLAS is set single-threaded). Gemm instead cuts c into blocks of rows (or of
// columns, when c is wider than tall) and runs one single-threaded matmul per block on the kernels'
// threads. The blocks depend on the shape only, so the calls, and the result bits, are the same for
// any thread count.
//
// A primitive is created once per problem (shape, transposes, leading dimensions, alpha, beta,
// dtypes) and per calling thread, and cached: creating one JIT-compiles its kernel, executing it
// only binds the pointers. oneDNN's own packing buffers (its scratchpad) are not in the ledger,
// like any BLAS's.
//
// f32 engine, one per process (GemmEngineInUse): oneDNN where its f32 matmul is its brgemm
// (AVX-512 and newer); OpenBLAS on older x86 (AVX2), where oneDNN 2.6's jit sgemm is as fast as
// OpenBLAS on one thread but loses ~40% of its speed when two threads of a process call it at
// once (measured: bench/README.md, "GEMM engines"), while OpenBLAS keeps its speed. bf16 operands
// go to oneDNN where the CPU multiplies bf16 and the f32 engine is oneDNN (Bf16GemmInUse), else
// they are staged to f32. The environment variable BATON_CPU_GEMM=onednn|openblas overrides the
// choice. Results are bit-identical for any thread count with either engine, not across engines.
// Internal to kernels/cpu.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace baton::cpu {

class ThreadPool;

enum class GemmEngine { kOneDnn, kOpenBlas };

// "onednn" or "openblas".
const char* Name(GemmEngine engine);

// The engine Sgemm uses: BATON_CPU_GEMM if set (anything but onednn/openblas throws), else by
// the CPU as above. Decided on the first call.
GemmEngine GemmEngineInUse();

// Makes Sgemm use `engine` from now on (tests and benchmarks compare the two in one process). Not
// while another thread multiplies.
void SetGemmEngine(GemmEngine engine);

// Smallest block of c's rows (or columns) given its own matmul call: each call packs the other
// operand again, and smaller blocks make thinner kernels.
inline constexpr int64_t kGemmMinBlock = 128;
// At most this many blocks: enough for 8 threads, and several per thread at 2.
inline constexpr int64_t kGemmMaxBlocks = 8;

// c = alpha * op(a) @ op(b) + beta * c, all row-major with leading dimensions in elements.
// op(a) is (m,k), op(b) is (k,n), c is (m,n). Empty shapes are fine (k == 0 scales c by beta).
// With a pool the blocks run in parallel; pass none from inside a parallel task.
void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
           ThreadPool* pool = nullptr);

// How Sgemm cuts an (m, n) c: along its rows when m >= n, else its columns; `blocks` blocks of
// `block` (the last one shorter). Depends on the shape only.
struct GemmBlocking {
  bool split_rows = true;
  int64_t block = 0;
  int64_t blocks = 0;
};
GemmBlocking BlockingOf(int64_t m, int64_t n);

// Throws unless the engine in use can multiply an (m, k) by (k, n) product with leading
// dimensions up to the largest of m, n and k (OpenBLAS: 32-bit sizes). Sgemm checks for itself.
void CheckGemmSizes(int64_t m, int64_t n, int64_t k);

// One block of Sgemm: a single library call on the calling thread, not cut further, and no
// checks (it runs inside parallel tasks): m, n, k > 0, and CheckGemmSizes passed. Callers that
// stage operands block by block (CpuBackend's 16-bit Matmul) run the blocks of BlockingOf through
// it, so each call is the one Sgemm would make.
void SgemmBlock(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc);

// As Sgemm for 16-bit operands: a and b bf16, products accumulated in f32, c f32 or bf16 (with
// beta != 0, a bf16 c is read back as bf16). Only where Bf16GemmSupported(); callers stage the
// operands to f32 elsewhere.
void Bf16Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const void* a, int64_t lda, const void* b, int64_t ldb, float beta, void* c,
              DType c_dtype, int64_t ldc, ThreadPool* pool = nullptr);

// Whether this CPU multiplies bf16 in hardware through oneDNN (AVX512_BF16 or AMX): a bf16
// matmul primitive that is not oneDNN's reference loop exists for every transpose form. Decided
// once per process from the CPU alone.
bool Bf16GemmSupported();

// Whether CpuBackend's Matmul sends bf16 x bf16 products to Bf16Gemm: Bf16GemmSupported() and the
// f32 engine in use is oneDNN. With BATON_CPU_GEMM=openblas bf16 operands are staged to f32 too,
// so one machine runs both 16-bit paths (make test does: kernels_test_openblas, _onednn).
bool Bf16GemmInUse();

// The oneDNN library loaded at run time, e.g. "2.6.3" (Debian 12) or "3.1.1" (Ubuntu 24.04).
std::string OneDnnVersion();

// For benchmark headers: the f32 engine, oneDNN's version and implementations, and where bf16
// goes, e.g. "openblas for f32 (oneDNN 2.6.3: f32 gemm:jit, bf16 none); bf16 operands staged to
// f32".
std::string GemmEnginesSummary();

// What a GEMM does besides its shape and dtype.
struct GemmForm {
  bool trans_a = false;
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;
};

// oneDNN's implementation name for an f32 (or bf16) problem of this shape and form on packed
// operands, e.g. "gemm:jit" or "brg:avx512_core" (benchmarks print it beside their figures;
// "ref:any" is oneDNN's reference loop, orders of magnitude slower).
std::string GemmImplementation(int64_t m, int64_t n, int64_t k, DType dtype = DType::kF32,
                               GemmForm form = {});

}  // namespace baton::cpu
