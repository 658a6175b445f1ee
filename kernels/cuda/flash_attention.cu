// CUDA kernels for flash-style causal attention (Backend::FlashAttentionForward/Backward): no
// T x T matrix is ever held, only tiles of 32 rows of Q, K, V, dO staged in shared memory as f32.
// See launch.h for the contracts and docs/cuda.md (Kernels) for the design.
//
// Both kernels use blocks of 8 warps over tiles of kTile = 32 rows. Each warp owns 4 of the
// block's 32 rows; a lane indexes the other tile's rows when forming scores (lane j: key or query
// j of the streamed tile), and the head dimension (d = lane + 32k) when accumulating products,
// the probabilities passed from lane to lane by shuffles. Every sum runs in a fixed order (d
// ascending, tile rows ascending, tiles ascending, xor-shuffle trees), and every output element is
// written by exactly one thread, so results are the same bits run to run.
#include <cmath>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"

namespace baton::cuda {
namespace {

constexpr int kTile = kFlashTile;  // a lane indexes one row of the streamed tile
static_assert(kTile == kWarp, "one lane per row of a tile");
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarp;
constexpr int kRowsPerWarp = kTile / kWarps;  // rows of the owned tile per warp
static_assert(kRowsPerWarp * kWarps == kTile, "warps split the owned tile evenly");

// Row stride of a staged tile: odd, so that 32 lanes reading 32 different rows at one column hit
// 32 different banks.
__host__ __device__ constexpr int TileStride(int head_dim) { return head_dim | 1; }

// Where one head's rows live in global memory: row t of the head starts at
// base + t * row_stride (elements), and has head_dim contiguous values.
struct HeadRows {
  const void* data;
  DType dtype;
  int64_t base;
  int64_t row_stride;
};

// tile[r][c] (f32, row stride `stride`) = rows[row0 + r][c], zeros past the sequence's end.
// Called by all threads of the block; the caller synchronises.
__device__ void StageTile(const HeadRows& rows, int row0, int seq, int head_dim, float* tile,
                          int stride) {
  for (int i = threadIdx.x; i < kTile * head_dim; i += kThreads) {
    const int r = i / head_dim;
    const int c = i % head_dim;
    const int t = row0 + r;
    tile[r * stride + c] =
        t < seq ? LoadF(rows.data, rows.dtype, rows.base + int64_t{t} * rows.row_stride + c) : 0.0f;
  }
}

// sum over d of a[d] * b[d], d ascending.
__device__ __forceinline__ float Dot(const float* a, const float* b, int head_dim) {
  float sum = 0.0f;
  for (int d = 0; d < head_dim; ++d) sum = fmaf(a[d], b[d], sum);
  return sum;
}

// ---- Forward

// One block per (query tile, b, h): m, l and the D accumulators of each owned row live in the
// registers of its warp (lane holds d = lane + 32k, k < kChunks).
template <int kChunks>
__global__ void __launch_bounds__(kThreads)
    FlashForwardKernel(const void* qkv, const int32_t* segment_starts, DType qkv_dtype, void* out,
                       DType out_dtype, float* lse, int seq, int64_t channels, int heads,
                       int head_dim, int64_t query_tiles, int64_t batch_heads, float scale) {
  extern __shared__ float shared[];
  const int stride = TileStride(head_dim);
  float* q_tile = shared;
  float* k_tile = q_tile + kTile * stride;
  float* v_tile = k_tile + kTile * stride;

  // Heaviest tiles (the last queries, which see the most keys) first, for every head.
  const int64_t tile = query_tiles - 1 - blockIdx.x / batch_heads;
  const int64_t bh = blockIdx.x % batch_heads;
  const int64_t b = bh / heads;
  const int64_t h = bh % heads;
  const int q0 = static_cast<int>(tile * kTile);
  const int q_end = min(q0 + kTile, seq);
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;

  const int64_t qkv_base = b * seq * 3 * channels + h * head_dim;
  const HeadRows q_rows{qkv, qkv_dtype, qkv_base, 3 * channels};
  const HeadRows k_rows{qkv, qkv_dtype, qkv_base + channels, 3 * channels};
  const HeadRows v_rows{qkv, qkv_dtype, qkv_base + 2 * channels, 3 * channels};
  StageTile(q_rows, q0, seq, head_dim, q_tile, stride);

  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kChunks];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int k = 0; k < kChunks; ++k) acc[r][k] = 0.0f;
  }
  // Packed documents: the row's segment starts, and the first key tile any query here sees
  // (starts never decrease along a row).
  const int32_t* segments = segment_starts == nullptr ? nullptr : segment_starts + b * seq;
  const int first_tile = segments == nullptr ? 0 : segments[q0] / kTile * kTile;
  for (int k0 = first_tile; k0 < q_end; k0 += kTile) {
    __syncthreads();  // the previous key tile is no longer read
    StageTile(k_rows, k0, seq, head_dim, k_tile, stride);
    StageTile(v_rows, k0, seq, head_dim, v_tile, stride);
    __syncthreads();
    const int key = k0 + lane;
    float p[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = warp * kRowsPerWarp + r;
      const int t = q0 + row;  // past the end for the tail's padding rows, never stored
      const int first = segments != nullptr && t < seq ? segments[t] : 0;
      float s = -INFINITY;
      if (key <= t && key < seq && key >= first) {
        s = scale * Dot(q_tile + row * stride, k_tile + lane * stride, head_dim);
      }
      // Without segments key 0 is in the first tile and visible to every row, so m_new is finite
      // from there on; a row whose document starts after this tile sees nothing yet (m_new
      // stays -inf): it keeps m, l and acc as they are.
      const float m_new = fmaxf(m[r], WarpMax(s));
      const bool none = m_new == -INFINITY;
      const float rescale = none ? 1.0f : expf(m[r] - m_new);  // 0 on the first tile
      p[r] = none ? 0.0f : expf(s - m_new);                    // 0 where masked
      l[r] = l[r] * rescale + WarpSum(p[r]);
      m[r] = m_new;
#pragma unroll
      for (int k = 0; k < kChunks; ++k) acc[r][k] *= rescale;
    }
    // acc += P V over the tile's keys, in key order; rows past q_end's keys have p = 0.
    const int keys = min(kTile, q_end - k0);
    for (int j = 0; j < keys; ++j) {
      float v[kChunks];
#pragma unroll
      for (int k = 0; k < kChunks; ++k) {
        const int d = lane + k * kWarp;
        v[k] = d < head_dim ? v_tile[j * stride + d] : 0.0f;
      }
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float pj = __shfl_sync(0xffffffffu, p[r], j);
#pragma unroll
        for (int k = 0; k < kChunks; ++k) acc[r][k] = fmaf(pj, v[k], acc[r][k]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int t = q0 + warp * kRowsPerWarp + r;
    if (t >= seq) continue;
    const float inv_l = 1.0f / l[r];
    const int64_t out_row = (b * seq + t) * channels + h * head_dim;
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int d = lane + k * kWarp;
      if (d < head_dim) StoreF(out, out_dtype, out_row + d, acc[r][k] * inv_l);
    }
    if (lane == 0) lse[bh * seq + t] = m[r] + logf(l[r]);
  }
}

