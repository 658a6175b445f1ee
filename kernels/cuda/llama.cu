// CUDA kernels for the Llama layers: RMSNorm forward/backward, SwiGLU forward/backward, rotary
// position embeddings and grouped-query attention's key/value repeat (see launch.h for the
// contracts, kernels/backend.h for the semantics).
//
// Each follows the CPU backend's f32 operation order (kernels/cpu/llama_kernels.cc) where that
// order matters; the remaining differences are the summation tree of the row reductions (warp
// shuffles here, a sequential double sum there) and libm's last bits (expf, sincosf).
// RMSNorm's dweight is two-pass and atomics-free like LayerNorm's (layers.cu): fixed chunks of
// kColumnSumChunkRows rows, then the chunks' partials in chunk order.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"

namespace baton::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kColumnTile = 32;  // columns per block in dweight's pass 1 (one per lane)
constexpr int kRowThreads = 8;   // row-strided threads per column in pass 1

// ---- RMSNorm: one warp per row

__global__ void RmsNormForwardKernel(const void* x, DType x_dtype, const void* weight,
                                     DType weight_dtype, float eps, void* out, DType out_dtype,
                                     float* rstd, int64_t rows, int64_t cols) {
  const int64_t row = blockIdx.x * int64_t{blockDim.x / kWarp} + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;  // the whole warp: rows are per warp
  const int64_t base = row * cols;
  float squares = 0.0f;
  for (int64_t c = lane; c < cols; c += kWarp) {
    const float v = LoadF(x, x_dtype, base + c);
    squares += v * v;
  }
  const float s = 1.0f / sqrtf(WarpSum(squares) / static_cast<float>(cols) + eps);
  for (int64_t c = lane; c < cols; c += kWarp) {
    // Hugging Face's order: (x * rstd), then * weight.
    StoreF(out, out_dtype, base + c,
           (LoadF(x, x_dtype, base + c) * s) * LoadF(weight, weight_dtype, c));
  }
  if (lane == 0) rstd[row] = s;
}

// y = x s w with s = (mean(x^2) + eps)^-1/2: dx += s (w dy) - x s^3 / C * sum(w dy x).
__global__ void RmsNormBackwardDxKernel(const void* dout, DType dout_dtype, const void* x,
                                        DType x_dtype, const void* weight, DType weight_dtype,
                                        const float* rstd, void* dx, DType dx_dtype, int64_t rows,
                                        int64_t cols) {
  const int64_t row = blockIdx.x * int64_t{blockDim.x / kWarp} + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const int64_t base = row * cols;
  const float s = rstd[row];
  float dot = 0.0f;
  for (int64_t c = lane; c < cols; c += kWarp) {
    dot += (LoadF(weight, weight_dtype, c) * LoadF(dout, dout_dtype, base + c)) *
           LoadF(x, x_dtype, base + c);
  }
  const float k = WarpSum(dot) / static_cast<float>(cols) * s * s * s;
  for (int64_t c = lane; c < cols; c += kWarp) {
    const float wdy = LoadF(weight, weight_dtype, c) * LoadF(dout, dout_dtype, base + c);
    const float grad = s * wdy - LoadF(x, x_dtype, base + c) * k;
    StoreF(dx, dx_dtype, base + c, LoadF(dx, dx_dtype, base + c) + grad);
  }
}

// Pass 1 of dweight: partials[chunk][c] = sum over the chunk's rows of dout * (x * rstd), each
// column summed by kRowThreads row-strided threads combined in thread order.
__global__ void RmsNormWeightGradPass1(const void* dout, DType dout_dtype, const void* x,
                                       DType x_dtype, const float* rstd, int64_t rows, int64_t cols,
                                       float* partials) {
  __shared__ float shared[kRowThreads][kColumnTile];
  const int64_t c = blockIdx.x * int64_t{kColumnTile} + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t begin = chunk * kColumnSumChunkRows;
  const int64_t end = begin + kColumnSumChunkRows < rows ? begin + kColumnSumChunkRows : rows;
  float sum = 0.0f;
  if (c < cols) {
    for (int64_t r = begin + threadIdx.y; r < end; r += kRowThreads) {
      sum += LoadF(dout, dout_dtype, r * cols + c) * (LoadF(x, x_dtype, r * cols + c) * rstd[r]);
    }
  }
  shared[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = shared[0][threadIdx.x];
    for (int y = 1; y < kRowThreads; ++y) total += shared[y][threadIdx.x];
    partials[chunk * cols + c] = total;
  }
}

