// CublasLtGemm: row-major (strided-batched) GEMMs through cuBLASLt (cuBLAS as the fallback), for
// the CUDA backend.
//
// Row-major matrices are cuBLAS's column-major matrices transposed, so out = op(a) op(b) is run as
// out^T = op(b)^T op(a)^T: b becomes cuBLAS's A, a its B, and out (m,n) row-major is a column-major
// (n,m) matrix. The bias epilogue adds a vector of length n (cuBLAS's rows) to every row of out,
// after alpha op(a) op(b) + beta out (beta = 1 accumulates).
//
// Types (f32 accumulation throughout): a, b f32 -> out f32 (exact f32 unless allow_tf32); a, b
// bf16 -> out bf16 or f32; a, b f16 -> out f16 or f32. The bias has out's dtype. Callers stage
// other combinations (CudaBackend::Matmul does). One algorithm is chosen per problem
// (shapes, strides, dtypes, pointer alignments) by cuBLASLt's heuristic and cached, so the same
// call gives the same bits every time. A problem for which cuBLASLt offers no algorithm (odd
// alignments, tiny shapes) runs through cuBLAS's cublasGemmStridedBatchedEx instead, with the
// bias broadcast into out first; that choice is cached too.
//
// Thread safety: one CublasLtGemm serves one thread (its backend's).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <unordered_map>

#include "core/dtype.h"

namespace baton::cuda {

struct GemmMatrix {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t ld = 0;            // row-major leading dimension (elements between rows)
  int64_t batch_stride = 0;  // elements between consecutive matrices of a batch
};

struct GemmProblem {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0;  // out (m,n) = op(a) (m,k) op(b) (k,n)
  GemmMatrix a, b;
  void* out = nullptr;
  DType out_dtype = DType::kF32;
  int64_t ldo = 0;
  int64_t out_batch_stride = 0;
  int batch = 1;
  float alpha = 1.0f;
  float beta = 0.0f;           // 1: accumulate into out
  const void* bias = nullptr;  // (n), out's dtype; optional
};

class CublasLtGemm {
 public:
  // `workspace` (device, `workspace_bytes`) is owned by the caller and outlives this object.
  // force_cublas: every problem takes the cuBLAS path (tests of the fallback).
  CublasLtGemm(void* workspace, size_t workspace_bytes, bool allow_tf32, bool force_cublas = false);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // True for the dtype combinations listed above.
  static bool Supports(DType a, DType b, DType out);

  // Queues the GEMM on `stream`. m, n or k == 0 is the caller's business (not accepted here).
  void Run(const GemmProblem& problem, cudaStream_t stream);

  bool allow_tf32() const { return allow_tf32_; }

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr;  // cuBLAS's A: our b
    cublasLtMatrixLayout_t b = nullptr;  // cuBLAS's B: our a
    cublasLtMatrixLayout_t c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool use_lt = true;  // false: cuBLASLt had no algorithm; cuBLAS runs it
  };
  void RunCublas(const GemmProblem& problem, cudaStream_t stream);
  Plan& PlanFor(const GemmProblem& problem);
  Plan MakePlan(const GemmProblem& problem);

  cublasLtHandle_t handle_ = nullptr;
  cublasHandle_t blas_ = nullptr;  // created on the first fallback
  void* workspace_;
  size_t workspace_bytes_;
  bool allow_tf32_;
  bool force_cublas_;
  std::unordered_map<std::string, Plan> plans_;
};

}  // namespace baton::cuda