// ---- Backward

struct BackwardArgs {
  const void* dout;
  DType dout_dtype;
  const void* qkv;
  DType qkv_dtype;
  const void* out;
  DType out_dtype;
  const float* lse;
  void* dqkv;
  DType dqkv_dtype;
  const int32_t* segment_starts;  // (B,T), or null: packed documents
  int seq;
  int64_t channels;
  int heads;
  int head_dim;
  int64_t tiles;  // ceil(seq / kTile)
  int64_t batch_heads;
  float scale;
};

// The per-block view of one (b, h): its shared tiles and where its rows live.
struct HeadTiles {
  float* q;      // Q rows of a query tile
  float* dout;   // dO rows of the same query tile
  float* k;      // K rows of a key tile
  float* v;      // V rows of the same key tile
  float* lse;    // lse of the query tile (kTile)
  float* delta;  // Delta_t = sum_d dO[t,d] O[t,d] of the query tile (kTile)
  int stride;
  HeadRows q_rows, k_rows, v_rows, dout_rows;
  int64_t bh, b, h;
};

// Stages query tile q0's Q, dO and lse, then forms its Delta (each warp its rows, from the staged
// dO and out read in its dtype: the same code, so the same bits, in key and query blocks).
// Called by all threads; ends synchronised.
__device__ void StageQueryTile(const BackwardArgs& args, const HeadTiles& tiles, int q0) {
  StageTile(tiles.q_rows, q0, args.seq, args.head_dim, tiles.q, tiles.stride);
  StageTile(tiles.dout_rows, q0, args.seq, args.head_dim, tiles.dout, tiles.stride);
  if (threadIdx.x < kTile) {
    const int t = q0 + static_cast<int>(threadIdx.x);
    tiles.lse[threadIdx.x] = t < args.seq ? args.lse[tiles.bh * args.seq + t] : 0.0f;
  }
  __syncthreads();
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = warp * kRowsPerWarp + r;
    const int t = q0 + row;
    float partial = 0.0f;
    if (t < args.seq) {
      const int64_t out_row = (tiles.b * args.seq + t) * args.channels + tiles.h * args.head_dim;
      for (int d = lane; d < args.head_dim; d += kWarp) {
        partial = fmaf(tiles.dout[row * tiles.stride + d],
                       LoadF(args.out, args.out_dtype, out_row + d), partial);
      }
    }
    const float delta = WarpSum(partial);
    if (lane == 0) tiles.delta[row] = delta;
  }
  __syncthreads();
}

