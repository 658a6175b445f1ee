// CUDA kernels for the GPT layers other than attention's softmax and the loss: embedding
// forward/backward, column sums (bias and position gradients), LayerNorm forward/backward and
// tanh-GELU (see launch.h for the contracts).
//
// Cross-row sums (column sums, LayerNorm's dweight/dbias) are two-pass and deterministic: pass 1
// sums fixed chunks of kChunkRows rows per column (8 row-strided threads per column, combined in
// a fixed order), pass 2 adds the chunks' partials in chunk order. The token-embedding gradient
// radix-sorts rows by token (stable, so rows keep their order within a token) and sums each run.
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"

namespace baton::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kChunkRows = static_cast<int>(kColumnSumChunkRows);  // rows per partial
constexpr int kColumnTile = 32;  // columns per block in pass 1 (one per lane)
constexpr int kRowThreads = 8;   // row-strided threads per column in pass 1
constexpr float kLayerNormEps = 1e-5f;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// ---- embedding

__global__ void EmbeddingForwardKernel(const int32_t* tokens, const int32_t* segment_starts,
                                       const void* wte, DType wte_dtype, const void* wpe,
                                       DType wpe_dtype, void* out, DType out_dtype, int64_t seq,
                                       int64_t channels, VocabRows vocab, IdError* id_error) {
  const int64_t row = blockIdx.x;
  const int token = tokens[row];
  if (IsBadId(vocab, token)) {
    if (threadIdx.x == 0) RecordBadId(id_error, row, token, IdBound(vocab));
    return;
  }
  const int64_t local = LocalRow(vocab, token);  // -1: another rank's token, no token term
  // The position: t, or with packed documents t - its document's start.
  const int64_t t = row % seq - (segment_starts == nullptr ? 0 : segment_starts[row]);
  for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
    float value = local < 0 ? 0.0f : LoadF(wte, wte_dtype, local * channels + c);
    if (wpe != nullptr) {  // null: rotary positions (Llama), the token's row alone
      const float position = LoadF(wpe, wpe_dtype, t * channels + c);
      value = local < 0 ? position : value + position;
    }
    StoreF(out, out_dtype, row * channels + c, value);
  }
}

// positions[r] = r % seq - segment_starts[r]: each token's position within its document.
__global__ void PositionsKernel(const int32_t* segment_starts, int64_t rows, int64_t seq,
                                int32_t* positions) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < rows;
       i += int64_t{gridDim.x} * blockDim.x) {
    positions[i] = static_cast<int32_t>(i % seq) - segment_starts[i];
  }
}

__global__ void IotaKernel(int32_t* values, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    values[i] = static_cast<int32_t>(i);
  }
}

// Block (i, tile): if sorted position i starts a run of equal tokens, thread c sums dout over the
// run's rows (in row order) for channel tile*blockDim + c and adds the sum to the token's row of
// dwte (none when the token is another rank's).
__global__ void EmbeddingRunSumKernel(const int32_t* sorted_tokens, const int32_t* sorted_rows,
                                      const void* dout, DType dout_dtype, void* dwte,
                                      DType dwte_dtype, int64_t rows, int64_t channels,
                                      VocabRows vocab, IdError* id_error) {
  const int64_t i = blockIdx.x;
  const int token = sorted_tokens[i];
  if (i > 0 && sorted_tokens[i - 1] == token) return;  // not the start of a run
  if (IsBadId(vocab, token)) {
    if (threadIdx.x == 0 && blockIdx.y == 0) {
      RecordBadId(id_error, sorted_rows[i], token, IdBound(vocab));
    }
    return;
  }
  const int64_t local = LocalRow(vocab, token);
  if (local < 0) return;  // another rank's token
  const int64_t c = blockIdx.y * int64_t{blockDim.x} + threadIdx.x;
  if (c >= channels) return;
  float sum = 0.0f;
  for (int64_t j = i; j < rows && sorted_tokens[j] == token; ++j) {
    sum += LoadF(dout, dout_dtype, sorted_rows[j] * channels + c);
  }
  const int64_t target = local * channels + c;
  StoreF(dwte, dwte_dtype, target, LoadF(dwte, dwte_dtype, target) + sum);
}

// ---- column sums