// ---- SwiGLU: one thread per output element; gate_up rows hold the gate, then the up projection

__device__ __forceinline__ float Sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

__global__ void SwiGluForwardKernel(const void* gate_up, DType gate_up_dtype, void* out,
                                    DType out_dtype, int64_t rows, int64_t hidden) {
  const int64_t n = rows * hidden;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / hidden;
    const int64_t gate_index = i + row * hidden;  // row * 2 hidden + column
    const float g = LoadF(gate_up, gate_up_dtype, gate_index);
    const float up = LoadF(gate_up, gate_up_dtype, gate_index + hidden);
    StoreF(out, out_dtype, i, g * Sigmoid(g) * up);
  }
}

__global__ void SwiGluBackwardKernel(const void* gate_up, DType gate_up_dtype, const void* dout,
                                     DType dout_dtype, void* dgate_up, DType dgate_up_dtype,
                                     int64_t rows, int64_t hidden) {
  const int64_t n = rows * hidden;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / hidden;
    const int64_t gate_index = i + row * hidden;
    const int64_t up_index = gate_index + hidden;
    const float g = LoadF(gate_up, gate_up_dtype, gate_index);
    const float up = LoadF(gate_up, gate_up_dtype, up_index);
    const float d = LoadF(dout, dout_dtype, i);
    const float sig = Sigmoid(g);
    // silu'(g) = sig (1 + g (1 - sig))
    const float dgate = d * up * (sig * (1.0f + g * (1.0f - sig)));
    const float dup = d * (g * sig);
    StoreF(dgate_up, dgate_up_dtype, gate_index,
           LoadF(dgate_up, dgate_up_dtype, gate_index) + dgate);
    StoreF(dgate_up, dgate_up_dtype, up_index, LoadF(dgate_up, dgate_up_dtype, up_index) + dup);
  }
}

// ---- rotary embeddings: one block per row (grid-strided); the row's cos and sin per frequency
// are formed once in shared memory, then every (head, pair) of the row is turned.

__global__ void RotaryEmbeddingKernel(void* qkv, DType dtype, const int32_t* segment_starts,
                                      int64_t start, int64_t rows, int64_t seq,
                                      int64_t row_elements, int64_t heads, int64_t head_dim,
                                      const RopeFrequencies frequencies, bool inverse) {
  __shared__ float cosines[kRopeMaxHeadDim / 2];
  __shared__ float sines[kRopeMaxHeadDim / 2];
  const int64_t half = head_dim / 2;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t t = row % seq;
    const int64_t position = segment_starts != nullptr ? t - segment_starts[row] : start + t;
    __syncthreads();  // the previous row's turns have read the tables
    for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
      // HF's angle: float(position) * inv_freq in f32, then its cos and sin in f32.
      const float angle = static_cast<float>(position) * frequencies.inv_freq[i];
      float sine, cosine;
      sincosf(angle, &sine, &cosine);
      cosines[i] = cosine;
      sines[i] = inverse ? -sine : sine;
    }
    __syncthreads();
    const int64_t base = row * row_elements;
    for (int64_t k = threadIdx.x; k < heads * half; k += blockDim.x) {
      const int64_t head = k / half;
      const int64_t i = k - head * half;
      const int64_t first = base + head * head_dim + i;
      const int64_t second = first + half;
      const float x1 = LoadF(qkv, dtype, first);
      const float x2 = LoadF(qkv, dtype, second);
      StoreF(qkv, dtype, first, x1 * cosines[i] - x2 * sines[i]);
      StoreF(qkv, dtype, second, x2 * cosines[i] + x1 * sines[i]);
    }
  }
}