// For query row `qrow` and key row `krow` of the staged tiles (positions t and key):
// p = exp(scale q.k - lse_t) and ds = p (dO_t . v - Delta_t), both 0 where masked.
__device__ __forceinline__ void ProbAndGrad(const BackwardArgs& args, const HeadTiles& tiles,
                                            int qrow, int t, int krow, int key, float& p,
                                            float& ds) {
  p = 0.0f;
  ds = 0.0f;
  const int first = args.segment_starts != nullptr && t < args.seq
                        ? args.segment_starts[tiles.b * args.seq + t]
                        : 0;
  if (t < args.seq && key <= t && key >= first) {
    const float s = args.scale * Dot(tiles.q + qrow * tiles.stride, tiles.k + krow * tiles.stride,
                                     args.head_dim);
    p = expf(s - tiles.lse[qrow]);
    const float dp =
        Dot(tiles.dout + qrow * tiles.stride, tiles.v + krow * tiles.stride, args.head_dim);
    ds = p * (dp - tiles.delta[qrow]);
  }
}

// dqkv[row][column + d] += scale * acc for this lane's d; one thread per element.
template <int kChunks>
__device__ void AddRow(const BackwardArgs& args, int64_t row_offset, const float (&acc)[kChunks],
                       float scale) {
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int d = lane + k * kWarp;
    if (d >= args.head_dim) continue;
    const int64_t i = row_offset + d;
    StoreF(args.dqkv, args.dqkv_dtype, i, LoadF(args.dqkv, args.dqkv_dtype, i) + scale * acc[k]);
  }
}

