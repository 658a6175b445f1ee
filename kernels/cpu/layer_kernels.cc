// The CPU backend's f32 kernels for embedding, LayerNorm, GELU and cross-entropy (see
// layer_kernels.h). Row loops run in parallel; cross-row sums go column chunk by column chunk so
// that every column is summed over rows in order, whatever the thread count.
#include "kernels/cpu/layer_kernels.h"

#include <algorithm>
#include <cmath>

#include "kernels/backend.h"
#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/parallel.h"

namespace baton::cpu {
namespace {

// Columns per chunk in cross-row sums: a chunk's running sums stay in registers/L1.
constexpr int64_t kColumnChunk = 64;
constexpr float kLayerNormEps = 1e-5f;

// Runs body(c0, c1) over column chunks of [0, cols) in parallel; each chunk touches `rows` rows.
template <typename Body>
void ForColumnChunks(int64_t rows, int64_t cols, ThreadPool* pool, const Body& body) {
  const int64_t chunks = (cols + kColumnChunk - 1) / kColumnChunk;
  ParallelFor(chunks, pool, rows * kColumnChunk, [&](int64_t chunk) {
    const int64_t c0 = chunk * kColumnChunk;
    body(c0, std::min(cols, c0 + kColumnChunk));
  });
}

// ---- Row functions: the vectorised inner loops, each compiled for SSE2, AVX2 and AVX-512, for
// f32 and for bf16 storage (X: float or BF16, fast_math.h; the arithmetic is f32 either way).

template <typename X>
inline void LayerNormForwardRowBody(const X* x, const float* weight, const float* bias, X* out,
                                    float* mean, float* rstd, int64_t cols) {
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const float m = SumLanes(cols, [x](int64_t c) { return Widen(x[c]); }) * inv_cols;
  const float variance = SumLanes(cols,
                                  [x, m](int64_t c) {
                                    const float d = Widen(x[c]) - m;
                                    return d * d;
                                  }) *
                         inv_cols;
  const float s = 1.0f / std::sqrt(variance + kLayerNormEps);
  for (int64_t c = 0; c < cols; ++c)
    out[c] = Narrow<X>((Widen(x[c]) - m) * s * weight[c] + bias[c]);
  *mean = m;
  *rstd = s;
}

BATON_SIMD_CLONES void LayerNormForwardRow(const float* x, const float* weight, const float* bias,
                                           float* out, float* mean, float* rstd, int64_t cols) {
  LayerNormForwardRowBody(x, weight, bias, out, mean, rstd, cols);
}
BATON_SIMD_CLONES void LayerNormForwardRow(const BF16* x, const float* weight, const float* bias,
                                           BF16* out, float* mean, float* rstd, int64_t cols) {
  LayerNormForwardRowBody(x, weight, bias, out, mean, rstd, cols);
}

// dx += (w dout - mean(w dout) - norm mean(w dout norm)) rstd; the row's dweight and dbias terms
// are added to the block's partial sums. Each element of dout and x is read before dx's is
// written.
template <typename X>
inline void LayerNormBackwardRowBody(const X* dout, const X* x, const float* weight, float m,
                                     float s, X* dx, float* partial_dweight, float* partial_dbias,
                                     int64_t cols) {
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const float dnorm_mean =
      SumLanes(cols, [=](int64_t c) { return weight[c] * Widen(dout[c]); }) * inv_cols;
  const float dnorm_norm_mean =
      SumLanes(cols,
               [=](int64_t c) { return weight[c] * Widen(dout[c]) * ((Widen(x[c]) - m) * s); }) *
      inv_cols;
  for (int64_t c = 0; c < cols; ++c) {
    const float d = Widen(dout[c]);
    const float norm = (Widen(x[c]) - m) * s;
    dx[c] = Narrow<X>(Widen(dx[c]) + (weight[c] * d - dnorm_mean - norm * dnorm_norm_mean) * s);
    partial_dweight[c] += d * norm;
    partial_dbias[c] += d;
  }
}

BATON_SIMD_CLONES void LayerNormBackwardRow(const float* dout, const float* x, const float* weight,
                                            float m, float s, float* dx, float* partial_dweight,
                                            float* partial_dbias, int64_t cols) {
  LayerNormBackwardRowBody(dout, x, weight, m, s, dx, partial_dweight, partial_dbias, cols);
}
BATON_SIMD_CLONES void LayerNormBackwardRow(const BF16* dout, const BF16* x, const float* weight,
                                            float m, float s, BF16* dx, float* partial_dweight,
                                            float* partial_dbias, int64_t cols) {
  LayerNormBackwardRowBody(dout, x, weight, m, s, dx, partial_dweight, partial_dbias, cols);
}

// GELU and its gradient (fast_math.h) over a range.
template <typename X>
inline void GeluForwardRangeBody(const X* x, X* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Narrow<X>(GeluF(Widen(x[i])));
}

BATON_SIMD_CLONES void GeluForwardRange(const float* x, float* out, int64_t n) {
  GeluForwardRangeBody(x, out, n);
}
BATON_SIMD_CLONES void GeluForwardRange(const BF16* x, BF16* out, int64_t n) {
  GeluForwardRangeBody(x, out, n);
}

template <typename X>
inline void GeluBackwardRangeBody(const X* x, const X* dout, X* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    dx[i] = Narrow<X>(Widen(dx[i]) + GeluGradF(Widen(x[i])) * Widen(dout[i]));
  }
}

BATON_SIMD_CLONES void GeluBackwardRange(const float* x, const float* dout, float* dx, int64_t n) {
  GeluBackwardRangeBody(x, dout, dx, n);
}
BATON_SIMD_CLONES void GeluBackwardRange(const BF16* x, const BF16* dout, BF16* dx, int64_t n) {
  GeluBackwardRangeBody(x, dout, dx, n);
}

// The public kernels over f32 or bf16 storage, overloaded below.

// acc (cols) += column sums of x (rows,cols), each column summed over rows in order.
template <typename X>
void ColumnSumsAccumulateOf(const X* x, int64_t rows, int64_t cols, float* acc, ThreadPool* pool) {
  ForColumnChunks(rows, cols, pool, [&](int64_t c0, int64_t c1) {
    float sums[kColumnChunk] = {};
    const int64_t width = c1 - c0;
    for (int64_t r = 0; r < rows; ++r) {
      const X* row = x + r * cols + c0;
      for (int64_t j = 0; j < width; ++j) sums[j] += Widen(row[j]);
    }
    for (int64_t j = 0; j < width; ++j) acc[c0 + j] += sums[j];
  });
}

template <typename X>
void LayerNormForwardOf(const X* x, const float* weight, const float* bias, X* out, float* mean,
                        float* rstd, int64_t rows, int64_t cols, ThreadPool* pool) {
  ParallelFor(rows, pool, cols, [&](int64_t r) {
    LayerNormForwardRow(x + r * cols, weight, bias, out + r * cols, mean + r, rstd + r, cols);
  });
}

template <typename X>
void LayerNormBackwardBlockOf(const X* dout, const X* x, const float* weight, const float* mean,
                              const float* rstd, X* dx, float* partials, int64_t rows,
                              int64_t cols) {
  float* partial_dweight = partials;
  float* partial_dbias = partials + cols;
  std::fill(partials, partials + 2 * cols, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    LayerNormBackwardRow(dout + r * cols, x + r * cols, weight, mean[r], rstd[r], dx + r * cols,
                         partial_dweight, partial_dbias, cols);
  }
}

template <typename X>
void GeluForwardOf(const X* x, X* out, int64_t n, ThreadPool* pool) {
  ParallelChunks(n, 1 << 14, pool, [&](int64_t begin, int64_t end) {
    GeluForwardRange(x + begin, out + begin, end - begin);
  });
}

template <typename X>
void GeluBackwardOf(const X* x, const X* dout, X* dx, int64_t n, ThreadPool* pool) {
  ParallelChunks(n, 1 << 14, pool, [&](int64_t begin, int64_t end) {
    GeluBackwardRange(x + begin, dout + begin, dx + begin, end - begin);
  });
}

// A row's softmax statistics: its max and the sum of exp(x - max).
struct SoftmaxStats {
  float max = 0.0f;
  float sum = 0.0f;
};

BATON_SIMD_CLONES SoftmaxStats RowSoftmaxStats(const float* row, int64_t vocab) {
  const float max = MaxF(row, vocab);
  return {max, SumLanes(vocab, [row, max](int64_t i) { return ExpF(row[i] - max); })};
}

float CrossEntropyRowLoss(const float* row, int32_t target, int64_t vocab) {
  const SoftmaxStats stats = RowSoftmaxStats(row, vocab);
  return (stats.max - row[target]) + std::log(stats.sum);  // exact when the target is the max
}

// out = factor * (exp(row - max) / sum - onehot(target)), no one-hot when target < 0; out may
// be row: each element is read before it is written. With `stats` null, {max, sum} are the
// row's own (softmax), the exps stored in out on the way.
BATON_SIMD_CLONES void CrossEntropyBackwardRow(const float* row, const float* stats, int64_t target,
                                               float factor, float* out, int64_t vocab) {
  float max = 0.0f, sum = 0.0f;
  if (stats == nullptr) {
    max = MaxF(row, vocab);
    sum = SumLanes(vocab, [row, out, max](int64_t i) {
      const float e = ExpF(row[i] - max);
      out[i] = e;
      return e;
    });
  } else {
    max = stats[0];
    sum = stats[1];
    for (int64_t i = 0; i < vocab; ++i) out[i] = ExpF(row[i] - max);
  }
  const float scale = factor / sum;
  for (int64_t i = 0; i < vocab; ++i) out[i] *= scale;
  if (target >= 0) out[target] -= factor;
}

}  // namespace

