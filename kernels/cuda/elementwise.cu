// CUDA kernels for casts, elementwise arithmetic, the reductions (sum of squares, finiteness)
// and AdamW (see launch.h for the contracts).
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"

namespace baton::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void CastKernel(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                           int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    StoreF(dst, dst_dtype, i, LoadF(src, src_dtype, i));
  }
}

__global__ void AddKernel(const void* a, DType a_dtype, const void* b, DType b_dtype, void* out,
                          DType out_dtype, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    StoreF(out, out_dtype, i, LoadF(a, a_dtype, i) + LoadF(b, b_dtype, i));
  }
}

__global__ void AccumulateKernel(const void* x, DType x_dtype, void* acc, DType acc_dtype,
                                 int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    StoreF(acc, acc_dtype, i, LoadF(acc, acc_dtype, i) + LoadF(x, x_dtype, i));
  }
}

__global__ void ScaleKernel(void* t, DType dtype, float factor, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    StoreF(t, dtype, i, LoadF(t, dtype, i) * factor);
  }
}

__global__ void BroadcastRowsKernel(const void* row, DType row_dtype, void* out, DType out_dtype,
                                    int64_t rows, int64_t cols, bool accumulate) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float value = LoadF(row, row_dtype, i % cols);
    StoreF(out, out_dtype, i, accumulate ? LoadF(out, out_dtype, i) + value : value);
  }
}

// One block per chunk of kSumOfSquaresChunk elements: per-thread strided sums in double, then a
// block tree; partial[block] holds the chunk's sum.
__global__ void SumOfSquaresChunksKernel(const void* t, DType dtype, int64_t n, double* partials) {
  __shared__ double shared[kWarp];
  const int64_t begin = blockIdx.x * kSumOfSquaresChunk;
  const int64_t end = begin + kSumOfSquaresChunk < n ? begin + kSumOfSquaresChunk : n;
  double sum = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double v = LoadF(t, dtype, i);
    sum += v * v;
  }
  sum = BlockSum(sum, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// One block: the chunks' sums, strided per thread in index order, then a block tree.
__global__ void SumPartialsKernel(const double* partials, int64_t count, double* total) {
  __shared__ double shared[kWarp];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  sum = BlockSum(sum, shared);
  if (threadIdx.x == 0) *total = sum;
}

// Non-finite: all exponent bits set, in each format.
__global__ void NonFiniteKernel(const void* t, DType dtype, int64_t n, int* flag) {
  bool bad = false;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    if (dtype == DType::kF32) {
      bad |= (static_cast<const uint32_t*>(t)[i] & 0x7f800000u) == 0x7f800000u;
    } else {
      const uint16_t mask = dtype == DType::kF16 ? 0x7c00u : 0x7f80u;
      bad |= (static_cast<const uint16_t*>(t)[i] & mask) == mask;
    }
  }
  if (bad) *flag = 1;  // every writer writes the same value
}

// The CPU backend's sequence of f32 operations, each rounded on its own (no FMA).
__global__ void AdamWKernel(float* param, const void* grad, DType grad_dtype, float* m, float* v,
                            int64_t n, AdamWScalars s) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = __fmul_rn(LoadF(grad, grad_dtype, i), s.grad_scale);
    const float mi = __fadd_rn(__fmul_rn(s.beta1, m[i]), __fmul_rn(s.one_minus_beta1, g));
    const float vi =
        __fadd_rn(__fmul_rn(s.beta2, v[i]), __fmul_rn(__fmul_rn(s.one_minus_beta2, g), g));
    m[i] = mi;
    v[i] = vi;
    float p = __fmul_rn(param[i], s.decay);
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bias_correction2_sqrt), s.eps);
    p = __fadd_rn(p, __fmul_rn(-s.step_size, __fdiv_rn(mi, denom)));
    param[i] = p;
  }
}

}  // namespace

void LaunchCast(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
                cudaStream_t stream) {
  if (n == 0) return;
  CastKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(src, src_dtype, dst, dst_dtype, n);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchAdd(const void* a, DType a_dtype, const void* b, DType b_dtype, void* out,
               DType out_dtype, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  AddKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(a, a_dtype, b, b_dtype, out, out_dtype,
                                                           n);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchAccumulate(const void* x, DType x_dtype, void* acc, DType acc_dtype, int64_t n,
                      cudaStream_t stream) {
  if (n == 0) return;
  AccumulateKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(x, x_dtype, acc, acc_dtype, n);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchScale(void* t, DType dtype, float factor, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  ScaleKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(t, dtype, factor, n);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchBroadcastRows(const void* row, DType row_dtype, void* out, DType out_dtype, int64_t rows,
                         int64_t cols, bool accumulate, cudaStream_t stream) {
  if (rows * cols == 0) return;
  BroadcastRowsKernel<<<GridFor(rows * cols, kThreads), kThreads, 0, stream>>>(
      row, row_dtype, out, out_dtype, rows, cols, accumulate);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchSumOfSquares(const void* t, DType dtype, int64_t n, double* partials, double* total,
                        cudaStream_t stream) {
  const int64_t blocks = SumOfSquaresBlocks(n);
  if (blocks > 0) {
    SumOfSquaresChunksKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(t, dtype, n,
                                                                                     partials);
    BATON_CUDA_CHECK_LAUNCH();
  }
  SumPartialsKernel<<<1, 1024, 0, stream>>>(partials, blocks, total);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchNonFiniteFlag(const void* t, DType dtype, int64_t n, int* flag, cudaStream_t stream) {
  if (n == 0) return;
  NonFiniteKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(t, dtype, n, flag);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchAdamW(float* param, const void* grad, DType grad_dtype, float* m, float* v, int64_t n,
                 const AdamWScalars& scalars, cudaStream_t stream) {
  if (n == 0) return;
  AdamWKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(param, grad, grad_dtype, m, v, n,
                                                             scalars);
  BATON_CUDA_CHECK_LAUNCH();
}

}  // namespace baton::cuda