// ---- grouped-query attention's key/value repeat

// The qkv column that out's column `col` (of 3 NH D) copies: queries as they are, then for the
// keys (part 1) and values (part 2) query head h's slice of key/value head h / group.
__device__ __forceinline__ int64_t RepeatSource(int64_t col, int64_t query_columns,
                                                int64_t kv_columns, int64_t head_dim,
                                                int64_t group) {
  const int64_t part = col / query_columns;
  if (part == 0) return col;
  const int64_t within = col - part * query_columns;
  const int64_t head = within / head_dim;
  return query_columns + (part - 1) * kv_columns + (head / group) * head_dim +
         (within - head * head_dim);
}

// Elements of T bits: the same dtype on both sides, so a plain copy.
template <typename T>
__global__ void RepeatKvKernel(const T* qkv, T* out, int64_t rows, int64_t query_heads,
                               int64_t kv_heads, int64_t head_dim) {
  const int64_t query_columns = query_heads * head_dim, kv_columns = kv_heads * head_dim;
  const int64_t in_cols = query_columns + 2 * kv_columns, out_cols = 3 * query_columns;
  const int64_t group = query_heads / kv_heads;
  const int64_t n = rows * out_cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / out_cols;
    const int64_t col = i - row * out_cols;
    out[i] = qkv[row * in_cols + RepeatSource(col, query_columns, kv_columns, head_dim, group)];
  }
}

// One thread per element of dqkv: a query takes dout's element; a key/value element sums its
// group's query heads in head order.
__global__ void RepeatKvBackwardKernel(const void* dout, DType dout_dtype, void* dqkv,
                                       DType dqkv_dtype, int64_t rows, int64_t query_heads,
                                       int64_t kv_heads, int64_t head_dim) {
  const int64_t query_columns = query_heads * head_dim, kv_columns = kv_heads * head_dim;
  const int64_t in_cols = query_columns + 2 * kv_columns, out_cols = 3 * query_columns;
  const int64_t group = query_heads / kv_heads;
  const int64_t n = rows * in_cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / in_cols;
    const int64_t col = i - row * in_cols;
    const int64_t dout_row = row * out_cols;
    float add;
    if (col < query_columns) {
      add = LoadF(dout, dout_dtype, dout_row + col);
    } else {
      const int64_t kv_col = col - query_columns;
      const int64_t part = 1 + kv_col / kv_columns;  // 1 keys, 2 values
      const int64_t within = kv_col - (part - 1) * kv_columns;
      const int64_t kv_head = within / head_dim;
      const int64_t d = within - kv_head * head_dim;
      const int64_t first = dout_row + part * query_columns + kv_head * group * head_dim + d;
      add = 0.0f;
      for (int64_t h = 0; h < group; ++h) add += LoadF(dout, dout_dtype, first + h * head_dim);
    }
    StoreF(dqkv, dqkv_dtype, i, LoadF(dqkv, dqkv_dtype, i) + add);
  }
}

unsigned WarpRowBlocks(int64_t rows) {
  const int rows_per_block = kThreads / kWarp;
  return static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
}

}  // namespace

