// The CPU backend's f32 kernels for embedding, LayerNorm, GELU and cross-entropy (see
// layer_kernels.h). Row loops run in parallel; cross-row sums go column chunk by column chunk so
// that every column is summed over rows in order, whatever the thread count.
#include "kernels/cpu/layer_kernels.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/parallel.h"

namespace baton::cpu {
namespace {

// Columns per chunk in cross-row sums: a chunk's running sums stay in registers/L1.
constexpr int64_t kColumnChunk = 64;
// Rows per block of LayerNorm backward's partial weight/bias sums (fixed, so results don't
// depend on the thread count).
constexpr int64_t kLayerNormRowBlock = 32;
constexpr float kLayerNormEps = 1e-5f;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// Runs body(c0, c1) over column chunks of [0, cols) in parallel; each chunk touches `rows` rows.
template <typename Body>
void ForColumnChunks(int64_t rows, int64_t cols, int threads, const Body& body) {
  const int64_t chunks = (cols + kColumnChunk - 1) / kColumnChunk;
  ParallelFor(chunks, threads, rows * kColumnChunk, [&](int64_t chunk) {
    const int64_t c0 = chunk * kColumnChunk;
    body(c0, std::min(cols, c0 + kColumnChunk));
  });
}

}  // namespace

void BroadcastRows(const float* row, float* out, int64_t rows, int64_t cols, bool accumulate,
                   int threads) {
  ParallelFor(rows, threads, cols, [&](int64_t r) {
    float* o = out + r * cols;
    if (accumulate) {
      for (int64_t c = 0; c < cols; ++c) o[c] += row[c];
    } else {
      for (int64_t c = 0; c < cols; ++c) o[c] = row[c];
    }
  });
}

void ColumnSumsAccumulate(const float* x, int64_t rows, int64_t cols, float* acc, int threads) {
  ForColumnChunks(rows, cols, threads, [&](int64_t c0, int64_t c1) {
    float sums[kColumnChunk] = {};
    const int64_t width = c1 - c0;
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = x + r * cols + c0;
      for (int64_t j = 0; j < width; ++j) sums[j] += row[j];
    }
    for (int64_t j = 0; j < width; ++j) acc[c0 + j] += sums[j];
  });
}

void EmbeddingForward(const int32_t* tokens, const float* wte, const float* wpe, float* out,
                      int64_t batch, int64_t seq, int64_t channels, int threads) {
  ParallelFor(batch * seq, threads, channels, [&](int64_t row) {
    const float* token_row = wte + static_cast<int64_t>(tokens[row]) * channels;
    const float* position_row = wpe + (row % seq) * channels;
    float* o = out + row * channels;
    for (int64_t c = 0; c < channels; ++c) o[c] = token_row[c] + position_row[c];
  });
}

