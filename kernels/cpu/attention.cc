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

// Head h of batch b in qkv (f32 or BF16 elements).
template <typename T>
struct HeadView {
  const T* q;
  const T* k;
  const T* v;
  int64_t qkv_stride;  // 3C
};

template <typename T>
HeadView<T> ViewHead(const T* qkv, const AttentionShape& shape, int64_t b, int64_t h) {
  const int64_t c = shape.channels;
  const T* base = qkv + b * shape.seq * 3 * c + h * shape.head_dim();
  return {base, base + c, base + 2 * c, 3 * c};
}

// The first key query t attends: its document's start with packed documents, else 0.
// `segment_starts` is the row's (T), or null.
inline int64_t FirstKey(const int32_t* segment_starts, int64_t t) {
  return segment_starts == nullptr ? 0 : segment_starts[t];
}

// The row's (T) segment starts within segment_starts (B,T), or null.
inline const int32_t* RowSegments(const int32_t* segment_starts, int64_t b, int64_t seq) {
  return segment_starts == nullptr ? nullptr : segment_starts + b * seq;
}

// In place on one row of scaled scores: softmax over keys [first, t], zeros elsewhere.
BATON_SIMD_CLONES void CausalSoftmaxRow(float* row, int64_t first, int64_t t, int64_t seq) {
  float* keys = row + first;
  const int64_t n = t - first + 1;
  const float max = MaxF(keys, n);
  const float sum = SumLanes(n, [keys, max](int64_t s) {
    const float e = ExpF(keys[s] - max);
    keys[s] = e;
    return e;
  });
  const float inv_sum = 1.0f / sum;
  for (int64_t s = 0; s < n; ++s) keys[s] *= inv_sum;
  std::fill(row, row + first, 0.0f);
  std::fill(row + t + 1, row + seq, 0.0f);
}

// In place on one row: dp (dL/dP) -> ds (dL/dS) = p * (dp - sum(p * dp)) over keys [first, t];
// zeros elsewhere.
BATON_SIMD_CLONES void CausalSoftmaxBackwardRow(const float* p, float* d, int64_t first, int64_t t,
                                                int64_t seq) {
  const float dot = DotF(p + first, d + first, t - first + 1);
  for (int64_t s = first; s <= t; ++s) d[s] = p[s] * (d[s] - dot);
  std::fill(d, d + first, 0.0f);
  std::fill(d + t + 1, d + seq, 0.0f);
}

}  // namespace

void AttentionForward(const float* qkv, const int32_t* segment_starts, float* out, float* probs,
                      const AttentionShape& shape, ThreadPool* pool) {
  const int64_t seq = shape.seq;
  const int64_t dim = shape.head_dim();
  const int64_t heads = shape.heads;
  const int64_t c = shape.channels;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  ParallelFor(shape.batch * heads, pool, seq * seq * dim, [&](int64_t bh) {
    const int64_t b = bh / heads;
    const HeadView<float> head = ViewHead(qkv, shape, b, bh % heads);
    const int64_t ld = head.qkv_stride;
    const int32_t* segments = RowSegments(segment_starts, b, seq);
    float* p = probs + bh * seq * seq;
    float* o = out + b * seq * c + (bh % heads) * dim;
    for (int64_t r0 = 0; r0 < seq; r0 += kRowBlock) {
      const int64_t r1 = std::min(seq, r0 + kRowBlock);
      const int64_t lo = FirstKey(segments, r0);  // starts never decrease: the block's first key
      // S[r0:r1, lo:r1] = scale * Q[r0:r1] K[lo:r1]^T, then softmax row by row.
      Sgemm(false, true, r1 - r0, r1 - lo, dim, scale, head.q + r0 * ld, ld, head.k + lo * ld, ld,
            0.0f, p + r0 * seq + lo, seq);
      for (int64_t t = r0; t < r1; ++t)
        CausalSoftmaxRow(p + t * seq, FirstKey(segments, t), t, seq);
      // out[r0:r1] = P[r0:r1, lo:r1] V[lo:r1]
      Sgemm(false, false, r1 - r0, dim, r1 - lo, 1.0f, p + r0 * seq + lo, seq, head.v + lo * ld, ld,
            0.0f, o + r0 * c, c);
    }
  });
}