// Key block: owns key tile k0 (K, V staged once) and streams the query tiles at or after it:
// dV += P^T dO, dK += scale dS^T Q.
template <int kChunks>
__device__ void KeyBlock(const BackwardArgs& args, const HeadTiles& tiles, int k0) {
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  StageTile(tiles.k_rows, k0, args.seq, args.head_dim, tiles.k, tiles.stride);
  StageTile(tiles.v_rows, k0, args.seq, args.head_dim, tiles.v, tiles.stride);
  float dk[kRowsPerWarp][kChunks], dv[kRowsPerWarp][kChunks];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int k = 0; k < kChunks; ++k) dk[r][k] = dv[r][k] = 0.0f;
  }
  for (int q0 = k0; q0 < args.seq; q0 += kTile) {
    __syncthreads();  // the previous query tile is no longer read
    StageQueryTile(args, tiles, q0);
    float p[kRowsPerWarp], ds[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int krow = warp * kRowsPerWarp + r;
      ProbAndGrad(args, tiles, lane, q0 + lane, krow, k0 + krow, p[r], ds[r]);
    }
    const int queries = min(kTile, args.seq - q0);
    for (int i = 0; i < queries; ++i) {
      float q[kChunks], g[kChunks];
#pragma unroll
      for (int k = 0; k < kChunks; ++k) {
        const int d = lane + k * kWarp;
        q[k] = d < args.head_dim ? tiles.q[i * tiles.stride + d] : 0.0f;
        g[k] = d < args.head_dim ? tiles.dout[i * tiles.stride + d] : 0.0f;
      }
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float pi = __shfl_sync(0xffffffffu, p[r], i);
        const float dsi = __shfl_sync(0xffffffffu, ds[r], i);
#pragma unroll
        for (int k = 0; k < kChunks; ++k) {
          dv[r][k] = fmaf(pi, g[k], dv[r][k]);
          dk[r][k] = fmaf(dsi, q[k], dk[r][k]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int key = k0 + warp * kRowsPerWarp + r;
    if (key >= args.seq) continue;
    const int64_t row = (tiles.b * args.seq + key) * 3 * args.channels + tiles.h * args.head_dim;
    AddRow<kChunks>(args, row + args.channels, dk[r], args.scale);
    AddRow<kChunks>(args, row + 2 * args.channels, dv[r], 1.0f);
  }
}

// Query block: owns query tile q0 (Q, dO, lse, Delta staged once) and streams the key tiles at or
// before it: dQ += scale dS K.
template <int kChunks>
__device__ void QueryBlock(const BackwardArgs& args, const HeadTiles& tiles, int q0) {
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int q_end = min(q0 + kTile, args.seq);
  StageQueryTile(args, tiles, q0);
  float dq[kRowsPerWarp][kChunks];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int k = 0; k < kChunks; ++k) dq[r][k] = 0.0f;
  }
  // Packed documents: from the key tile holding the first query's document start.
  const int first_tile = args.segment_starts == nullptr
                             ? 0
                             : args.segment_starts[tiles.b * args.seq + q0] / kTile * kTile;
  for (int k0 = first_tile; k0 < q_end; k0 += kTile) {
    __syncthreads();  // the previous key tile is no longer read
    StageTile(tiles.k_rows, k0, args.seq, args.head_dim, tiles.k, tiles.stride);
    StageTile(tiles.v_rows, k0, args.seq, args.head_dim, tiles.v, tiles.stride);
    __syncthreads();
    float ds[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int qrow = warp * kRowsPerWarp + r;
      float p;
      ProbAndGrad(args, tiles, qrow, q0 + qrow, lane, k0 + lane, p, ds[r]);
    }
    const int keys = min(kTile, q_end - k0);
    for (int j = 0; j < keys; ++j) {
      float key[kChunks];
#pragma unroll
      for (int k = 0; k < kChunks; ++k) {
        const int d = lane + k * kWarp;
        key[k] = d < args.head_dim ? tiles.k[j * tiles.stride + d] : 0.0f;
      }
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float dsj = __shfl_sync(0xffffffffu, ds[r], j);
#pragma unroll
        for (int k = 0; k < kChunks; ++k) dq[r][k] = fmaf(dsj, key[k], dq[r][k]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int t = q0 + warp * kRowsPerWarp + r;
    if (t >= args.seq) continue;
    const int64_t row = (tiles.b * args.seq + t) * 3 * args.channels + tiles.h * args.head_dim;
    AddRow<kChunks>(args, row, dq[r], args.scale);
  }
}

// 2 * tiles blocks per (b, h): key blocks and query blocks interleaved, heaviest first (key tile
// j streams tiles - j query tiles, query tile i streams i + 1 key tiles). dQ is written only by
// query blocks and dK, dV only by key blocks, so no two blocks touch one element.
template <int kChunks>
__global__ void __launch_bounds__(kThreads) FlashBackwardKernel(BackwardArgs args) {
  extern __shared__ float shared[];
  HeadTiles tiles;
  tiles.stride = TileStride(args.head_dim);
  tiles.q = shared;
  tiles.dout = tiles.q + kTile * tiles.stride;
  tiles.k = tiles.dout + kTile * tiles.stride;
  tiles.v = tiles.k + kTile * tiles.stride;
  tiles.lse = tiles.v + kTile * tiles.stride;
  tiles.delta = tiles.lse + kTile;

  const int64_t rank = blockIdx.x / args.batch_heads;  // 0 .. 2 * tiles - 1
  tiles.bh = blockIdx.x % args.batch_heads;
  tiles.b = tiles.bh / args.heads;
  tiles.h = tiles.bh % args.heads;
  const int64_t qkv_base = tiles.b * args.seq * 3 * args.channels + tiles.h * args.head_dim;
  tiles.q_rows = {args.qkv, args.qkv_dtype, qkv_base, 3 * args.channels};
  tiles.k_rows = {args.qkv, args.qkv_dtype, qkv_base + args.channels, 3 * args.channels};
  tiles.v_rows = {args.qkv, args.qkv_dtype, qkv_base + 2 * args.channels, 3 * args.channels};
  tiles.dout_rows = {args.dout, args.dout_dtype,
                     tiles.b * args.seq * args.channels + tiles.h * args.head_dim, args.channels};
  if (rank % 2 == 0) {
    KeyBlock<kChunks>(args, tiles, static_cast<int>(rank / 2) * kTile);
  } else {
    QueryBlock<kChunks>(args, tiles, static_cast<int>(args.tiles - 1 - rank / 2) * kTile);
  }
}

// ---- Launch helpers

// Chunks of 32 head dimensions per lane (1, 2, 4 or 8) for head_dim <= kFlashMaxHeadDim.
int Chunks(int head_dim) {
  const int chunks = (head_dim + kWarp - 1) / kWarp;
  return chunks <= 1 ? 1 : chunks <= 2 ? 2 : chunks <= 4 ? 4 : 8;
}

// Launches kernel<<<blocks, kThreads, shared_bytes>>>, first raising its dynamic shared-memory
// limit when it needs more than the default 48 KiB (fails, with CUDA's message, on a GPU that
// can't give that much).
template <typename... Params, typename... Args>
void LaunchWithShared(void (*kernel)(Params...), int64_t blocks, size_t shared_bytes,
                      cudaStream_t stream, Args... args) {
  if (shared_bytes > (size_t{48} << 10)) {
    BATON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(shared_bytes)));
  }
  kernel<<<static_cast<unsigned>(blocks), kThreads, shared_bytes, stream>>>(args...);
  BATON_CUDA_CHECK_LAUNCH();
}

}  // namespace

