// CUDA kernels for casts, elementwise arithmetic, the reductions (sum of squares, finiteness)
// and AdamW, with f32 or 8-bit state (see launch.h for the contracts).
#include <algorithm>
#include <tuple>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/quantize.h"

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

__global__ void ApplyMaskKernel(void* t, DType dtype, const uint8_t* mask, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    if (mask[i] == 0) StoreF(t, dtype, i, 0.0f);
  }
}

__global__ void DequantizeInt8Kernel(const int8_t* q, const float* scale, void* out,
                                     DType out_dtype, int64_t n, int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    StoreF(out, out_dtype, i, __fmul_rn(static_cast<float>(q[i]), scale[i % cols]));
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

// One element's AdamW step on m, v and p: torch.optim.AdamW's f32 operations in the CPU
// backend's order, each rounded on its own (no FMA contraction, IEEE sqrt and division).
__device__ __forceinline__ void AdamWElement(const AdamWScalars& s, float g, float& m, float& v,
                                             float& p) {
  m = __fadd_rn(__fmul_rn(s.beta1, m), __fmul_rn(s.one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(s.beta2, v), __fmul_rn(__fmul_rn(s.one_minus_beta2, g), g));
  p = __fmul_rn(p, s.decay);
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), s.bias_correction2_sqrt), s.eps);
  p = __fadd_rn(p, __fmul_rn(-s.step_size, __fdiv_rn(m, denom)));
}

__global__ void AdamWKernel(float* param, const void* grad, DType grad_dtype, float* m, float* v,
                            int64_t n, AdamWScalars s) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = __fmul_rn(LoadF(grad, grad_dtype, i), s.grad_scale);
    float mi = m[i], vi = v[i], p = param[i];
    AdamWElement(s, g, mi, vi, p);
    m[i] = mi;
    v[i] = vi;
    param[i] = p;
  }
}

// ---- 8-bit AdamW (kernels/quantize.h)

constexpr int kCodes = static_cast<int>(std::tuple_size<QuantMap>::value);  // 256
static_assert(kQuantBlock == kCodes, "one thread per element of a block loads one code each");

// Both code books, passed by value as a __grid_constant__ parameter (2 KiB, read in place).
struct QuantMaps {
  float m[kCodes];  // SignedQuantMap
  float v[kCodes];  // UnsignedQuantMap
};

// x if x > 0, else +0: drops NaN and -0 so that fmaxf trees give the CPU's running std::max
// from 0 whatever their order.
__device__ __forceinline__ float PositivePart(float x) { return x > 0.0f ? x : 0.0f; }

// Quantize (kernels/quantize.cc) on an ascending map: std::lower_bound's search for the first
// value >= x (none for NaN: code 0), then the nearer neighbour, the lower one on a tie.
__device__ __forceinline__ uint8_t NearestCode(float x, const float* map) {
  int upper = 0, count = kCodes;
  while (count > 0) {
    const int half = count / 2;
    if (map[upper + half] < x) {
      upper += half + 1;
      count -= half + 1;
    } else {
      count = half;
    }
  }
  if (upper == 0) return 0;
  if (upper == kCodes) return kCodes - 1;
  const bool take_upper = __fsub_rn(map[upper], x) < __fsub_rn(x, map[upper - 1]);
  return static_cast<uint8_t>(take_upper ? upper : upper - 1);
}

// One kCodes-thread block per quantisation block (grid-stride over blocks), thread j owning
// element j of it: dequantise, step, block absmax by a max tree (exact, so the order does not
// matter), requantise. Every thread reads its block's absmax before thread 0 rewrites it (the
// tree's __syncthreads lie in between).
__global__ void __launch_bounds__(kCodes)
    AdamW8bitKernel(float* param, const void* grad, DType grad_dtype, uint8_t* m, float* m_absmax,
                    uint8_t* v, float* v_absmax, int64_t n, AdamWScalars s,
                    const __grid_constant__ QuantMaps maps) {
  // The binary searches diverge across a warp: they read the maps from shared memory, not from
  // the constant bank the parameter lives in.
  __shared__ float m_map[kCodes], v_map[kCodes];
  __shared__ float reduce[kWarp];
  m_map[threadIdx.x] = maps.m[threadIdx.x];
  v_map[threadIdx.x] = maps.v[threadIdx.x];
  __syncthreads();
  const int64_t blocks = (n + kQuantBlock - 1) / kQuantBlock;
  for (int64_t block = blockIdx.x; block < blocks; block += gridDim.x) {
    const int64_t i = block * kQuantBlock + threadIdx.x;
    const bool active = i < n;  // the last block may be short
    float mi = 0.0f, vi = 0.0f;
    if (active) {
      mi = __fmul_rn(m_map[m[i]], m_absmax[block]);
      vi = __fmul_rn(v_map[v[i]], v_absmax[block]);
      float p = param[i];
      AdamWElement(s, __fmul_rn(LoadF(grad, grad_dtype, i), s.grad_scale), mi, vi, p);
      param[i] = p;
    }
    const float max_m = BlockMax(PositivePart(fabsf(mi)), reduce);
    const float max_v = BlockMax(PositivePart(vi), reduce);
    if (threadIdx.x == 0) {
      m_absmax[block] = max_m;
      v_absmax[block] = max_v;
    }
    if (active) {
      const float inv_m = max_m > 0.0f ? __fdiv_rn(1.0f, max_m) : 0.0f;
      const float inv_v = max_v > 0.0f ? __fdiv_rn(1.0f, max_v) : 0.0f;
      m[i] = NearestCode(__fmul_rn(mi, inv_m), m_map);
      v[i] = NearestCode(__fmul_rn(vi, inv_v), v_map);
    }
  }
}

// The kernel's copy of kernels/quantize.h's code books, built on first use.
const QuantMaps& Maps() {
  static const QuantMaps maps = [] {
    QuantMaps built;
    std::copy(SignedQuantMap().begin(), SignedQuantMap().end(), built.m);
    std::copy(UnsignedQuantMap().begin(), UnsignedQuantMap().end(), built.v);
    return built;
  }();
  return maps;
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

void LaunchApplyMask(void* t, DType dtype, const uint8_t* mask, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  ApplyMaskKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(t, dtype, mask, n);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchDequantizeInt8(const int8_t* q, const float* scale, void* out, DType out_dtype,
                          int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  DequantizeInt8Kernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(q, scale, out, out_dtype, n,
                                                                      cols);
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

void LaunchAdamW8bit(float* param, const void* grad, DType grad_dtype, uint8_t* m, float* m_absmax,
                     uint8_t* v, float* v_absmax, int64_t n, const AdamWScalars& scalars,
                     cudaStream_t stream) {
  if (n == 0) return;
  AdamW8bitKernel<<<GridFor(n, kCodes), kCodes, 0, stream>>>(param, grad, grad_dtype, m, m_absmax,
                                                             v, v_absmax, n, scalars, Maps());
  BATON_CUDA_CHECK_LAUNCH();
}

}  // namespace baton::cuda