int64_t AttentionBackwardScratch(const AttentionShape& shape, int threads) {
  return threads * shape.seq * shape.seq;
}

void AttentionBackward(const float* dout, const float* qkv, const int32_t* segment_starts,
                       const float* probs, float* dqkv, float* scratch, const AttentionShape& shape,
                       ThreadPool* pool) {
  const int64_t seq = shape.seq;
  const int64_t dim = shape.head_dim();
  const int64_t heads = shape.heads;
  const int64_t c = shape.channels;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  ParallelForWithSlot(shape.batch * heads, pool, seq * seq * dim, [&](int64_t bh, int slot) {
    const int64_t b = bh / heads;
    const int64_t h = bh % heads;
    const HeadView<float> head = ViewHead(qkv, shape, b, h);
    const int64_t ld = head.qkv_stride;
    const float* p = probs + bh * seq * seq;
    const float* dout_h = dout + b * seq * c + h * dim;
    float* dq = dqkv + b * seq * 3 * c + h * dim;
    float* dk = dq + c;
    float* dv = dq + 2 * c;
    const int32_t* segments = RowSegments(segment_starts, b, seq);
    float* ds = scratch + slot * seq * seq;  // this thread's T x T block
    // dP = dO V^T (lower block triangle from the block's first key), then dS in place, row by
    // row (zero outside each row's keys).
    for (int64_t r0 = 0; r0 < seq; r0 += kRowBlock) {
      const int64_t r1 = std::min(seq, r0 + kRowBlock);
      const int64_t lo = FirstKey(segments, r0);
      Sgemm(false, true, r1 - r0, r1 - lo, dim, 1.0f, dout_h + r0 * c, c, head.v + lo * ld, ld,
            0.0f, ds + r0 * seq + lo, seq);
      for (int64_t t = r0; t < r1; ++t) {
        CausalSoftmaxBackwardRow(p + t * seq, ds + t * seq, FirstKey(segments, t), t, seq);
      }
    }
    for (int64_t r0 = 0; r0 < seq; r0 += kRowBlock) {
      const int64_t r1 = std::min(seq, r0 + kRowBlock);
      const int64_t lo = FirstKey(segments, r0);
      // dQ[r0:r1] += scale * dS[r0:r1, lo:r1] K[lo:r1]
      Sgemm(false, false, r1 - r0, dim, r1 - lo, scale, ds + r0 * seq + lo, seq, head.k + lo * ld,
            ld, 1.0f, dq + r0 * ld, ld);
      // Key block [r0, r1) gets contributions from queries [r0, T):
      // dK[r0:r1] += scale * dS[r0:T, r0:r1]^T Q[r0:T];  dV[r0:r1] += P[r0:T, r0:r1]^T dO[r0:T]
      Sgemm(true, false, r1 - r0, dim, seq - r0, scale, ds + r0 * seq + r0, seq, head.q + r0 * ld,
            ld, 1.0f, dk + r0 * ld, ld);
      Sgemm(true, false, r1 - r0, dim, seq - r0, 1.0f, p + r0 * seq + r0, seq, dout_h + r0 * c, c,
            1.0f, dv + r0 * ld, ld);
    }
  });
}

// ---- flash-style