void LaunchFlashAttentionForward(const void* qkv, const int32_t* segment_starts, DType qkv_dtype,
                                 void* out, DType out_dtype, float* lse, int64_t batch, int64_t seq,
                                 int64_t channels, int64_t heads, cudaStream_t stream) {
  if (batch * seq == 0) return;
  const int64_t tiles = (seq + kTile - 1) / kTile;
  const int64_t blocks = FlashForwardBlocks(batch, seq, heads);
  const int head_dim = static_cast<int>(channels / heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const size_t shared_bytes = sizeof(float) * 3 * kTile * TileStride(head_dim);
  const auto launch = [&](auto kernel) {
    LaunchWithShared(kernel, blocks, shared_bytes, stream, qkv, segment_starts, qkv_dtype, out,
                     out_dtype, lse, static_cast<int>(seq), channels, static_cast<int>(heads),
                     head_dim, tiles, batch * heads, scale);
  };
  switch (Chunks(head_dim)) {
    case 1:
      return launch(FlashForwardKernel<1>);
    case 2:
      return launch(FlashForwardKernel<2>);
    case 4:
      return launch(FlashForwardKernel<4>);
    default:
      return launch(FlashForwardKernel<8>);
  }
}

void LaunchFlashAttentionBackward(const void* dout, DType dout_dtype, const void* qkv,
                                  const int32_t* segment_starts, DType qkv_dtype, const void* out,
                                  DType out_dtype, const float* lse, void* dqkv, DType dqkv_dtype,
                                  int64_t batch, int64_t seq, int64_t channels, int64_t heads,
                                  cudaStream_t stream) {
  if (batch * seq == 0) return;
  const int64_t tiles = (seq + kTile - 1) / kTile;
  const int64_t blocks = FlashBackwardBlocks(batch, seq, heads);
  BackwardArgs args;
  args.dout = dout;
  args.dout_dtype = dout_dtype;
  args.qkv = qkv;
  args.qkv_dtype = qkv_dtype;
  args.out = out;
  args.out_dtype = out_dtype;
  args.lse = lse;
  args.dqkv = dqkv;
  args.dqkv_dtype = dqkv_dtype;
  args.segment_starts = segment_starts;
  args.seq = static_cast<int>(seq);
  args.channels = channels;
  args.heads = static_cast<int>(heads);
  args.head_dim = static_cast<int>(channels / heads);
  args.tiles = tiles;
  args.batch_heads = batch * heads;
  args.scale = 1.0f / std::sqrt(static_cast<float>(args.head_dim));
  const size_t shared_bytes = sizeof(float) * (4 * kTile * TileStride(args.head_dim) + 2 * kTile);
  switch (Chunks(args.head_dim)) {
    case 1:
      return LaunchWithShared(FlashBackwardKernel<1>, blocks, shared_bytes, stream, args);
    case 2:
      return LaunchWithShared(FlashBackwardKernel<2>, blocks, shared_bytes, stream, args);
    case 4:
      return LaunchWithShared(FlashBackwardKernel<4>, blocks, shared_bytes, stream, args);
    default:
      return LaunchWithShared(FlashBackwardKernel<8>, blocks, shared_bytes, stream, args);
  }
}

}  // namespace baton::cuda