void BroadcastRows(const float* row, float* out, int64_t rows, int64_t cols, bool accumulate,
                   ThreadPool* pool) {
  ParallelFor(rows, pool, cols, [&](int64_t r) {
    float* o = out + r * cols;
    if (accumulate) {
      for (int64_t c = 0; c < cols; ++c) o[c] += row[c];
    } else {
      for (int64_t c = 0; c < cols; ++c) o[c] = row[c];
    }
  });
}

void ColumnSumsAccumulate(const float* x, int64_t rows, int64_t cols, float* acc,
                          ThreadPool* pool) {
  ColumnSumsAccumulateOf(x, rows, cols, acc, pool);
}
void ColumnSumsAccumulate(const BF16* x, int64_t rows, int64_t cols, float* acc, ThreadPool* pool) {
  ColumnSumsAccumulateOf(x, rows, cols, acc, pool);
}

void EmbeddingForward(const int32_t* tokens, const int32_t* segment_starts, VocabRows vocab,
                      const float* wte, const float* wpe, float* out, int64_t batch, int64_t seq,
                      int64_t channels, ThreadPool* pool) {
  ParallelFor(batch * seq, pool, channels, [&](int64_t row) {
    const int64_t t = row % seq;
    const int64_t position = segment_starts == nullptr ? t : t - segment_starts[row];
    const int64_t local = vocab.Local(tokens[row]);
    const float* token_row = local < 0 ? nullptr : wte + local * channels;
    const float* position_row = wpe == nullptr ? nullptr : wpe + position * channels;
    float* o = out + row * channels;
    if (token_row != nullptr && position_row != nullptr) {
      for (int64_t c = 0; c < channels; ++c) o[c] = token_row[c] + position_row[c];
    } else if (token_row != nullptr || position_row != nullptr) {  // one term: copied as it is
      const float* only = token_row != nullptr ? token_row : position_row;
      std::copy(only, only + channels, o);
    } else {  // another rank's token, and no positions here
      std::fill(o, o + channels, 0.0f);
    }
  });
}

