// The Llama row kernels (see llama_kernels.h).
#include "kernels/cpu/llama_kernels.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/parallel.h"

namespace baton::cpu {

float RmsNormForwardRow(const float* x, const float* weight, float eps, float* out, int64_t cols) {
  double squares = 0.0;
  for (int64_t c = 0; c < cols; ++c) squares += static_cast<double>(x[c]) * x[c];
  const float rstd = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(cols) + eps));
  // Hugging Face's order: (x * rstd), then * weight.
  for (int64_t c = 0; c < cols; ++c) out[c] = (x[c] * rstd) * weight[c];
  return rstd;
}

void RmsNormBackwardBlock(const float* dout, const float* x, const float* weight, const float* rstd,
                          float* dx, float* partial_dweight, int64_t rows, int64_t cols) {
  std::fill(partial_dweight, partial_dweight + cols, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* dy = dout + r * cols;
    const float* xr = x + r * cols;
    float* dxr = dx + r * cols;
    const float s = rstd[r];
    // y = x s w with s = (mean(x^2) + eps)^-1/2: dx = s (w dy) - x s^3 / C * sum(w dy x).
    double dot = 0.0;
    for (int64_t c = 0; c < cols; ++c) dot += static_cast<double>(weight[c] * dy[c]) * xr[c];
    const float k = static_cast<float>(dot / static_cast<double>(cols)) * s * s * s;
    for (int64_t c = 0; c < cols; ++c) {
      dxr[c] += s * (weight[c] * dy[c]) - xr[c] * k;
      partial_dweight[c] += dy[c] * (xr[c] * s);
    }
  }
}

void RmsNormBackwardReduce(const float* partials, int64_t blocks, float* dweight, int64_t cols,
                           ThreadPool* pool) {
  ParallelChunks(cols, 256, pool, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      float sum = 0.0f;
      for (int64_t block = 0; block < blocks; ++block) sum += partials[block * cols + c];
      dweight[c] += sum;
    }
  });
}

namespace {

inline float Sigmoid(float g) { return 1.0f / (1.0f + std::exp(-g)); }

}  // namespace

void SwiGluForwardRow(const float* gate_up, float* out, int64_t hidden) {
  const float* gate = gate_up;
  const float* up = gate_up + hidden;
  for (int64_t i = 0; i < hidden; ++i) out[i] = gate[i] * Sigmoid(gate[i]) * up[i];
}

void SwiGluBackwardRow(const float* gate_up, const float* dout, float* dgate_up, int64_t hidden) {
  const float* gate = gate_up;
  const float* up = gate_up + hidden;
  for (int64_t i = 0; i < hidden; ++i) {
    const float g = gate[i];
    const float sig = Sigmoid(g);
    const float silu = g * sig;
    // silu'(g) = sig (1 + g (1 - sig))
    dgate_up[i] += dout[i] * up[i] * (sig * (1.0f + g * (1.0f - sig)));
    dgate_up[hidden + i] += dout[i] * silu;
  }
}

std::vector<float> RopeInverseFrequencies(const RopeConfig& rope, int64_t head_dim) {
  std::vector<float> inv(static_cast<size_t>(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i) inv[i] = RopeInverseFrequency(rope, i, head_dim);
  return inv;
}

void RotateHeads(float* x, int64_t heads, int64_t head_dim, const float* inv_freq, int64_t position,
                 bool inverse) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float angle = static_cast<float>(position) * inv_freq[i];
    const float cos = std::cos(angle);
    const float sin = inverse ? -std::sin(angle) : std::sin(angle);
    for (int64_t h = 0; h < heads; ++h) {
      float* head = x + h * head_dim;
      const float x1 = head[i];
      const float x2 = head[i + half];
      head[i] = x1 * cos - x2 * sin;
      head[i + half] = x2 * cos + x1 * sin;
    }
  }
}

}  // namespace baton::cpu