namespace {

// Scratch blocks of scores are kFlashRows x kFlashKeys, row-major with this leading dimension.
constexpr int64_t kLd = kFlashKeys;
// One thread's scratch of a flash forward (plain or over a cache): a block of scores and each
// row's running max and sum.
constexpr int64_t kFlashForwardScratch = kFlashRows * kFlashKeys + 2 * kFlashRows;

// Of a block of keys [c0, c0 + cols), how many come before the first key query row i
// attends (first_keys: the rows' segment starts, or null for none), at most `valid`.
inline int64_t KeysBefore(const int32_t* first_keys, int64_t i, int64_t c0, int64_t valid) {
  if (first_keys == nullptr) return 0;
  return std::clamp<int64_t>(first_keys[i] - c0, 0, std::max<int64_t>(valid, 0));
}

// One query block's online-softmax step over a block of scores s (rows x cols), rows at
// positions [r0, r0 + rows) against keys [c0, c0 + cols): masks s > t and keys before the row's
// segment start (first_keys, per row, or null), updates each row's running max m and sum l,
// turns s into exp(s - m_new) and rescales the row's accumulator by exp(m_old - m_new). A row
// that sees none of the block's keys (t < c0: only with a cache's offset; or a segment that
// starts after the block) is zeroed and left alone.
BATON_SIMD_CLONES void OnlineSoftmaxBlock(float* s, int64_t rows, int64_t cols, int64_t r0,
                                          int64_t c0, const int32_t* first_keys, float* m, float* l,
                                          float* acc, int64_t acc_ld, int64_t dim) {
  for (int64_t i = 0; i < rows; ++i) {
    float* row = s + i * kLd;
    const int64_t valid = std::min(cols, r0 + i - c0 + 1);  // keys c0 .. t
    const int64_t skip = KeysBefore(first_keys, i, c0, valid);
    if (valid <= skip) {
      std::fill(row, row + cols, 0.0f);
      continue;
    }
    float* keys = row + skip;
    const int64_t n = valid - skip;
    const float m_new = std::max(m[i], MaxF(keys, n));
    const float rescale = ExpF(m[i] - m_new);  // 0 on the first block (m = -inf)
    const float sum = SumLanes(n, [keys, m_new](int64_t k) {
      const float e = ExpF(keys[k] - m_new);
      keys[k] = e;
      return e;
    });
    std::fill(row, row + skip, 0.0f);
    std::fill(row + valid, row + cols, 0.0f);
    l[i] = l[i] * rescale + sum;
    m[i] = m_new;
    float* a = acc + i * acc_ld;
    for (int64_t d = 0; d < dim; ++d) a[d] *= rescale;
  }
}

// In place on a block of recomputed scores (rows x cols): p = exp(s - lse_t), zero above the
// diagonal and before the row's segment start (first_keys, per row, or null).
BATON_SIMD_CLONES void RecomputeProbsBlock(float* s, int64_t rows, int64_t cols, int64_t r0,
                                           int64_t c0, const int32_t* first_keys,
                                           const float* lse) {
  for (int64_t i = 0; i < rows; ++i) {
    float* row = s + i * kLd;
    const int64_t valid = std::max<int64_t>(0, std::min(cols, r0 + i - c0 + 1));
    const int64_t skip = KeysBefore(first_keys, i, c0, valid);
    const float shift = lse[i];
    for (int64_t k = skip; k < valid; ++k) row[k] = ExpF(row[k] - shift);
    std::fill(row, row + skip, 0.0f);
    std::fill(row + valid, row + cols, 0.0f);
  }
}

// In place on a block of dP (rows x cols): ds = p * (dp - delta_t).
BATON_SIMD_CLONES void SoftmaxBackwardBlock(const float* p, float* dp, int64_t rows, int64_t cols,
                                            const float* delta) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* pr = p + i * kLd;
    float* dr = dp + i * kLd;
    const float di = delta[i];
    for (int64_t k = 0; k < cols; ++k) dr[k] = pr[k] * (dr[k] - di);
  }
}

}  // namespace

int64_t FlashAttentionForwardScratch(const AttentionShape& shape, int threads) {
  (void)shape;
  return threads * kFlashForwardScratch;
}

