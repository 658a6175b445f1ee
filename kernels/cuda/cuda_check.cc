// The error paths of cuda_check.h.
#include "kernels/cuda/cuda_check.h"

#include <fmt/format.h>

#include "core/error.h"

namespace baton::cuda {

void ThrowCudaError(cudaError_t status, const char* call, const char* file, int line) {
  cudaGetLastError();  // clear a sticky launch error so the next check reports its own
  ThrowError(file, line, nullptr,
             fmt::format("{} failed: {} ({})", call, cudaGetErrorString(status),
                         cudaGetErrorName(status)));
}

void ThrowCublasError(cublasStatus_t status, const char* call, const char* file, int line) {
  ThrowError(file, line, nullptr,
             fmt::format("{} failed: {} ({})", call, cublasLtGetStatusName(status),
                         cublasLtGetStatusString(status)));
}

}  // namespace baton::cuda
