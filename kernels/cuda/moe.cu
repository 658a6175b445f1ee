// CUDA kernels for the mixture-of-experts row moves (see launch.h for the contracts,
// kernels/backend.h for the semantics): one block per token, threads over the columns. A token's
// permuted rows are its own, so no two blocks write the same memory; combine adds a token's
// choices in j order per column as the CPU backend does; the weights' dot products sum per thread
// then over the block (BlockSum), a tree fixed by the block size.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"

namespace baton::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ int64_t SlotRow(const int32_t* slots, int64_t index, int64_t rows) {
  const int64_t row = slots[index];
  return row >= 0 && row < rows ? row : -1;
}

__global__ void MoeDispatchKernel(const void* x, DType x_dtype, const int32_t* slots,
                                  const float* weights, void* out, DType out_dtype, int64_t tokens,
                                  int64_t k, int64_t rows, int64_t cols) {
  for (int64_t n = blockIdx.x; n < tokens; n += gridDim.x) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t row = SlotRow(slots, n * k + j, rows);
      if (row < 0) continue;
      const float w = weights != nullptr ? weights[n * k + j] : 1.0f;
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        StoreF(out, out_dtype, row * cols + c, w * LoadF(x, x_dtype, n * cols + c));
      }
    }
  }
}

__global__ void MoeCombineKernel(const void* y, DType y_dtype, const int32_t* slots,
                                 const float* weights, void* out, DType out_dtype, int64_t tokens,
                                 int64_t k, int64_t rows, int64_t cols) {
  for (int64_t n = blockIdx.x; n < tokens; n += gridDim.x) {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      float acc = LoadF(out, out_dtype, n * cols + c);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t row = SlotRow(slots, n * k + j, rows);
        if (row < 0) continue;
        const float w = weights != nullptr ? weights[n * k + j] : 1.0f;
        acc += w * LoadF(y, y_dtype, row * cols + c);
      }
      StoreF(out, out_dtype, n * cols + c, acc);
    }
  }
}

__global__ void MoeCombineWeightsBackwardKernel(const void* dout, DType dout_dtype, const void* y,
                                                DType y_dtype, const int32_t* slots,
                                                float* dweights, int64_t tokens, int64_t k,
                                                int64_t rows, int64_t cols) {
  __shared__ float shared[kWarp];
  for (int64_t n = blockIdx.x; n < tokens; n += gridDim.x) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t row = SlotRow(slots, n * k + j, rows);
      if (row < 0) continue;  // the same for every thread of the block
      float dot = 0.0f;
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        dot += LoadF(dout, dout_dtype, n * cols + c) * LoadF(y, y_dtype, row * cols + c);
      }
      dot = BlockSum(dot, shared);
      if (threadIdx.x == 0) dweights[n * k + j] += dot;
    }
  }
}

unsigned TokenBlocks(int64_t tokens) {
  return static_cast<unsigned>(tokens < 65535 * 16 ? tokens : 65535 * 16);
}

}  // namespace

void LaunchMoeDispatch(const void* x, DType x_dtype, const int32_t* slots, const float* weights,
                       void* out, DType out_dtype, int64_t tokens, int64_t k, int64_t rows,
                       int64_t cols, cudaStream_t stream) {
  if (tokens == 0 || k == 0 || cols == 0) return;
  MoeDispatchKernel<<<TokenBlocks(tokens), kThreads, 0, stream>>>(x, x_dtype, slots, weights, out,
                                                                  out_dtype, tokens, k, rows, cols);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchMoeCombine(const void* y, DType y_dtype, const int32_t* slots, const float* weights,
                      void* out, DType out_dtype, int64_t tokens, int64_t k, int64_t rows,
                      int64_t cols, cudaStream_t stream) {
  if (tokens == 0 || k == 0 || cols == 0) return;
  MoeCombineKernel<<<TokenBlocks(tokens), kThreads, 0, stream>>>(y, y_dtype, slots, weights, out,
                                                                 out_dtype, tokens, k, rows, cols);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchMoeCombineWeightsBackward(const void* dout, DType dout_dtype, const void* y,
                                     DType y_dtype, const int32_t* slots, float* dweights,
                                     int64_t tokens, int64_t k, int64_t rows, int64_t cols,
                                     cudaStream_t stream) {
  if (tokens == 0 || k == 0 || cols == 0) return;
  MoeCombineWeightsBackwardKernel<<<TokenBlocks(tokens), kThreads, 0, stream>>>(
      dout, dout_dtype, y, y_dtype, slots, dweights, tokens, k, rows, cols);
  BATON_CUDA_CHECK_LAUNCH();
}

}  // namespace baton::cuda