void FlashAttentionForward(const float* qkv, const int32_t* segment_starts, float* out, float* lse,
                           float* scratch, const AttentionShape& shape, ThreadPool* pool) {
  const int64_t seq = shape.seq;
  const int64_t dim = shape.head_dim();
  const int64_t heads = shape.heads;
  const int64_t c = shape.channels;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  const int64_t per_thread = kFlashForwardScratch;
  ParallelForWithSlot(shape.batch * heads, pool, seq * seq * dim, [&](int64_t bh, int slot) {
    const int64_t b = bh / heads;
    const HeadView<float> head = ViewHead(qkv, shape, b, bh % heads);
    const int64_t ld = head.qkv_stride;
    float* s = scratch + slot * per_thread;
    float* m = s + kFlashRows * kFlashKeys;
    float* l = m + kFlashRows;
    float* o = out + b * seq * c + (bh % heads) * dim;
    float* lse_h = lse + bh * seq;
    const int32_t* segments = RowSegments(segment_starts, b, seq);
    for (int64_t r0 = 0; r0 < seq; r0 += kFlashRows) {
      const int64_t rows = std::min(kFlashRows, seq - r0);
      float* o_block = o + r0 * c;  // the accumulator: out's own rows
      std::fill(m, m + rows, -INFINITY);
      std::fill(l, l + rows, 0.0f);
      for (int64_t i = 0; i < rows; ++i) std::fill(o_block + i * c, o_block + i * c + dim, 0.0f);
      // Key blocks [c0, c0 + cols) from the block's first key (its first query's segment start:
      // starts never decrease) up to its last query r0 + rows - 1.
      const int32_t* first_keys = segments == nullptr ? nullptr : segments + r0;
      for (int64_t c0 = FirstKey(segments, r0); c0 < r0 + rows; c0 += kFlashKeys) {
        const int64_t cols = std::min(kFlashKeys, r0 + rows - c0);
        Sgemm(false, true, rows, cols, dim, scale, head.q + r0 * ld, ld, head.k + c0 * ld, ld, 0.0f,
              s, kLd);
        OnlineSoftmaxBlock(s, rows, cols, r0, c0, first_keys, m, l, o_block, c, dim);
        Sgemm(false, false, rows, dim, cols, 1.0f, s, kLd, head.v + c0 * ld, ld, 1.0f, o_block, c);
      }
      for (int64_t i = 0; i < rows; ++i) {
        const float inv = 1.0f / l[i];
        float* row = o_block + i * c;
        for (int64_t d = 0; d < dim; ++d) row[d] *= inv;
        lse_h[r0 + i] = m[i] + std::log(l[i]);
      }
    }
  });
}

int64_t FlashAttentionBackwardScratch(const AttentionShape& shape, int threads) {
  return threads * (2 * kFlashRows * kFlashKeys + shape.seq);
}

