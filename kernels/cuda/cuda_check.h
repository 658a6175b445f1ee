// Error checks for CUDA runtime and cuBLAS(Lt) calls: each failure becomes a baton::Error naming
// the call as written, the error, file:line, and the thread's ErrorContext() ("stage 1").
//
//   BATON_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
//   BATON_CUBLAS_CHECK(cublasLtMatmul(...));
//   BATON_CUDA_CHECK_LAUNCH();  // after a <<<...>>> launch: picks up launch errors
//
// NCCL calls are wrapped the same way by comm/ (BATON_NCCL_CHECK there), which does not depend
// on kernels/. Usable from host .cc files and .cu files alike.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

namespace baton::cuda {

// Throw baton::Error ("[stage 1] file:line: cudaMalloc(&p, n) failed: out of memory
// (cudaErrorMemoryAllocation)"); only called when `status` is a failure.
[[noreturn]] void ThrowCudaError(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void ThrowCublasError(cublasStatus_t status, const char* call, const char* file,
                                   int line);

}  // namespace baton::cuda

#define BATON_CUDA_CHECK(call)                                                      \
  do {                                                                              \
    const cudaError_t baton_cuda_status_ = (call);                                  \
    if (baton_cuda_status_ != cudaSuccess) {                                        \
      ::baton::cuda::ThrowCudaError(baton_cuda_status_, #call, __FILE__, __LINE__); \
    }                                                                               \
  } while (0)

// After a kernel launch: reports a bad launch configuration at the launch site (errors raised
// while the kernel runs surface at the next synchronising call).
#define BATON_CUDA_CHECK_LAUNCH() BATON_CUDA_CHECK(cudaGetLastError())

#define BATON_CUBLAS_CHECK(call)                                                        \
  do {                                                                                  \
    const cublasStatus_t baton_cublas_status_ = (call);                                 \
    if (baton_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                \
      ::baton::cuda::ThrowCublasError(baton_cublas_status_, #call, __FILE__, __LINE__); \
    }                                                                                   \
  } while (0)
