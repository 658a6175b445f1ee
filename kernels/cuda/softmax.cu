// CUDA kernels for the two softmaxes: attention's causal softmax (forward and backward, one warp
// per row of probabilities) and the cross-entropy loss (one block per row of logits, the mean
// over rows taken by one block in row order). See launch.h for the contracts.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"

namespace baton::cuda {
namespace {

constexpr int kSoftmaxThreads = 256;  // 8 rows per block
constexpr int kRowThreads = 512;      // cross-entropy: threads per row of logits

// The first key query row `row` sees: its document's start with packed documents (segment_starts
// (B,T), rows_per_batch = NH*T rows of scores per batch element), else 0.
__device__ __forceinline__ int64_t FirstKey(const int32_t* segment_starts, int64_t row,
                                            int64_t rows_per_batch, int64_t seq) {
  if (segment_starts == nullptr) return 0;
  return segment_starts[row / rows_per_batch * seq + row % seq];
}

__global__ void CausalSoftmaxKernel(float* scores, int64_t rows, int64_t seq,
                                    const int32_t* segment_starts, int64_t rows_per_batch,
                                    void* copy, DType copy_dtype) {
  const int64_t row = blockIdx.x * int64_t{blockDim.x / kWarp} + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const int64_t t = row % seq;  // the query position: keys [first, t] are visible
  const int64_t first = FirstKey(segment_starts, row, rows_per_batch, seq);
  float* p = scores + row * seq;
  float max = -INFINITY;
  for (int64_t s = first + lane; s <= t; s += kWarp) max = fmaxf(max, p[s]);
  max = WarpMax(max);
  float sum = 0.0f;
  for (int64_t s = first + lane; s <= t; s += kWarp) {
    const float e = expf(p[s] - max);
    p[s] = e;
    sum += e;
  }
  const float inv_sum = 1.0f / WarpSum(sum);
  for (int64_t s = lane; s < seq; s += kWarp) {
    const float value = s >= first && s <= t ? p[s] * inv_sum : 0.0f;
    p[s] = value;
    if (copy != nullptr) StoreF(copy, copy_dtype, row * seq + s, value);
  }
}

__global__ void CausalSoftmaxBackwardKernel(const float* probs, float* dprobs, int64_t rows,
                                            int64_t seq, const int32_t* segment_starts,
                                            int64_t rows_per_batch, float scale, void* ds_copy,
                                            void* probs_copy, DType copy_dtype) {
  const int64_t row = blockIdx.x * int64_t{blockDim.x / kWarp} + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const int64_t t = row % seq;
  const int64_t first = FirstKey(segment_starts, row, rows_per_batch, seq);
  const float* p = probs + row * seq;
  float* d = dprobs + row * seq;
  float dot = 0.0f;
  for (int64_t s = first + lane; s <= t; s += kWarp) dot += p[s] * d[s];
  dot = WarpSum(dot);
  for (int64_t s = lane; s < seq; s += kWarp) {
    const bool visible = s >= first && s <= t;
    const float ds = visible ? scale * p[s] * (d[s] - dot) : 0.0f;
    d[s] = ds;
    if (ds_copy != nullptr) StoreF(ds_copy, copy_dtype, row * seq + s, ds);
    if (probs_copy != nullptr) StoreF(probs_copy, copy_dtype, row * seq + s, visible ? p[s] : 0.0f);
  }
}

// One block: the max of a row of logits (vocab columns from base) and the sum of exp(x - max),
// every thread getting both; every thread's reads are done before it returns.
__device__ float2 RowMaxSum(const void* logits, DType dtype, int64_t base, int64_t vocab,
                            float* shared) {
  float max = -INFINITY;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x)
    max = fmaxf(max, LoadF(logits, dtype, base + i));
  max = BlockMax(max, shared);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x)
    sum += expf(LoadF(logits, dtype, base + i) - max);
  return make_float2(max, BlockSum(sum, shared));
}

// row_losses[row] = log(sum exp(x - max)) + max - x[target]
__global__ void CrossEntropyRowKernel(const void* logits, DType dtype, const int32_t* targets,
                                      float* row_losses, int64_t vocab, IdError* id_error) {
  __shared__ float shared[kWarp];
  const int64_t row = blockIdx.x;
  const int target = targets[row];
  if (target < 0 || target >= vocab) {
    if (threadIdx.x == 0) {
      if (target != kDeviceIgnoreTarget)
        RecordBadId(id_error, row, target, static_cast<int>(vocab));
      row_losses[row] = 0.0f;
    }
    return;
  }
  const int64_t base = row * vocab;
  const float2 stats = RowMaxSum(logits, dtype, base, vocab, shared);
  if (threadIdx.x == 0) {
    row_losses[row] = (stats.x - LoadF(logits, dtype, base + target)) + logf(stats.y);
  }
}