void FlashAttentionBackward(const float* dout, const float* qkv, const int32_t* segment_starts,
                            const float* out, const float* lse, float* dqkv, float* scratch,
                            const AttentionShape& shape, ThreadPool* pool) {
  const int64_t seq = shape.seq;
  const int64_t dim = shape.head_dim();
  const int64_t heads = shape.heads;
  const int64_t c = shape.channels;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  const int64_t per_thread = 2 * kFlashRows * kFlashKeys + seq;
  ParallelForWithSlot(shape.batch * heads, pool, 2 * seq * seq * dim, [&](int64_t bh, int slot) {
    const int64_t b = bh / heads;
    const int64_t h = bh % heads;
    const HeadView<float> head = ViewHead(qkv, shape, b, h);
    const int64_t ld = head.qkv_stride;
    const float* dout_h = dout + b * seq * c + h * dim;
    const float* out_h = out + b * seq * c + h * dim;
    const float* lse_h = lse + bh * seq;
    const int32_t* segments = RowSegments(segment_starts, b, seq);
    float* dq = dqkv + b * seq * 3 * c + h * dim;
    float* dk = dq + c;
    float* dv = dq + 2 * c;
    float* p = scratch + slot * per_thread;
    float* ds = p + kFlashRows * kFlashKeys;
    float* delta = ds + kFlashRows * kFlashKeys;  // rowsum(dO * O), T
    for (int64_t t = 0; t < seq; ++t) delta[t] = DotF(dout_h + t * c, out_h + t * c, dim);
    for (int64_t c0 = 0; c0 < seq; c0 += kFlashKeys) {
      // Query blocks that see keys from c0 on: those from the one starting at c0.
      for (int64_t r0 = c0; r0 < seq; r0 += kFlashRows) {
        const int64_t rows = std::min(kFlashRows, seq - r0);
        // Keys [c0, c0 + cols): the key block, cut at the query block's last row.
        const int64_t cols = std::min({kFlashKeys, seq - c0, r0 + rows - c0});
        // Every query of the block starts its document after these keys: nothing to do.
        if (FirstKey(segments, r0) >= c0 + cols) continue;
        const float* q_block = head.q + r0 * ld;
        const float* dout_block = dout_h + r0 * c;
        // P = exp(scale Q K^T - lse)
        Sgemm(false, true, rows, cols, dim, scale, q_block, ld, head.k + c0 * ld, ld, 0.0f, p, kLd);
        RecomputeProbsBlock(p, rows, cols, r0, c0, segments == nullptr ? nullptr : segments + r0,
                            lse_h + r0);
        // dV[c0:] += P^T dO;  dP = dO V^T;  dS = P (dP - delta)
        Sgemm(true, false, cols, dim, rows, 1.0f, p, kLd, dout_block, c, 1.0f, dv + c0 * ld, ld);
        Sgemm(false, true, rows, cols, dim, 1.0f, dout_block, c, head.v + c0 * ld, ld, 0.0f, ds,
              kLd);
        SoftmaxBackwardBlock(p, ds, rows, cols, delta + r0);
        // dK[c0:] += scale dS^T Q;  dQ[r0:] += scale dS K
        Sgemm(true, false, cols, dim, rows, scale, ds, kLd, q_block, ld, 1.0f, dk + c0 * ld, ld);
        Sgemm(false, false, rows, dim, cols, scale, ds, kLd, head.k + c0 * ld, ld, 1.0f,
              dq + r0 * ld, ld);
      }
    }
  });
}

// ---- flash-style on bf16 operands

namespace {

// A block of f32 values (rows x cols, leading dimension kLd) rounded to bf16 for a bf16 product.
BATON_SIMD_CLONES void NarrowBlock(const float* s, int64_t rows, int64_t cols, BF16* out) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t k = 0; k < cols; ++k) out[i * kLd + k] = Narrow<BF16>(s[i * kLd + k]);
  }
}

// s (rows x cols, leading dimension kLd) rounded to bf16 in place: NarrowBlock's values, kept
// as floats.
BATON_SIMD_CLONES void RoundBlockToBf16(float* s, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t k = 0; k < cols; ++k) s[i * kLd + k] = Widen(Narrow<BF16>(s[i * kLd + k]));
  }
}

// t (rows x dim, leading dimension ld) = t + acc (rows x dim, dense), rounded once.
BATON_SIMD_CLONES void AddRowsRounded(const float* acc, int64_t rows, int64_t dim, BF16* t,
                                      int64_t ld) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t d = 0; d < dim; ++d) {
      t[i * ld + d] = Narrow<BF16>(Widen(t[i * ld + d]) + acc[i * dim + d]);
    }
  }
}

// Per-thread scratch of the bf16 forward: scores, their bf16 copy, row max and sum, and the
// block's output accumulator (rows x dim).
int64_t FlashForwardBf16Floats(int64_t dim) {
  return kFlashRows * kFlashKeys + kFlashRows * kFlashKeys / 2 + 2 * kFlashRows + kFlashRows * dim;
}

// Per-thread scratch of the bf16 backward: P and dS in f32 and in bf16, rowsum(dO O) (T), dQ's
// accumulator (T x dim) and a key block's dK and dV accumulators (kFlashKeys x dim each).
int64_t FlashBackwardBf16Floats(int64_t seq, int64_t dim) {
  return 3 * kFlashRows * kFlashKeys + seq + seq * dim + 2 * kFlashKeys * dim;
}

}  // namespace

int64_t FlashAttentionForwardScratchBf16(const AttentionShape& shape, int threads) {
  return threads * FlashForwardBf16Floats(shape.head_dim());
}