__global__ void ColumnSumsPass1(const void* x, DType x_dtype, int64_t rows, int64_t cols,
                                float* partials) {
  __shared__ float shared[kRowThreads][kColumnTile];
  const int64_t c = blockIdx.x * int64_t{kColumnTile} + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t end = (chunk + 1) * kChunkRows < rows ? (chunk + 1) * kChunkRows : rows;
  float sum = 0.0f;
  if (c < cols) {
    for (int64_t r = chunk * kChunkRows + threadIdx.y; r < end; r += kRowThreads) {
      sum += LoadF(x, x_dtype, r * cols + c);
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

// acc[c] += sum over chunks (in order) of partials[chunk][c]; `outputs` partial sets one after
// the other (acc0 from the first, acc1 from the second).
__global__ void ColumnSumsPass2(const float* partials, int64_t chunks, int64_t cols, void* acc0,
                                DType acc0_dtype, void* acc1, DType acc1_dtype) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= cols) return;
  float sum0 = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) sum0 += partials[k * cols + c];
  StoreF(acc0, acc0_dtype, c, LoadF(acc0, acc0_dtype, c) + sum0);
  if (acc1 != nullptr) {
    const float* second = partials + chunks * cols;
    float sum1 = 0.0f;
    for (int64_t k = 0; k < chunks; ++k) sum1 += second[k * cols + c];
    StoreF(acc1, acc1_dtype, c, LoadF(acc1, acc1_dtype, c) + sum1);
  }
}

// ---- LayerNorm: one warp per row

__global__ void LayerNormForwardKernel(const void* x, DType x_dtype, const void* weight,
                                       DType weight_dtype, const void* bias, DType bias_dtype,
                                       void* out, DType out_dtype, float* mean, float* rstd,
                                       int64_t rows, int64_t cols) {
  const int64_t row = blockIdx.x * int64_t{blockDim.x / kWarp} + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const int64_t base = row * cols;
  float sum = 0.0f;
  for (int64_t c = lane; c < cols; c += kWarp) sum += LoadF(x, x_dtype, base + c);
  const float m = WarpSum(sum) / static_cast<float>(cols);
  float squares = 0.0f;
  for (int64_t c = lane; c < cols; c += kWarp) {
    const float d = LoadF(x, x_dtype, base + c) - m;
    squares += d * d;
  }
  const float s = rsqrtf(WarpSum(squares) / static_cast<float>(cols) + kLayerNormEps);
  for (int64_t c = lane; c < cols; c += kWarp) {
    const float norm = (LoadF(x, x_dtype, base + c) - m) * s;
    StoreF(out, out_dtype, base + c,
           norm * LoadF(weight, weight_dtype, c) + LoadF(bias, bias_dtype, c));
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

__global__ void LayerNormBackwardDxKernel(const void* dout, DType dout_dtype, const void* x,
                                          DType x_dtype, const void* weight, DType weight_dtype,
                                          const float* mean, const float* rstd, void* dx,
                                          DType dx_dtype, int64_t rows, int64_t cols) {
  const int64_t row = blockIdx.x * int64_t{blockDim.x / kWarp} + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const int64_t base = row * cols;
  const float m = mean[row];
  const float s = rstd[row];
  float dnorm_sum = 0.0f;
  float dnorm_norm_sum = 0.0f;
  for (int64_t c = lane; c < cols; c += kWarp) {
    const float dnorm = LoadF(weight, weight_dtype, c) * LoadF(dout, dout_dtype, base + c);
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * ((LoadF(x, x_dtype, base + c) - m) * s);
  }
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const float dnorm_mean = WarpSum(dnorm_sum) * inv_cols;
  const float dnorm_norm_mean = WarpSum(dnorm_norm_sum) * inv_cols;
  for (int64_t c = lane; c < cols; c += kWarp) {
    const float norm = (LoadF(x, x_dtype, base + c) - m) * s;
    const float dnorm = LoadF(weight, weight_dtype, c) * LoadF(dout, dout_dtype, base + c);
    const float grad = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    StoreF(dx, dx_dtype, base + c, LoadF(dx, dx_dtype, base + c) + grad);
  }
}

// Pass 1 of dweight (sum dout * norm) and dbias (sum dout): partials[0..chunks) for dweight,
// then [chunks..2 chunks) for dbias.
__global__ void LayerNormParamGradPass1(const void* dout, DType dout_dtype, const void* x,
                                        DType x_dtype, const float* mean, const float* rstd,
                                        int64_t rows, int64_t cols, float* partials) {
  __shared__ float shared_w[kRowThreads][kColumnTile];
  __shared__ float shared_b[kRowThreads][kColumnTile];
  const int64_t c = blockIdx.x * int64_t{kColumnTile} + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t chunks = gridDim.y;
  const int64_t end = (chunk + 1) * kChunkRows < rows ? (chunk + 1) * kChunkRows : rows;
  float sum_w = 0.0f;
  float sum_b = 0.0f;
  if (c < cols) {
    for (int64_t r = chunk * kChunkRows + threadIdx.y; r < end; r += kRowThreads) {
      const float d = LoadF(dout, dout_dtype, r * cols + c);
      sum_w += d * ((LoadF(x, x_dtype, r * cols + c) - mean[r]) * rstd[r]);
      sum_b += d;
    }
  }
  shared_w[threadIdx.y][threadIdx.x] = sum_w;
  shared_b[threadIdx.y][threadIdx.x] = sum_b;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total_w = shared_w[0][threadIdx.x];
    float total_b = shared_b[0][threadIdx.x];
    for (int y = 1; y < kRowThreads; ++y) {
      total_w += shared_w[y][threadIdx.x];
      total_b += shared_b[y][threadIdx.x];
    }
    partials[chunk * cols + c] = total_w;
    partials[(chunks + chunk) * cols + c] = total_b;
  }
}

// ---- GELU: x sigmoid(2y) = 0.5 x (1 + tanh y), y = sqrt(2/pi) (x + 0.044715 x^3)

__global__ void GeluForwardKernel(const void* x, DType x_dtype, void* out, DType out_dtype,
                                  int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = LoadF(x, x_dtype, i);
    const float y = kGeluScale * (v + kGeluCubic * v * v * v);
    StoreF(out, out_dtype, i, v / (1.0f + expf(-2.0f * y)));
  }
}