void EmbeddingBackward(const int32_t* tokens, const int32_t* segment_starts, VocabRows vocab,
                       const float* dout, float* dwte, float* dwpe, int64_t batch, int64_t seq,
                       int64_t channels, ThreadPool* pool) {
  const int64_t rows = batch * seq;
  if (dwte != nullptr) {
    // Scatter-add: rows sharing a token hit the same dwte row, so split by columns instead.
    ForColumnChunks(rows, channels, pool, [&](int64_t c0, int64_t c1) {
      for (int64_t row = 0; row < rows; ++row) {
        const int64_t local = vocab.Local(tokens[row]);
        if (local < 0) continue;  // another rank's token
        float* target = dwte + local * channels;
        const float* source = dout + row * channels;
        for (int64_t c = c0; c < c1; ++c) target[c] += source[c];
      }
    });
  }
  if (dwpe != nullptr && segment_starts != nullptr) {
    // Packed documents: rows of one position come from anywhere, so scatter-add like dwte.
    ForColumnChunks(rows, channels, pool, [&](int64_t c0, int64_t c1) {
      for (int64_t row = 0; row < rows; ++row) {
        float* target = dwpe + (row % seq - segment_starts[row]) * channels;
        const float* source = dout + row * channels;
        for (int64_t c = c0; c < c1; ++c) target[c] += source[c];
      }
    });
  } else if (dwpe != nullptr) {
    ParallelFor(seq, pool, batch * channels, [&](int64_t t) {
      for (int64_t c0 = 0; c0 < channels; c0 += kColumnChunk) {
        const int64_t width = std::min(kColumnChunk, channels - c0);
        float sums[kColumnChunk] = {};
        for (int64_t b = 0; b < batch; ++b) {
          const float* source = dout + (b * seq + t) * channels + c0;
          for (int64_t j = 0; j < width; ++j) sums[j] += source[j];
        }
        float* target = dwpe + t * channels + c0;
        for (int64_t j = 0; j < width; ++j) target[j] += sums[j];
      }
    });
  }
}