void FlashAttentionForwardBf16(const BF16* qkv, const int32_t* segment_starts, BF16* out,
                               float* lse, float* scratch, const AttentionShape& shape,
                               ThreadPool* pool) {
  const int64_t seq = shape.seq;
  const int64_t dim = shape.head_dim();
  const int64_t heads = shape.heads;
  const int64_t c = shape.channels;
  const int64_t ld = 3 * c;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  const int64_t per_thread = FlashForwardBf16Floats(dim);
  ParallelForWithSlot(shape.batch * heads, pool, seq * seq * dim, [&](int64_t bh, int slot) {
    const int64_t b = bh / heads;
    const HeadView<BF16> head = ViewHead(qkv, shape, b, bh % heads);
    float* s = scratch + slot * per_thread;
    BF16* p = reinterpret_cast<BF16*>(s + kFlashRows * kFlashKeys);
    float* m = s + kFlashRows * kFlashKeys + kFlashRows * kFlashKeys / 2;
    float* l = m + kFlashRows;
    float* acc = l + kFlashRows;
    BF16* o = out + b * seq * c + (bh % heads) * dim;
    float* lse_h = lse + bh * seq;
    const int32_t* segments = RowSegments(segment_starts, b, seq);
    for (int64_t r0 = 0; r0 < seq; r0 += kFlashRows) {
      const int64_t rows = std::min(kFlashRows, seq - r0);
      std::fill(m, m + rows, -INFINITY);
      std::fill(l, l + rows, 0.0f);
      std::fill(acc, acc + rows * dim, 0.0f);
      const int32_t* first_keys = segments == nullptr ? nullptr : segments + r0;
      for (int64_t c0 = FirstKey(segments, r0); c0 < r0 + rows; c0 += kFlashKeys) {
        const int64_t cols = std::min(kFlashKeys, r0 + rows - c0);
        Bf16Gemm(false, true, rows, cols, dim, scale, head.q + r0 * ld, ld, head.k + c0 * ld, ld,
                 0.0f, s, DType::kF32, kLd);
        OnlineSoftmaxBlock(s, rows, cols, r0, c0, first_keys, m, l, acc, dim, dim);
        NarrowBlock(s, rows, cols, p);
        Bf16Gemm(false, false, rows, dim, cols, 1.0f, p, kLd, head.v + c0 * ld, ld, 1.0f, acc,
                 DType::kF32, dim);
      }
      for (int64_t i = 0; i < rows; ++i) {
        const float inv = 1.0f / l[i];
        BF16* row = o + (r0 + i) * c;
        for (int64_t d = 0; d < dim; ++d) row[d] = Narrow<BF16>(acc[i * dim + d] * inv);
        lse_h[r0 + i] = m[i] + std::log(l[i]);
      }
    }
  });
}

int64_t FlashAttentionBackwardScratchBf16(const AttentionShape& shape, int threads) {
  return threads * FlashBackwardBf16Floats(shape.seq, shape.head_dim());
}

