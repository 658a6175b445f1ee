// CUDA kernels for attention over a key-value cache (Backend::CachedAttentionForward, inference):
// the new positions' keys and values copied into the caches, then one block per (query, b, h)
// streaming the cached keys in tiles with an online softmax. A simple kernel: decoding runs one
// query per sequence, so the grid is B * NH blocks of key tiles read from global memory.
//
// Sums run in a fixed order (a thread's own keys and dimensions ascending, block trees of fixed
// shape, tiles ascending), and every output element has one writer: the same bits run to run.
#include <cmath>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"

namespace baton::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kKeyTile = 512;  // scores of one tile of keys, in shared memory
constexpr int kDimsPerThread = (kCachedMaxHeadDim + kThreads - 1) / kThreads;

// cache[(b * slots + past + i) * C + c] = qkv[(b * Tq + i) * 3C + third * C + c] over (B,Tq,C):
// the same dtype, so LoadF then StoreF gives back the same bits.
__global__ void AppendKernel(const void* qkv, void* cache, DType dtype, int64_t queries,
                             int64_t past, int64_t slots, int64_t channels, int third, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = e % channels;
    const int64_t row = e / channels;  // b * Tq + i
    const int64_t b = row / queries;
    const int64_t i = row % queries;
    StoreF(cache, dtype, (b * slots + past + i) * channels + c,
           LoadF(qkv, dtype, row * 3 * channels + third * channels + c));
  }
}

struct CachedArgs {
  const void* qkv;
  const void* k_cache;
  const void* v_cache;
  DType dtype;  // of qkv and the caches
  void* out;
  DType out_dtype;
  int64_t queries, past, slots, channels;
  int heads, head_dim;
  float scale;
};

// Block (i, b, h): query i of sequence b, head h, at position past + i, over keys 0 .. past + i.
// Thread tid owns dimensions d = tid + k * kThreads of the output accumulator.
__global__ void __launch_bounds__(kThreads) CachedAttentionKernel(CachedArgs args) {
  extern __shared__ float shared[];
  float* q = shared;                  // head_dim
  float* scores = q + args.head_dim;  // kKeyTile
  float* reduce = scores + kKeyTile;  // kWarp
  const int64_t i = blockIdx.x % args.queries;
  const int64_t bh = blockIdx.x / args.queries;
  const int64_t b = bh / args.heads;
  const int64_t column = (bh % args.heads) * args.head_dim;
  const int64_t c = args.channels;
  for (int d = threadIdx.x; d < args.head_dim; d += kThreads) {
    q[d] = LoadF(args.qkv, args.dtype, (b * args.queries + i) * 3 * c + column + d);
  }
  __syncthreads();
  const int64_t keys = args.past + i + 1;
  float m = -INFINITY, l = 0.0f, acc[kDimsPerThread];
#pragma unroll
  for (int k = 0; k < kDimsPerThread; ++k) acc[k] = 0.0f;
  for (int64_t k0 = 0; k0 < keys; k0 += kKeyTile) {
    const int n = static_cast<int>(min(int64_t{kKeyTile}, keys - k0));
    float tile_max = -INFINITY;
    for (int j = threadIdx.x; j < n; j += kThreads) {
      const int64_t row = (b * args.slots + k0 + j) * c + column;
      float dot = 0.0f;
      for (int d = 0; d < args.head_dim; ++d) {
        dot = fmaf(q[d], LoadF(args.k_cache, args.dtype, row + d), dot);
      }
      scores[j] = args.scale * dot;
      tile_max = fmaxf(tile_max, scores[j]);
    }
    const float m_new = fmaxf(m, BlockMax(tile_max, reduce));  // syncs: scores are complete
    const float rescale = expf(m - m_new);                     // 0 on the first tile
    float partial = 0.0f;
    for (int j = threadIdx.x; j < n; j += kThreads) {
      scores[j] = expf(scores[j] - m_new);
      partial += scores[j];
    }
    l = l * rescale + BlockSum(partial, reduce);  // syncs: the probabilities are complete
    m = m_new;
#pragma unroll
    for (int k = 0; k < kDimsPerThread; ++k) {
      const int d = threadIdx.x + k * kThreads;
      if (d >= args.head_dim) continue;
      float a = acc[k] * rescale;
      for (int j = 0; j < n; ++j) {
        a = fmaf(scores[j],
                 LoadF(args.v_cache, args.dtype, (b * args.slots + k0 + j) * c + column + d), a);
      }
      acc[k] = a;
    }
    __syncthreads();  // the next tile overwrites scores
  }
#pragma unroll
  for (int k = 0; k < kDimsPerThread; ++k) {
    const int d = threadIdx.x + k * kThreads;
    if (d < args.head_dim) {
      StoreF(args.out, args.out_dtype, (b * args.queries + i) * c + column + d, acc[k] / l);
    }
  }
}

}  // namespace

void LaunchCachedAttentionForward(const void* qkv, DType dtype, void* k_cache, void* v_cache,
                                  void* out, DType out_dtype, int64_t batch, int64_t queries,
                                  int64_t past, int64_t slots, int64_t channels, int64_t heads,
                                  cudaStream_t stream) {
  if (batch * queries == 0) return;
  const int64_t n = batch * queries * channels;
  for (int third = 1; third <= 2; ++third) {
    AppendKernel<<<GridFor(n, 256), 256, 0, stream>>>(qkv, third == 1 ? k_cache : v_cache, dtype,
                                                      queries, past, slots, channels, third, n);
    BATON_CUDA_CHECK_LAUNCH();
  }
  CachedArgs args{qkv,
                  k_cache,
                  v_cache,
                  dtype,
                  out,
                  out_dtype,
                  queries,
                  past,
                  slots,
                  channels,
                  static_cast<int>(heads),
                  static_cast<int>(channels / heads),
                  0.0f};
  args.scale = 1.0f / std::sqrt(static_cast<float>(args.head_dim));
  const size_t shared_bytes = sizeof(float) * (args.head_dim + kKeyTile + kWarp);
  CachedAttentionKernel<<<static_cast<unsigned>(CachedAttentionBlocks(batch, queries, heads)),
                          kThreads, shared_bytes, stream>>>(args);
  BATON_CUDA_CHECK_LAUNCH();
}

}  // namespace baton::cuda