void LayerNormForward(const float* x, const float* weight, const float* bias, float* out,
                      float* mean, float* rstd, int64_t rows, int64_t cols, ThreadPool* pool) {
  LayerNormForwardOf(x, weight, bias, out, mean, rstd, rows, cols, pool);
}
void LayerNormForward(const BF16* x, const float* weight, const float* bias, BF16* out, float* mean,
                      float* rstd, int64_t rows, int64_t cols, ThreadPool* pool) {
  LayerNormForwardOf(x, weight, bias, out, mean, rstd, rows, cols, pool);
}

int64_t LayerNormBackwardScratch(int64_t rows, int64_t cols) {
  const int64_t blocks = (rows + kLayerNormRowBlock - 1) / kLayerNormRowBlock;
  return blocks * 2 * cols;
}

void LayerNormBackwardBlock(const float* dout, const float* x, const float* weight,
                            const float* mean, const float* rstd, float* dx, float* partials,
                            int64_t rows, int64_t cols) {
  LayerNormBackwardBlockOf(dout, x, weight, mean, rstd, dx, partials, rows, cols);
}
void LayerNormBackwardBlock(const BF16* dout, const BF16* x, const float* weight, const float* mean,
                            const float* rstd, BF16* dx, float* partials, int64_t rows,
                            int64_t cols) {
  LayerNormBackwardBlockOf(dout, x, weight, mean, rstd, dx, partials, rows, cols);
}

