// Device-side helpers shared by the .cu files: dtype-dispatched loads and stores (f32 arithmetic
// on f32/bf16/f16 storage), deterministic warp and block reductions, the id-error record, and
// launch sizing.
//
// Reductions are trees of fixed shape (xor-shuffles within a warp, then warp results combined in
// warp order through shared memory), so their rounding depends only on the block size.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"

namespace baton::cuda {

inline constexpr int kWarp = 32;

__device__ __forceinline__ float LoadF(const void* p, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::kF16:
      return __half2float(static_cast<const __half*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

// Round to nearest even, as core's FloatToBFloat16 / FloatToHalf.
__device__ __forceinline__ void StoreF(void* p, DType dtype, int64_t i, float value) {
  switch (dtype) {
    case DType::kBF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(value);
      break;
    case DType::kF16:
      static_cast<__half*>(p)[i] = __float2half_rn(value);
      break;
    default:
      static_cast<float*>(p)[i] = value;
  }
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ double WarpSum(double v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `shared` holds 32 values. Contains __syncthreads: call from all threads.
template <typename T>
__device__ T BlockSum(T v, T* shared) {
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  v = WarpSum(v);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T total = lane < warps ? shared[lane] : T(0);
  return WarpSum(total);
}

__device__ __forceinline__ float BlockMax(float v, float* shared) {
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const float m = lane < warps ? shared[lane] : -INFINITY;
  return WarpMax(m);
}

// Records the first out-of-range id a kernel meets (launch.h); later ones are dropped.
__device__ __forceinline__ void RecordBadId(IdError* error, int64_t index, int value, int bound) {
  if (atomicCAS(&error->set, 0, 1) == 0) {
    error->index = index;
    error->value = value;
    error->bound = bound;
  }
}

// Ids against a table holding the vocabulary rows `vocab` (launch.h): an id is bad when it is
// negative or, for a whole vocabulary, past its end (recorded with bound IdBound); a good id's row
// in the table is LocalRow, -1 when it is another rank's.
__device__ __forceinline__ bool IsBadId(const VocabRows& vocab, int id) {
  return id < 0 || (vocab.whole && id >= vocab.rows);
}
__device__ __forceinline__ int IdBound(const VocabRows& vocab) {
  return vocab.whole ? static_cast<int>(vocab.rows) : kAnyIdBound;
}
__device__ __forceinline__ int64_t LocalRow(const VocabRows& vocab, int id) {
  const int64_t local = id - vocab.begin;
  return local >= 0 && local < vocab.rows ? local : -1;
}

// Blocks for a grid-stride loop over n elements with `threads` per block.
inline unsigned GridFor(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  const int64_t capped = blocks < 65535 * 16 ? blocks : 65535 * 16;
  return static_cast<unsigned>(capped > 0 ? capped : 1);
}

}  // namespace baton::cuda