__global__ void GeluBackwardKernel(const void* x, DType x_dtype, const void* dout, DType dout_dtype,
                                   void* dx, DType dx_dtype, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = LoadF(x, x_dtype, i);
    const float y = kGeluScale * (v + kGeluCubic * v * v * v);
    const float s = 1.0f / (1.0f + expf(-2.0f * y));
    const float dy = kGeluScale * (1.0f + 3.0f * kGeluCubic * v * v);
    const float grad = s + 2.0f * v * s * (1.0f - s) * dy;
    StoreF(dx, dx_dtype, i, LoadF(dx, dx_dtype, i) + grad * LoadF(dout, dout_dtype, i));
  }
}

// Sorted keys and values (4 int32 arrays of `rows`) followed by cub's temporary storage.
struct SortBuffers {
  int32_t* keys_out;
  int32_t* values_in;
  int32_t* values_out;
  void* temp;
  size_t temp_bytes;
};

size_t SortTempBytes(int64_t rows) {
  size_t bytes = 0;
  BATON_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<int32_t*>(nullptr), static_cast<int32_t*>(nullptr), static_cast<int>(rows)));
  return bytes;
}

size_t Align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

SortBuffers CarveSortBuffers(void* workspace, int64_t rows) {
  char* p = static_cast<char*>(workspace);
  const size_t array = Align256(static_cast<size_t>(rows) * sizeof(int32_t));
  SortBuffers b;
  b.keys_out = reinterpret_cast<int32_t*>(p);
  b.values_in = reinterpret_cast<int32_t*>(p + array);
  b.values_out = reinterpret_cast<int32_t*>(p + 2 * array);
  b.temp = p + 3 * array;
  b.temp_bytes = SortTempBytes(rows);
  return b;
}

}  // namespace

void LaunchEmbeddingForward(const int32_t* tokens, const int32_t* segment_starts, const void* wte,
                            DType wte_dtype, const void* wpe, DType wpe_dtype, void* out,
                            DType out_dtype, int64_t batch, int64_t seq, int64_t channels,
                            VocabRows vocab, IdError* id_error, cudaStream_t stream) {
  const int64_t rows = batch * seq;
  if (rows == 0 || channels == 0) return;
  EmbeddingForwardKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      tokens, segment_starts, wte, wte_dtype, wpe, wpe_dtype, out, out_dtype, seq, channels, vocab,
      id_error);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchPositions(const int32_t* segment_starts, int64_t rows, int64_t seq, int32_t* positions,
                     cudaStream_t stream) {
  if (rows == 0) return;
  PositionsKernel<<<GridFor(rows, kThreads), kThreads, 0, stream>>>(segment_starts, rows, seq,
                                                                    positions);
  BATON_CUDA_CHECK_LAUNCH();
}

size_t EmbeddingBackwardWorkspaceBytes(int64_t rows) {
  return 3 * Align256(static_cast<size_t>(rows) * sizeof(int32_t)) + SortTempBytes(rows);
}