// stats[row] = {max, sum of exp(x - max), x[target - vocab.begin] or 0} for a shard's row.
__global__ void CrossEntropyShardStatsKernel(const void* logits, DType dtype,
                                             const int32_t* targets, VocabRows vocab, float* stats,
                                             IdError* id_error) {
  __shared__ float shared[kWarp];
  const int64_t row = blockIdx.x;
  const int target = targets[row];
  const bool ignored = target == kDeviceIgnoreTarget;
  if (!ignored && IsBadId(vocab, target)) {
    if (threadIdx.x == 0) RecordBadId(id_error, row, target, IdBound(vocab));
    return;
  }
  const int64_t base = row * vocab.rows;
  const float2 row_stats = RowMaxSum(logits, dtype, base, vocab.rows, shared);
  if (threadIdx.x == 0) {
    const int64_t local = ignored ? -1 : LocalRow(vocab, target);
    stats[3 * row] = row_stats.x;
    stats[3 * row + 1] = row_stats.y;
    stats[3 * row + 2] = local < 0 ? 0.0f : LoadF(logits, dtype, base + local);
  }
}

// One thread per row: the ranks' stats combined in rank order (Backend::CrossEntropyShardCombine),
// the row loss in CrossEntropyRowKernel's order of operations.
__global__ void CrossEntropyShardCombineKernel(const float* all_stats, const int32_t* targets,
                                               int64_t ranks, int64_t rows, float* row_stats,
                                               float* row_losses, IdError* id_error) {
  for (int64_t row = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; row < rows;
       row += int64_t{gridDim.x} * blockDim.x) {
    const int target = targets[row];
    if (target < 0 && target != kDeviceIgnoreTarget) {
      RecordBadId(id_error, row, target, kAnyIdBound);
    }
    float max = all_stats[3 * row];
    for (int64_t t = 1; t < ranks; ++t) max = fmaxf(max, all_stats[(t * rows + row) * 3]);
    float sum = 0.0f, target_logit = 0.0f;
    for (int64_t t = 0; t < ranks; ++t) {
      const float* stats = all_stats + (t * rows + row) * 3;
      sum += stats[1] * expf(stats[0] - max);
      target_logit += stats[2];
    }
    row_stats[2 * row] = max;
    row_stats[2 * row + 1] = sum;
    row_losses[row] = target < 0 ? 0.0f : (max - target_logit) + logf(sum);
  }
}

// One block: the number of targets that are not kDeviceIgnoreTarget (exact in double).
__device__ double CountedTargets(const int32_t* targets, int64_t rows, double* shared) {
  double counted = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    counted += targets[r] != kDeviceIgnoreTarget ? 1.0 : 0.0;
  }
  return BlockSum(counted, shared);
}

// One block: loss[0] = (sum of row losses in double, fixed order) / counted rows (0 if none).
__global__ void MeanKernel(const float* row_losses, const int32_t* targets, int64_t rows,
                           float* loss) {
  __shared__ double shared[kWarp];
  const double counted = CountedTargets(targets, rows, shared);
  double sum = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) sum += row_losses[r];
  sum = BlockSum(sum, shared);
  if (threadIdx.x == 0) *loss = counted == 0.0 ? 0.0f : static_cast<float>(sum / counted);
}

// One block: factor[0] = grad_scale / counted rows (0 if none), as the host computed it before
// targets could be ignored: a float division of two floats.
__global__ void FactorKernel(const int32_t* targets, int64_t rows, float grad_scale,
                             float* factor) {
  __shared__ double shared[kWarp];
  const double counted = CountedTargets(targets, rows, shared);
  if (threadIdx.x == 0) {
    *factor = counted == 0.0 ? 0.0f : grad_scale / static_cast<float>(counted);
  }
}