void LaunchRmsNormForward(const void* x, DType x_dtype, const void* weight, DType weight_dtype,
                          float eps, void* out, DType out_dtype, float* rstd, int64_t rows,
                          int64_t cols, cudaStream_t stream) {
  if (rows == 0) return;
  RmsNormForwardKernel<<<WarpRowBlocks(rows), kThreads, 0, stream>>>(
      x, x_dtype, weight, weight_dtype, eps, out, out_dtype, rstd, rows, cols);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchRmsNormBackward(const void* dout, DType dout_dtype, const void* x, DType x_dtype,
                           const void* weight, DType weight_dtype, const float* rstd, void* dx,
                           DType dx_dtype, void* dweight, DType dweight_dtype, float* partials,
                           int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  RmsNormBackwardDxKernel<<<WarpRowBlocks(rows), kThreads, 0, stream>>>(
      dout, dout_dtype, x, x_dtype, weight, weight_dtype, rstd, dx, dx_dtype, rows, cols);
  BATON_CUDA_CHECK_LAUNCH();
  const int64_t chunks = ColumnSumChunks(rows);
  const dim3 grid(static_cast<unsigned>((cols + kColumnTile - 1) / kColumnTile),
                  static_cast<unsigned>(chunks));
  RmsNormWeightGradPass1<<<grid, dim3(kColumnTile, kRowThreads), 0, stream>>>(
      dout, dout_dtype, x, x_dtype, rstd, rows, cols, partials);
  BATON_CUDA_CHECK_LAUNCH();
  LaunchAddColumnPartials(partials, chunks, cols, dweight, dweight_dtype, stream);
}

void LaunchSwiGluForward(const void* gate_up, DType gate_up_dtype, void* out, DType out_dtype,
                         int64_t rows, int64_t hidden, cudaStream_t stream) {
  const int64_t n = rows * hidden;
  if (n == 0) return;
  SwiGluForwardKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(gate_up, gate_up_dtype, out,
                                                                     out_dtype, rows, hidden);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchSwiGluBackward(const void* gate_up, DType gate_up_dtype, const void* dout,
                          DType dout_dtype, void* dgate_up, DType dgate_up_dtype, int64_t rows,
                          int64_t hidden, cudaStream_t stream) {
  const int64_t n = rows * hidden;
  if (n == 0) return;
  SwiGluBackwardKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(
      gate_up, gate_up_dtype, dout, dout_dtype, dgate_up, dgate_up_dtype, rows, hidden);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchRotaryEmbedding(void* qkv, DType dtype, const int32_t* segment_starts, int64_t start,
                           int64_t batch, int64_t seq, int64_t row_elements, int64_t heads,
                           int64_t head_dim, const RopeFrequencies& frequencies, bool inverse,
                           cudaStream_t stream) {
  const int64_t rows = batch * seq;
  if (rows == 0 || heads * head_dim == 0) return;
  if (head_dim > kRopeMaxHeadDim || head_dim % 2 != 0) {
    ThrowCudaError(cudaErrorInvalidValue, "LaunchRotaryEmbedding: unsupported head size", __FILE__,
                   __LINE__);
  }
  RotaryEmbeddingKernel<<<GridFor(rows, 1), kThreads, 0, stream>>>(
      qkv, dtype, segment_starts, start, rows, seq, row_elements, heads, head_dim, frequencies,
      inverse);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchRepeatKv(const void* qkv, void* out, DType dtype, int64_t rows, int64_t query_heads,
                    int64_t kv_heads, int64_t head_dim, cudaStream_t stream) {
  const int64_t n = rows * 3 * query_heads * head_dim;
  if (n == 0) return;
  const unsigned blocks = GridFor(n, kThreads);
  if (SizeOf(dtype) == 4) {
    RepeatKvKernel<<<blocks, kThreads, 0, stream>>>(static_cast<const uint32_t*>(qkv),
                                                    static_cast<uint32_t*>(out), rows, query_heads,
                                                    kv_heads, head_dim);
  } else {
    RepeatKvKernel<<<blocks, kThreads, 0, stream>>>(static_cast<const uint16_t*>(qkv),
                                                    static_cast<uint16_t*>(out), rows, query_heads,
                                                    kv_heads, head_dim);
  }
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchRepeatKvBackward(const void* dout, DType dout_dtype, void* dqkv, DType dqkv_dtype,
                            int64_t rows, int64_t query_heads, int64_t kv_heads, int64_t head_dim,
                            cudaStream_t stream) {
  const int64_t n = rows * (query_heads + 2 * kv_heads) * head_dim;
  if (n == 0) return;
  RepeatKvBackwardKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(
      dout, dout_dtype, dqkv, dqkv_dtype, rows, query_heads, kv_heads, head_dim);
  BATON_CUDA_CHECK_LAUNCH();
}

}  // namespace baton::cuda