void FlashAttentionBackwardBf16(const BF16* dout, const BF16* qkv, const int32_t* segment_starts,
                                const BF16* out, const float* lse, BF16* dqkv, float* scratch,
                                const AttentionShape& shape, ThreadPool* pool) {
  const int64_t seq = shape.seq;
  const int64_t dim = shape.head_dim();
  const int64_t heads = shape.heads;
  const int64_t c = shape.channels;
  const int64_t ld = 3 * c;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  const int64_t per_thread = FlashBackwardBf16Floats(seq, dim);
  ParallelForWithSlot(shape.batch * heads, pool, 2 * seq * seq * dim, [&](int64_t bh, int slot) {
    const int64_t b = bh / heads;
    const int64_t column = (bh % heads) * dim;
    const HeadView<BF16> head = ViewHead(qkv, shape, b, bh % heads);
    const BF16* dout_h = dout + b * seq * c + column;
    const BF16* out_h = out + b * seq * c + column;
    const float* lse_h = lse + bh * seq;
    const int32_t* segments = RowSegments(segment_starts, b, seq);
    BF16* dq = dqkv + b * seq * ld + column;
    BF16* dk = dq + c;
    BF16* dv = dq + 2 * c;
    float* p = scratch + slot * per_thread;
    float* ds = p + kFlashRows * kFlashKeys;
    BF16* p16 = reinterpret_cast<BF16*>(ds + kFlashRows * kFlashKeys);
    BF16* ds16 = p16 + kFlashRows * kFlashKeys;
    float* delta = ds + 2 * kFlashRows * kFlashKeys;  // rowsum(dO * O), T
    float* dq_acc = delta + seq;                      // T x dim
    float* dk_acc = dq_acc + seq * dim;               // kFlashKeys x dim
    float* dv_acc = dk_acc + kFlashKeys * dim;
    for (int64_t t = 0; t < seq; ++t) {
      const BF16* x = dout_h + t * c;
      const BF16* y = out_h + t * c;
      delta[t] = SumLanes(dim, [x, y](int64_t d) { return Widen(x[d]) * Widen(y[d]); });
    }
    std::fill(dq_acc, dq_acc + seq * dim, 0.0f);
    for (int64_t c0 = 0; c0 < seq; c0 += kFlashKeys) {
      const int64_t keys = std::min(kFlashKeys, seq - c0);
      std::fill(dk_acc, dk_acc + keys * dim, 0.0f);
      std::fill(dv_acc, dv_acc + keys * dim, 0.0f);
      for (int64_t r0 = c0; r0 < seq; r0 += kFlashRows) {
        const int64_t rows = std::min(kFlashRows, seq - r0);
        const int64_t cols = std::min({kFlashKeys, seq - c0, r0 + rows - c0});
        if (FirstKey(segments, r0) >= c0 + cols) continue;
        const BF16* q_block = head.q + r0 * ld;
        const BF16* dout_block = dout_h + r0 * c;
        // P = exp(scale Q K^T - lse), and its bf16 copy for the products
        Bf16Gemm(false, true, rows, cols, dim, scale, q_block, ld, head.k + c0 * ld, ld, 0.0f, p,
                 DType::kF32, kLd);
        RecomputeProbsBlock(p, rows, cols, r0, c0, segments == nullptr ? nullptr : segments + r0,
                            lse_h + r0);
        NarrowBlock(p, rows, cols, p16);
        // dV += P^T dO;  dP = dO V^T;  dS = P (dP - delta)
        Bf16Gemm(true, false, cols, dim, rows, 1.0f, p16, kLd, dout_block, c, 1.0f, dv_acc,
                 DType::kF32, dim);
        Bf16Gemm(false, true, rows, cols, dim, 1.0f, dout_block, c, head.v + c0 * ld, ld, 0.0f, ds,
                 DType::kF32, kLd);
        SoftmaxBackwardBlock(p, ds, rows, cols, delta + r0);
        NarrowBlock(ds, rows, cols, ds16);
        // dK += scale dS^T Q;  dQ[r0:] += scale dS K
        Bf16Gemm(true, false, cols, dim, rows, scale, ds16, kLd, q_block, ld, 1.0f, dk_acc,
                 DType::kF32, dim);
        Bf16Gemm(false, false, rows, dim, cols, scale, ds16, kLd, head.k + c0 * ld, ld, 1.0f,
                 dq_acc + r0 * dim, DType::kF32, dim);
      }
      AddRowsRounded(dk_acc, keys, dim, dk + c0 * ld, ld);
      AddRowsRounded(dv_acc, keys, dim, dv + c0 * ld, ld);
    }
    AddRowsRounded(dq_acc, seq, dim, dq, ld);
  });
}

// ---- with a key-value cache

namespace {

// Query blocks of fewer rows than this (a decoding step's one) form their two products with
// dot-product loops instead of sgemm: a new key count every token would otherwise make oneDNN
// build a new primitive every token, which costs more than the product.
constexpr int64_t kLoopRows = 4;

// s (rows x cols, leading dimension kLd) = scale * q k^T over `dim` columns.
BATON_SIMD_CLONES void ScoresByLoop(const float* q, int64_t q_ld, const float* k, int64_t k_ld,
                                    int64_t rows, int64_t cols, int64_t dim, float scale,
                                    float* s) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j)
      s[i * kLd + j] = scale * DotF(q + i * q_ld, k + j * k_ld, dim);
  }
}