// dlogits = factor * (exp(x - M) / S - onehot(target - vocab.begin)) on a row of vocab.rows
// columns, {M, S} from row_stats, or with row_stats null the row's own (read whole, max then
// sum, before any thread writes). Each element is then read and written by the same thread, so
// dlogits may be logits.
__global__ void CrossEntropyBackwardKernel(const void* logits, DType logits_dtype,
                                           const int32_t* targets, VocabRows vocab,
                                           const float* row_stats, const float* factor_in,
                                           void* dlogits, DType dlogits_dtype, IdError* id_error) {
  __shared__ float shared[kWarp];
  const int64_t row = blockIdx.x;
  const int target = targets[row];
  const int64_t cols = vocab.rows;
  const int64_t base = row * cols;
  if (target == kDeviceIgnoreTarget) {  // not counted: no gradient
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
      StoreF(dlogits, dlogits_dtype, base + i, 0.0f);
    return;
  }
  if (IsBadId(vocab, target)) {
    if (threadIdx.x == 0) RecordBadId(id_error, row, target, IdBound(vocab));
    return;
  }
  const float factor = *factor_in;
  // Its __syncthreads: every read of the row is done before any write.
  const float2 stats = row_stats == nullptr
                           ? RowMaxSum(logits, logits_dtype, base, cols, shared)
                           : make_float2(row_stats[2 * row], row_stats[2 * row + 1]);
  const float scale = factor / stats.y;
  const int64_t local = LocalRow(vocab, target);
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    float g = expf(LoadF(logits, logits_dtype, base + i) - stats.x) * scale;
    if (i == local) g -= factor;
    StoreF(dlogits, dlogits_dtype, base + i, g);
  }
}

unsigned RowBlocks(int64_t rows, int threads) {
  const int64_t per_block = threads / kWarp;
  return static_cast<unsigned>((rows + per_block - 1) / per_block);
}

}  // namespace

void LaunchCausalSoftmax(float* scores, int64_t rows, int64_t seq, const int32_t* segment_starts,
                         int64_t rows_per_batch, void* copy, DType copy_dtype,
                         cudaStream_t stream) {
  if (rows == 0) return;
  CausalSoftmaxKernel<<<RowBlocks(rows, kSoftmaxThreads), kSoftmaxThreads, 0, stream>>>(
      scores, rows, seq, segment_starts, rows_per_batch, copy, copy_dtype);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchCausalSoftmaxBackward(const float* probs, float* dprobs, int64_t rows, int64_t seq,
                                 const int32_t* segment_starts, int64_t rows_per_batch, float scale,
                                 void* ds_copy, void* probs_copy, DType copy_dtype,
                                 cudaStream_t stream) {
  if (rows == 0) return;
  CausalSoftmaxBackwardKernel<<<RowBlocks(rows, kSoftmaxThreads), kSoftmaxThreads, 0, stream>>>(
      probs, dprobs, rows, seq, segment_starts, rows_per_batch, scale, ds_copy, probs_copy,
      copy_dtype);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchCrossEntropyForward(const void* logits, DType logits_dtype, const int32_t* targets,
                               float* row_losses, float* loss, int64_t rows, int64_t vocab,
                               IdError* id_error, cudaStream_t stream) {
  CrossEntropyRowKernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
      logits, logits_dtype, targets, row_losses, vocab, id_error);
  BATON_CUDA_CHECK_LAUNCH();
  MeanKernel<<<1, 1024, 0, stream>>>(row_losses, targets, rows, loss);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchCrossEntropyBackward(const void* logits, DType logits_dtype, const int32_t* targets,
                                VocabRows vocab, const float* row_stats, float grad_scale,
                                float* factor, void* dlogits, DType dlogits_dtype, int64_t rows,
                                IdError* id_error, cudaStream_t stream) {
  FactorKernel<<<1, 1024, 0, stream>>>(targets, rows, grad_scale, factor);
  BATON_CUDA_CHECK_LAUNCH();
  CrossEntropyBackwardKernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
      logits, logits_dtype, targets, vocab, row_stats, factor, dlogits, dlogits_dtype, id_error);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchCrossEntropyShardStats(const void* logits, DType logits_dtype, const int32_t* targets,
                                  VocabRows vocab, float* stats, int64_t rows, IdError* id_error,
                                  cudaStream_t stream) {
  CrossEntropyShardStatsKernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
      logits, logits_dtype, targets, vocab, stats, id_error);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchCrossEntropyShardCombine(const float* all_stats, const int32_t* targets, int64_t ranks,
                                    int64_t rows, float* row_stats, float* row_losses, float* loss,
                                    IdError* id_error, cudaStream_t stream) {
  CrossEntropyShardCombineKernel<<<GridFor(rows, kRowThreads), kRowThreads, 0, stream>>>(
      all_stats, targets, ranks, rows, row_stats, row_losses, id_error);
  BATON_CUDA_CHECK_LAUNCH();
  MeanKernel<<<1, 1024, 0, stream>>>(row_losses, targets, rows, loss);
  BATON_CUDA_CHECK_LAUNCH();
}

}  // namespace baton::cuda