void EmbeddingBackward(const int32_t* tokens, const float* dout, float* dwte, float* dwpe,
                       int64_t batch, int64_t seq, int64_t channels, int threads) {
  const int64_t rows = batch * seq;
  if (dwte != nullptr) {
    // Scatter-add: rows sharing a token hit the same dwte row, so split by columns instead.
    ForColumnChunks(rows, channels, threads, [&](int64_t c0, int64_t c1) {
      for (int64_t row = 0; row < rows; ++row) {
        float* target = dwte + static_cast<int64_t>(tokens[row]) * channels;
        const float* source = dout + row * channels;
        for (int64_t c = c0; c < c1; ++c) target[c] += source[c];
      }
    });
  }
  if (dwpe != nullptr) {
    ParallelFor(seq, threads, batch * channels, [&](int64_t t) {
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
                      float* mean, float* rstd, int64_t rows, int64_t cols, int threads) {
  const float inv_cols = 1.0f / static_cast<float>(cols);
  ParallelFor(rows, threads, cols, [&](int64_t r) {
    const float* xr = x + r * cols;
    const float m = SumF(xr, cols) * inv_cols;
    const float variance = SumLanes(cols,
                                    [xr, m](int64_t c) {
                                      const float d = xr[c] - m;
                                      return d * d;
                                    }) *
                           inv_cols;
    const float s = 1.0f / std::sqrt(variance + kLayerNormEps);
    float* o = out + r * cols;
    for (int64_t c = 0; c < cols; ++c) o[c] = (xr[c] - m) * s * weight[c] + bias[c];
    mean[r] = m;
    rstd[r] = s;
  });
}

int64_t LayerNormBackwardScratch(int64_t rows, int64_t cols) {
  const int64_t blocks = (rows + kLayerNormRowBlock - 1) / kLayerNormRowBlock;
  return blocks * 2 * cols;
}

void LayerNormBackward(const float* dout, const float* x, const float* weight, const float* mean,
                       const float* rstd, float* dx, float* dweight, float* dbias, float* scratch,
                       int64_t rows, int64_t cols, int threads) {
  const int64_t blocks = (rows + kLayerNormRowBlock - 1) / kLayerNormRowBlock;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  // Pass 1, per block of rows: dx for each row, and the block's partial dweight and dbias.
  ParallelFor(blocks, threads, kLayerNormRowBlock * cols, [&](int64_t block) {
    float* partial_dweight = scratch + block * 2 * cols;
    float* partial_dbias = partial_dweight + cols;
    std::fill(partial_dweight, partial_dweight + 2 * cols, 0.0f);
    const int64_t end = std::min(rows, (block + 1) * kLayerNormRowBlock);
    for (int64_t r = block * kLayerNormRowBlock; r < end; ++r) {
      const float* xr = x + r * cols;
      const float* dr = dout + r * cols;
      const float m = mean[r];
      const float s = rstd[r];
      const float dnorm_mean =
          SumLanes(cols, [=](int64_t c) { return weight[c] * dr[c]; }) * inv_cols;
      const float dnorm_norm_mean =
          SumLanes(cols, [=](int64_t c) { return weight[c] * dr[c] * ((xr[c] - m) * s); }) *
          inv_cols;
      float* dxr = dx + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        const float norm = (xr[c] - m) * s;
        dxr[c] += (weight[c] * dr[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
        partial_dweight[c] += dr[c] * norm;
        partial_dbias[c] += dr[c];
      }
    }
  });
  // Pass 2, per column: the blocks' partials in block order.
  ForColumnChunks(blocks * 2, cols, threads, [&](int64_t c0, int64_t c1) {
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

// GELU (tanh form) written as x * sigmoid(2y), y = sqrt(2/pi) (x + 0.044715 x^3), since
// 0.5 (1 + tanh y) = sigmoid(2y): one exp, no tanh call, and loops over it vectorise.
void GeluForward(const float* x, float* out, int64_t n, int threads) {
  ParallelChunks(n, 1 << 14, threads, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float v = x[i];
      const float y = kGeluScale * (v + kGeluCubic * v * v * v);
      out[i] = v / (1.0f + ExpF(-2.0f * y));
    }
  });
}

// d/dx [x sigmoid(2y)] = s + 2 x s (1 - s) y', s = sigmoid(2y), y' = sqrt(2/pi)(1 + 3 0.044715 x^2)
void GeluBackward(const float* x, const float* dout, float* dx, int64_t n, int threads) {
  ParallelChunks(n, 1 << 14, threads, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float v = x[i];
      const float y = kGeluScale * (v + kGeluCubic * v * v * v);
      const float s = 1.0f / (1.0f + ExpF(-2.0f * y));
      const float dy = kGeluScale * (1.0f + 3.0f * kGeluCubic * v * v);
      dx[i] += (s + 2.0f * v * s * (1.0f - s) * dy) * dout[i];
    }
  });
}

void CrossEntropyRowLosses(const float* logits, const int32_t* targets, float* row_losses,
                           int64_t rows, int64_t vocab, int threads) {
  ParallelFor(rows, threads, vocab, [&](int64_t r) {
    const float* row = logits + r * vocab;
    const float max = MaxF(row, vocab);
    const float sum = SumLanes(vocab, [row, max](int64_t i) { return ExpF(row[i] - max); });
    row_losses[r] = (max - row[targets[r]]) + std::log(sum);  // exact when the target is max
  });
}

void CrossEntropyBackward(const float* logits, const int32_t* targets, float factor, float* dlogits,
                          int64_t rows, int64_t vocab, int threads) {
  ParallelFor(rows, threads, vocab, [&](int64_t r) {
    const float* row = logits + r * vocab;
    float* out = dlogits + r * vocab;  // may be `row` itself: each element is read before written
    const float max = MaxF(row, vocab);
    const float sum = SumLanes(vocab, [row, out, max](int64_t i) {
      const float e = ExpF(row[i] - max);
      out[i] = e;
      return e;
    });
    const float scale = factor / sum;
    for (int64_t i = 0; i < vocab; ++i) out[i] *= scale;
    out[targets[r]] -= factor;
  });
}

}  // namespace baton::cpu