void LaunchEmbeddingBackwardTokens(const int32_t* tokens, const void* dout, DType dout_dtype,
                                   void* dwte, DType dwte_dtype, int64_t rows, int64_t channels,
                                   VocabRows vocab, void* workspace, size_t workspace_bytes,
                                   IdError* id_error, cudaStream_t stream) {
  if (rows == 0 || channels == 0) return;
  if (workspace_bytes < EmbeddingBackwardWorkspaceBytes(rows)) {
    ThrowCudaError(cudaErrorInvalidValue, "LaunchEmbeddingBackwardTokens: workspace too small",
                   __FILE__, __LINE__);
  }
  SortBuffers b = CarveSortBuffers(workspace, rows);
  IotaKernel<<<GridFor(rows, kThreads), kThreads, 0, stream>>>(b.values_in, rows);
  BATON_CUDA_CHECK_LAUNCH();
  // All 32 key bits, so that out-of-range ids sort apart from every valid token.
  BATON_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(b.temp, b.temp_bytes, tokens, b.keys_out,
                                                   b.values_in, b.values_out,
                                                   static_cast<int>(rows), 0, 32, stream));
  const dim3 grid(static_cast<unsigned>(rows),
                  static_cast<unsigned>((channels + kThreads - 1) / kThreads));
  EmbeddingRunSumKernel<<<grid, kThreads, 0, stream>>>(b.keys_out, b.values_out, dout, dout_dtype,
                                                       dwte, dwte_dtype, rows, channels, vocab,
                                                       id_error);
  BATON_CUDA_CHECK_LAUNCH();
}

int64_t ColumnSumsPartials(int64_t rows, int64_t cols) { return ColumnSumChunks(rows) * cols; }

void LaunchColumnSums(const void* x, DType x_dtype, int64_t rows, int64_t cols, float* partials,
                      void* acc, DType acc_dtype, cudaStream_t stream) {
  if (cols == 0 || rows == 0) return;
  const int64_t chunks = ColumnSumChunks(rows);
  const dim3 grid(static_cast<unsigned>((cols + kColumnTile - 1) / kColumnTile),
                  static_cast<unsigned>(chunks));
  ColumnSumsPass1<<<grid, dim3(kColumnTile, kRowThreads), 0, stream>>>(x, x_dtype, rows, cols,
                                                                       partials);
  BATON_CUDA_CHECK_LAUNCH();
  LaunchAddColumnPartials(partials, chunks, cols, acc, acc_dtype, stream);
}

void LaunchAddColumnPartials(const float* partials, int64_t chunks, int64_t cols, void* acc,
                             DType acc_dtype, cudaStream_t stream) {
  if (cols == 0) return;
  ColumnSumsPass2<<<GridFor(cols, kThreads), kThreads, 0, stream>>>(partials, chunks, cols, acc,
                                                                    acc_dtype, nullptr, acc_dtype);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchLayerNormForward(const void* x, DType x_dtype, const void* weight, DType weight_dtype,
                            const void* bias, DType bias_dtype, void* out, DType out_dtype,
                            float* mean, float* rstd, int64_t rows, int64_t cols,
                            cudaStream_t stream) {
  if (rows == 0) return;
  const int rows_per_block = kThreads / kWarp;
  const auto blocks = static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
  LayerNormForwardKernel<<<blocks, kThreads, 0, stream>>>(
      x, x_dtype, weight, weight_dtype, bias, bias_dtype, out, out_dtype, mean, rstd, rows, cols);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchLayerNormBackward(const void* dout, DType dout_dtype, const void* x, DType x_dtype,
                             const void* weight, DType weight_dtype, const float* mean,
                             const float* rstd, void* dx, DType dx_dtype, void* dweight,
                             DType dweight_dtype, void* dbias, DType dbias_dtype, float* partials,
                             int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const int rows_per_block = kThreads / kWarp;
  const auto blocks = static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
  LayerNormBackwardDxKernel<<<blocks, kThreads, 0, stream>>>(
      dout, dout_dtype, x, x_dtype, weight, weight_dtype, mean, rstd, dx, dx_dtype, rows, cols);
  BATON_CUDA_CHECK_LAUNCH();
  const int64_t chunks = ColumnSumChunks(rows);
  const dim3 grid(static_cast<unsigned>((cols + kColumnTile - 1) / kColumnTile),
                  static_cast<unsigned>(chunks));
  LayerNormParamGradPass1<<<grid, dim3(kColumnTile, kRowThreads), 0, stream>>>(
      dout, dout_dtype, x, x_dtype, mean, rstd, rows, cols, partials);
  BATON_CUDA_CHECK_LAUNCH();
  ColumnSumsPass2<<<GridFor(cols, kThreads), kThreads, 0, stream>>>(
      partials, chunks, cols, dweight, dweight_dtype, dbias, dbias_dtype);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchGeluForward(const void* x, DType x_dtype, void* out, DType out_dtype, int64_t n,
                       cudaStream_t stream) {
  if (n == 0) return;
  GeluForwardKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(x, x_dtype, out, out_dtype, n);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchGeluBackward(const void* x, DType x_dtype, const void* dout, DType dout_dtype, void* dx,
                        DType dx_dtype, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  GeluBackwardKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(x, x_dtype, dout, dout_dtype,
                                                                    dx, dx_dtype, n);
  BATON_CUDA_CHECK_LAUNCH();
}

}  // namespace baton::cuda
