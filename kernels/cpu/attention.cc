// Causal self-attention on the CPU: sgemm for the four products, row loops for the softmax
// (see attention.h).
//
// Layout: for batch b and head h, Q rows are qkv[b, t, h*D : h*D+D] (row stride 3C), K and V
// the same at column offsets C and 2C; out and dout rows have stride C; probs[b, h] is a dense
// T x T block. Causality: row t of P is zero beyond column t, so a block of rows [r0, r1) only
// needs columns (or, as the inner dimension, keys) [0, r1), and a block of key columns [c0, c1)
// only queries [c0, T).
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"

namespace baton::cpu {
namespace {

// Query rows per sgemm block: smaller skips more of the masked triangle, larger makes better
// sgemm calls. Fixed, so results don't depend on anything but the shape.
constexpr int64_t kRowBlock = 32;

struct HeadView {
  const float* q;
  const float* k;
  const float* v;
  int64_t qkv_stride;  // 3C
};

HeadView ViewHead(const float* qkv, const AttentionShape& shape, int64_t b, int64_t h) {
  const int64_t c = shape.channels;
  const float* base = qkv + b * shape.seq * 3 * c + h * shape.head_dim();
  return {base, base + c, base + 2 * c, 3 * c};
}

// In place on one row of scaled scores: softmax over [0, t], zeros after.
BATON_SIMD_CLONES void CausalSoftmaxRow(float* row, int64_t t, int64_t seq) {
  const float max = MaxF(row, t + 1);
  const float sum = SumLanes(t + 1, [row, max](int64_t s) {
    const float e = ExpF(row[s] - max);
    row[s] = e;
    return e;
  });
  const float inv_sum = 1.0f / sum;
  for (int64_t s = 0; s <= t; ++s) row[s] *= inv_sum;
  std::fill(row + t + 1, row + seq, 0.0f);
}

// In place on one row: dp (dL/dP) -> ds (dL/dS) = p * (dp - sum(p * dp)); zeros after t.
BATON_SIMD_CLONES void CausalSoftmaxBackwardRow(const float* p, float* d, int64_t t, int64_t seq) {
  const float dot = DotF(p, d, t + 1);
  for (int64_t s = 0; s <= t; ++s) d[s] = p[s] * (d[s] - dot);
  std::fill(d + t + 1, d + seq, 0.0f);
}

}  // namespace

void AttentionForward(const float* qkv, float* out, float* probs, const AttentionShape& shape,
                      ThreadPool* pool) {
  const int64_t seq = shape.seq;
  const int64_t dim = shape.head_dim();
  const int64_t heads = shape.heads;
  const int64_t c = shape.channels;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  ParallelFor(shape.batch * heads, pool, seq * seq * dim, [&](int64_t bh) {
    const int64_t b = bh / heads;
    const HeadView head = ViewHead(qkv, shape, b, bh % heads);
    const int64_t ld = head.qkv_stride;
    float* p = probs + bh * seq * seq;
    float* o = out + b * seq * c + (bh % heads) * dim;
    for (int64_t r0 = 0; r0 < seq; r0 += kRowBlock) {
      const int64_t r1 = std::min(seq, r0 + kRowBlock);
      // S[r0:r1, 0:r1] = scale * Q[r0:r1] K[0:r1]^T, then softmax row by row.
      Sgemm(false, true, r1 - r0, r1, dim, scale, head.q + r0 * ld, ld, head.k, ld, 0.0f,
            p + r0 * seq, seq);
      for (int64_t t = r0; t < r1; ++t) CausalSoftmaxRow(p + t * seq, t, seq);
      // out[r0:r1] = P[r0:r1, 0:r1] V[0:r1]
      Sgemm(false, false, r1 - r0, dim, r1, 1.0f, p + r0 * seq, seq, head.v, ld, 0.0f, o + r0 * c,
            c);
    }
  });
}

int64_t AttentionBackwardScratch(const AttentionShape& shape, int threads) {
  return threads * shape.seq * shape.seq;
}

void AttentionBackward(const float* dout, const float* qkv, const float* probs, float* dqkv,
                       float* scratch, const AttentionShape& shape, ThreadPool* pool) {
  const int64_t seq = shape.seq;
  const int64_t dim = shape.head_dim();
  const int64_t heads = shape.heads;
  const int64_t c = shape.channels;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  ParallelForWithSlot(shape.batch * heads, pool, seq * seq * dim, [&](int64_t bh, int slot) {
    const int64_t b = bh / heads;
    const int64_t h = bh % heads;
    const HeadView head = ViewHead(qkv, shape, b, h);
    const int64_t ld = head.qkv_stride;
    const float* p = probs + bh * seq * seq;
    const float* dout_h = dout + b * seq * c + h * dim;
    float* dq = dqkv + b * seq * 3 * c + h * dim;
    float* dk = dq + c;
    float* dv = dq + 2 * c;
    float* ds = scratch + slot * seq * seq;  // this thread's T x T block
    // dP = dO V^T (lower block triangle), then dS in place, row by row.
    for (int64_t r0 = 0; r0 < seq; r0 += kRowBlock) {
      const int64_t r1 = std::min(seq, r0 + kRowBlock);
      Sgemm(false, true, r1 - r0, r1, dim, 1.0f, dout_h + r0 * c, c, head.v, ld, 0.0f,
            ds + r0 * seq, seq);
      for (int64_t t = r0; t < r1; ++t) CausalSoftmaxBackwardRow(p + t * seq, ds + t * seq, t, seq);
    }
    for (int64_t r0 = 0; r0 < seq; r0 += kRowBlock) {
      const int64_t r1 = std::min(seq, r0 + kRowBlock);
      // dQ[r0:r1] += scale * dS[r0:r1, 0:r1] K[0:r1]
      Sgemm(false, false, r1 - r0, dim, r1, scale, ds + r0 * seq, seq, head.k, ld, 1.0f,
            dq + r0 * ld, ld);
      // Key block [r0, r1) gets contributions from queries [r0, T):
      // dK[r0:r1] += scale * dS[r0:T, r0:r1]^T Q[r0:T];  dV[r0:r1] += P[r0:T, r0:r1]^T dO[r0:T]
      Sgemm(true, false, r1 - r0, dim, seq - r0, scale, ds + r0 * seq + r0, seq, head.q + r0 * ld,
            ld, 1.0f, dk + r0 * ld, ld);
      Sgemm(true, false, r1 - r0, dim, seq - r0, 1.0f, p + r0 * seq + r0, seq, dout_h + r0 * c, c,
            1.0f, dv + r0 * ld, ld);
    }
  });
}

}  // namespace baton::cpu