void LayerNormBackwardReduce(const float* scratch, int64_t blocks, float* dweight, float* dbias,
                             int64_t cols, ThreadPool* pool) {
  ForColumnChunks(blocks * 2, cols, pool, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      float sum_dweight = 0.0f;
      float sum_dbias = 0.0f;
      for (int64_t block = 0; block < blocks; ++block) {
        sum_dweight += scratch[block * 2 * cols + c];
        sum_dbias += scratch[block * 2 * cols + cols + c];
      }
      dweight[c] += sum_dweight;
      dbias[c] += sum_dbias;
    }
  });
}

void GeluForward(const float* x, float* out, int64_t n, ThreadPool* pool) {
  GeluForwardOf(x, out, n, pool);
}
void GeluForward(const BF16* x, BF16* out, int64_t n, ThreadPool* pool) {
  GeluForwardOf(x, out, n, pool);
}
void GeluBackward(const float* x, const float* dout, float* dx, int64_t n, ThreadPool* pool) {
  GeluBackwardOf(x, dout, dx, n, pool);
}
void GeluBackward(const BF16* x, const BF16* dout, BF16* dx, int64_t n, ThreadPool* pool) {
  GeluBackwardOf(x, dout, dx, n, pool);
}

void CrossEntropyRowLosses(const float* logits, const int32_t* targets, float* row_losses,
                           int64_t rows, int64_t vocab, ThreadPool* pool) {
  ParallelFor(rows, pool, vocab, [&](int64_t r) {
    row_losses[r] = targets[r] == kIgnoreTarget
                        ? 0.0f
                        : CrossEntropyRowLoss(logits + r * vocab, targets[r], vocab);
  });
}

void CrossEntropyShardStats(const float* logits, const int32_t* targets, VocabRows vocab,
                            float* stats, int64_t rows, ThreadPool* pool) {
  ParallelFor(rows, pool, vocab.rows, [&](int64_t r) {
    const float* row = logits + r * vocab.rows;
    const SoftmaxStats softmax = RowSoftmaxStats(row, vocab.rows);
    const int64_t local = targets[r] == kIgnoreTarget ? -1 : vocab.Local(targets[r]);
    stats[3 * r] = softmax.max;
    stats[3 * r + 1] = softmax.sum;
    stats[3 * r + 2] = local < 0 ? 0.0f : row[local];
  });
}

void CrossEntropyCombineStats(const float* all_stats, const int32_t* targets, int64_t ranks,
                              int64_t rows, float* row_stats, float* row_losses) {
  for (int64_t r = 0; r < rows; ++r) {
    float max = all_stats[3 * r];
    for (int64_t t = 1; t < ranks; ++t) max = std::max(max, all_stats[(t * rows + r) * 3]);
    float sum = 0.0f, target_logit = 0.0f;
    for (int64_t t = 0; t < ranks; ++t) {
      const float* stats = all_stats + (t * rows + r) * 3;
      sum += stats[1] * std::exp(stats[0] - max);
      target_logit += stats[2];
    }
    row_stats[2 * r] = max;
    row_stats[2 * r + 1] = sum;
    // CrossEntropyRowLoss's order of operations, so that one rank gives its bits.
    row_losses[r] = targets[r] == kIgnoreTarget ? 0.0f : (max - target_logit) + std::log(sum);
  }
}

void CrossEntropyBackward(const float* logits, const int32_t* targets, VocabRows vocab,
                          const float* row_stats, float factor, float* dlogits, int64_t rows,
                          ThreadPool* pool) {
  const int64_t cols = vocab.rows;
  ParallelFor(rows, pool, cols, [&](int64_t r) {
    if (targets[r] == kIgnoreTarget) {
      std::fill(dlogits + r * cols, dlogits + (r + 1) * cols, 0.0f);
      return;
    }
    CrossEntropyBackwardRow(logits + r * cols, row_stats == nullptr ? nullptr : row_stats + 2 * r,
                            vocab.Local(targets[r]), factor, dlogits + r * cols, cols);
  });
}

}  // namespace baton::cpu