// o (rows x dim, leading dimension o_ld) += p v, keys in order.
BATON_SIMD_CLONES void AccumulateByLoop(const float* p, const float* v, int64_t v_ld, int64_t rows,
                                        int64_t cols, int64_t dim, float* o, int64_t o_ld) {
  for (int64_t i = 0; i < rows; ++i) {
    float* out = o + i * o_ld;
    for (int64_t j = 0; j < cols; ++j) {
      const float weight = p[i * kLd + j];
      const float* value = v + j * v_ld;
      for (int64_t d = 0; d < dim; ++d) out[d] += weight * value[d];
    }
  }
}

}  // namespace

int64_t CachedAttentionScratch(int threads) { return threads * kFlashForwardScratch; }

void CachedAttentionForward(const CachedAttentionArgs& args, float* scratch, ThreadPool* pool) {
  const AttentionShape& shape = args.shape;
  const int64_t queries = shape.seq;
  const int64_t dim = shape.head_dim();
  const int64_t heads = shape.heads;
  const int64_t c = shape.channels;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  const int64_t per_thread = kFlashForwardScratch;
  const int64_t keys = args.past + queries;
  ParallelForWithSlot(shape.batch * heads, pool, queries * keys * dim, [&](int64_t bh, int slot) {
    const int64_t b = bh / heads;
    const int64_t column = (bh % heads) * dim;
    const float* q = args.q + b * args.q_batch + column;
    const float* k = args.k + b * args.kv_batch + column;
    const float* v = args.v + b * args.kv_batch + column;
    float* s = scratch + slot * per_thread;
    float* m = s + kFlashRows * kFlashKeys;
    float* l = m + kFlashRows;
    float* o = args.out + b * queries * c + column;
    for (int64_t r0 = 0; r0 < queries; r0 += kFlashRows) {
      const int64_t rows = std::min(kFlashRows, queries - r0);
      const int64_t first = args.past + r0;  // the block's first query position
      float* o_block = o + r0 * c;
      std::fill(m, m + rows, -INFINITY);
      std::fill(l, l + rows, 0.0f);
      for (int64_t i = 0; i < rows; ++i) std::fill(o_block + i * c, o_block + i * c + dim, 0.0f);
      // Key blocks [c0, c0 + cols) up to the block's last query position first + rows - 1.
      for (int64_t c0 = 0; c0 < first + rows; c0 += kFlashKeys) {
        const int64_t cols = std::min(kFlashKeys, first + rows - c0);
        const float* q_block = q + r0 * args.q_ld;
        const float* k_block = k + c0 * args.kv_ld;
        const float* v_block = v + c0 * args.kv_ld;
        if (rows < kLoopRows) {
          ScoresByLoop(q_block, args.q_ld, k_block, args.kv_ld, rows, cols, dim, scale, s);
        } else {
          Sgemm(false, true, rows, cols, dim, scale, q_block, args.q_ld, k_block, args.kv_ld, 0.0f,
                s, kLd);
        }
        OnlineSoftmaxBlock(s, rows, cols, first, c0, nullptr, m, l, o_block, c, dim);
        if (args.bf16_probs) RoundBlockToBf16(s, rows, cols);
        if (rows < kLoopRows) {
          AccumulateByLoop(s, v_block, args.kv_ld, rows, cols, dim, o_block, c);
        } else {
          Sgemm(false, false, rows, dim, cols, 1.0f, s, kLd, v_block, args.kv_ld, 1.0f, o_block, c);
        }
      }
      for (int64_t i = 0; i < rows; ++i) {
        const float inv = 1.0f / l[i];
        float* row = o_block + i * c;
        for (int64_t d = 0; d < dim; ++d) row[d] *= inv;
      }
    }
  });
}

}  // namespace baton::cpu
