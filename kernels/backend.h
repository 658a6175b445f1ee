// The kernel backend interface: every numeric operation Baton runs, for one device.
//
// A Backend owns nothing but its allocator and (on GPUs) its streams; tensors are passed in.
// Work may be queued asynchronously (CUDA streams): results are visible to later calls on the
// same backend in order, and to the host after Synchronize(). The CPU backend runs each call to
// completion before returning.
//
// Conventions (shapes in comments, N = rows = B*T):
// - Every gradient output named d* ACCUMULATES (+=) into the tensor given, so zeroing gradients is
//   one Zero() per tensor; the exception is CrossEntropyBackward, which writes (see there).
// - Activations and parameters may be f32, bf16 or f16 (16-bit storage, f32 arithmetic);
//   LayerNorm statistics, losses and optimizer state are always f32; token ids are i32.
// - Results must be deterministic: the same inputs give the same bits, whatever the thread count.
//   Reductions run in a fixed order (no atomics, no thread-count-dependent splits).
#pragma once

#include <memory>

#include "core/memory.h"
#include "core/tensor.h"
#include "kernels/rope.h"

namespace baton {

// A target that is not counted by the cross-entropy (Backend::CrossEntropyForward).
inline constexpr int32_t kIgnoreTarget = -1;

struct AdamWConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled (AdamW); the caller passes 0 for tensors it exempts
  int64_t step = 1;           // 1-based, for bias correction
};

// An attention's heads: `query` heads of size D, and `kv` key/value heads (grouped-query
// attention: kv divides query, query head h reading kv head h / (query / kv); kv == query is
// multi-head attention, kv == 1 multi-query). A qkv tensor holds, per row, the queries
// (query*D columns), then the keys (kv*D), then the values (kv*D), head-major within each.
struct AttentionHeads {
  int query = 1;
  int kv = 1;
  bool grouped() const { return kv != query; }
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual Allocator& allocator() = 0;
  // Blocks until all work queued on this backend has finished.
  virtual void Synchronize() = 0;

  // ---- memory
  virtual void Zero(Tensor& t) = 0;
  // dst = src: same shape; converts between float dtypes; either side may be on the host.
  virtual void Copy(const Tensor& src, Tensor& dst) = 0;

  // ---- dense algebra
  // out = op(a) @ op(b) (+ bias), or out += ... when accumulate. op(x) = x^T when its trans flag
  // is set. a: (M,K) or (K,M); b: (K,N) or (N,K); out: (M,N); bias: (N), broadcast over rows.
  virtual void Matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& out,
                      bool accumulate, const Tensor* bias = nullptr) = 0;
  // dbias (C) += column sums of dout (N,C)
  virtual void BiasBackward(const Tensor& dout, Tensor& dbias) = 0;

  // INT8 weights (kernels/quantize.h): out (K,N), any float dtype, = float(q[k][n]) * scale[n]
  // computed in f32 and rounded to out's dtype; q (K,N) i8, scale (N) f32. The Linear layers of
  // an INT8 model dequantise each weight into workspace just before its GEMM.
  virtual void DequantizeInt8(const Tensor& q, const Tensor& scale, Tensor& out) = 0;

  // Pruning masks: t (any float dtype) = 0 where mask (u8, t's shape) is 0; elsewhere t keeps
  // its bits.
  virtual void ApplyMask(Tensor& t, const Tensor& mask) = 0;

  // ---- GPT layers
  // out (B,T,C) = wte[tokens[b,t]] + wpe[pos(b,t)]; tokens (B,T) i32; wte (V,C); wpe (maxT,C),
  // T <= maxT. pos(b,t) = t, or with packed documents t - segment_starts[b,t] (see below).
  // wpe may be undefined: out = wte[tokens] (Llama, whose positions are rotary).
  virtual void EmbeddingForward(const Tensor& tokens, const Tensor& segment_starts,
                                const Tensor& wte, const Tensor& wpe, Tensor& out) = 0;
  void EmbeddingForward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& out) {
    EmbeddingForward(tokens, Tensor(), wte, wpe, out);
  }
  // dwte[tokens[b,t]] += dout[b,t]; dwpe[pos(b,t)] += dout[b,t], summed in (b,t) order per
  // position. Either grad may be undefined (skipped).
  virtual void EmbeddingBackward(const Tensor& tokens, const Tensor& segment_starts,
                                 const Tensor& dout, Tensor& dwte, Tensor& dwpe) = 0;
  void EmbeddingBackward(const Tensor& tokens, const Tensor& dout, Tensor& dwte, Tensor& dwpe) {
    EmbeddingBackward(tokens, Tensor(), dout, dwte, dwpe);
  }
  // Tensor parallelism splits the token table by vocabulary rows (Megatron's vocab-parallel
  // embedding): a rank holds wte (Vs,C) = the rows [vocab_begin, vocab_begin + Vs), and ranks'
  // Vs may differ. out (B,T,C) = wte_row(tokens[b,t]) + wpe[pos(b,t)], where wte_row(id) =
  // wte[id - vocab_begin] for an id in the shard and 0 for any other id >= 0 (another rank's);
  // wpe may be undefined (no position term). Everything else as EmbeddingForward. Summing the
  // ranks' outputs, wpe given to one rank only, gives EmbeddingForward's out.
  virtual void EmbeddingShardForward(const Tensor& tokens, const Tensor& segment_starts,
                                     int64_t vocab_begin, const Tensor& wte, const Tensor& wpe,
                                     Tensor& out) = 0;
  // dwte (Vs,C): dwte[id - vocab_begin] += dout[b,t] for the ids in the shard (others skipped);
  // dwpe as EmbeddingBackward. Either may be undefined. Same summation order as
  // EmbeddingBackward, so the ranks' dwte side by side are its dwte, bit for bit.
  virtual void EmbeddingShardBackward(const Tensor& tokens, const Tensor& segment_starts,
                                      int64_t vocab_begin, const Tensor& dout, Tensor& dwte,
                                      Tensor& dwpe) = 0;
  // Per row of x (N,C): out = (x - mean) * rstd * weight + bias, eps 1e-5, biased variance;
  // mean, rstd (N) f32 are written for backward.
  virtual void LayerNormForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                Tensor& out, Tensor& mean, Tensor& rstd) = 0;
  // dx (N,C), dweight (C), dbias (C) accumulate.
  virtual void LayerNormBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                 const Tensor& mean, const Tensor& rstd, Tensor& dx,
                                 Tensor& dweight, Tensor& dbias) = 0;
  // out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), elementwise.
  virtual void GeluForward(const Tensor& x, Tensor& out) = 0;
  // dx += gelu'(x) * dout
  virtual void GeluBackward(const Tensor& x, const Tensor& dout, Tensor& dx) = 0;
  // Packed documents (data.packing, docs/data.md): segment_starts (B,T) i32, where
  // segment_starts[b,t] is the first position of the document holding token t of row b
  // (0 <= segment_starts[b,t] <= t, non-decreasing in t). Where it is given, attention is causal
  // AND within the document: query t attends keys s with segment_starts[b,t] <= s <= t, and the
  // embedding's position of token t is t - segment_starts[b,t]. Undefined (the overloads without
  // it) means one document per row: plain causal attention, positions 0..T-1. The attention
  // kernels read it only as each query's first key, so they take any non-decreasing starts with
  // start <= t: a sliding window narrows packed documents' that way (model/sublayer_ops.cc).
  //
  // Causal self-attention. qkv (B,T,3C): q, k, v are its column thirds; head h uses columns
  // h*D..(h+1)*D of each, D = C / num_heads. out (B,T,C): head h's output in columns h*D..;
  // probs (B,NH,T,T) f32 = softmax(q k^T / sqrt(D), causal) is written for backward (entries
  // outside each row's keys are 0).
  virtual void AttentionForward(const Tensor& qkv, const Tensor& segment_starts, int num_heads,
                                Tensor& out, Tensor& probs) = 0;
  void AttentionForward(const Tensor& qkv, int num_heads, Tensor& out, Tensor& probs) {
    AttentionForward(qkv, Tensor(), num_heads, out, probs);
  }
  // dqkv (B,T,3C) accumulates, given dout (B,T,C) and the forward's qkv, segment_starts and probs.
  virtual void AttentionBackward(const Tensor& dout, const Tensor& qkv,
                                 const Tensor& segment_starts, const Tensor& probs, int num_heads,
                                 Tensor& dqkv) = 0;
  void AttentionBackward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, int num_heads,
                         Tensor& dqkv) {
    AttentionBackward(dout, qkv, Tensor(), probs, num_heads, dqkv);
  }
  // The same attention computed flash-style (FlashAttention-2): key blocks streamed with an
  // online softmax, no T x T matrix held. out as AttentionForward's (equal up to rounding);
  // lse (B,NH,T) f32 = log sum_s exp(q_t k_s / sqrt(D)) over the keys s that t attends, written
  // for backward.
  virtual void FlashAttentionForward(const Tensor& qkv, const Tensor& segment_starts, int num_heads,
                                     Tensor& out, Tensor& lse) = 0;
  void FlashAttentionForward(const Tensor& qkv, int num_heads, Tensor& out, Tensor& lse) {
    FlashAttentionForward(qkv, Tensor(), num_heads, out, lse);
  }
  // dqkv (B,T,3C) accumulates, given dout (B,T,C) and the forward's qkv, segment_starts, out and
  // lse; each block's probabilities are recomputed as exp(S - lse).
  virtual void FlashAttentionBackward(const Tensor& dout, const Tensor& qkv,
                                      const Tensor& segment_starts, const Tensor& out,
                                      const Tensor& lse, int num_heads, Tensor& dqkv) = 0;
  void FlashAttentionBackward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                              const Tensor& lse, int num_heads, Tensor& dqkv) {
    FlashAttentionBackward(dout, qkv, Tensor(), out, lse, num_heads, dqkv);
  }
  // Inference with a key-value cache (baton generate): causal attention of Tq new positions
  // past .. past+Tq-1 over every position so far. qkv (B,Tq,3C) as AttentionForward's, for the new
  // positions only; k_cache, v_cache (B,S,C) in qkv's dtype, S >= past + Tq, rows [0, past)
  // holding the keys and values of the earlier positions. Writes the new keys and values (qkv's
  // column thirds, bit for bit) into rows [past, past+Tq) of the caches, then out (B,Tq,C) =
  // softmax(q k^T / sqrt(D)) v where new query i sees cached rows 0 .. past+i. With past = 0 and
  // Tq = T this is AttentionForward's out (equal up to rounding). Rows past past+Tq are not read.
  virtual void CachedAttentionForward(const Tensor& qkv, int num_heads, int64_t past,
                                      Tensor& k_cache, Tensor& v_cache, Tensor& out) = 0;

  // ---- Llama layers (model.preset: llama; docs/model.md)
  // Per row of x (N,C): out = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps); rstd (N) f32
  // is written for backward.
  virtual void RmsNormForward(const Tensor& x, const Tensor& weight, float eps, Tensor& out,
                              Tensor& rstd) = 0;
  // dx (N,C) and dweight (C) accumulate, given the forward's x and rstd.
  virtual void RmsNormBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                               const Tensor& rstd, Tensor& dx, Tensor& dweight) = 0;
  // SwiGLU: gate_up (N,2H) holds the gate in columns [0,H) and the up projection in [H,2H);
  // out (N,H) = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
  virtual void SwiGluForward(const Tensor& gate_up, Tensor& out) = 0;
  // dgate_up (N,2H) accumulates, given dout (N,H) and the forward's gate_up.
  virtual void SwiGluBackward(const Tensor& gate_up, const Tensor& dout, Tensor& dgate_up) = 0;
  // Rotary position embeddings (kernels/rope.h), in place on the query and key heads of qkv
  // (B,T,(NH+2KVH)D) (AttentionHeads' layout); the values are left alone. Token t of row b sits at
  // position start + t, or with packed documents t - segment_starts[b,t] (start must then be 0).
  // `inverse` turns by minus the angle: the transpose, so applied to the gradient of the
  // rotated q and k it gives the gradient of the unrotated ones.
  virtual void RotaryEmbedding(Tensor& qkv, const Tensor& segment_starts, int64_t start,
                               const AttentionHeads& heads, const RopeConfig& rope,
                               bool inverse) = 0;
  // Grouped-query attention through the multi-head kernels: out (B,T,3C), C = NH*D, takes qkv's
  // (B,T,(NH+2KVH)D) queries as they are and key/value head j as heads j*G .. (j+1)*G - 1,
  // G = NH/KVH (Hugging Face's repeat_kv). Same dtype, so the same bits.
  virtual void RepeatKv(const Tensor& qkv, const AttentionHeads& heads, Tensor& out) = 0;
  // Its transpose: dqkv (B,T,(NH+2KVH)D) accumulates dout's (B,T,3C) queries, and for key/value
  // head j the sum of dout's heads j*G .. (j+1)*G - 1, added in head order in f32.
  virtual void RepeatKvBackward(const Tensor& dout, const AttentionHeads& heads, Tensor& dqkv) = 0;
  // Columns [src_col, src_col + cols) of every row of src into columns [dst_col, dst_col + cols)
  // of the same row of dst: both contiguous with the same rows (every dim but the last) and
  // dtype (Qwen3's q/k norms take the query and key heads out of qkv and put them back).
  virtual void CopyColumns(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col,
                           int64_t cols) = 0;

  // ---- mixture of experts (model/moe_sublayer.cc): a token's k choices as slots (N,k) i32, the
  // row each choice takes in the experts' permuted rows (grouped by expert), or -1 where the
  // choice was dropped (over an expert's capacity); no two choices share a row. weights (N,k)
  // f32 may be undefined: 1 for every choice.
  // out (R,C) rows slots[n,j] = weights[n,j] * x[n] for x (N,C), in f32, rounded to out's dtype;
  // WRITES those rows and leaves the others as they are.
  virtual void MoeDispatch(const Tensor& x, const Tensor& slots, const Tensor& weights,
                           Tensor& out) = 0;
  // out (N,C) row n += the sum over j in order of weights[n,j] * y[slots[n,j]] (y (R,C)),
  // added in f32 to out's row and rounded once.
  virtual void MoeCombine(const Tensor& y, const Tensor& slots, const Tensor& weights,
                          Tensor& out) = 0;
  // dweights (N,k) f32 [n,j] += dot(dout[n], y[slots[n,j]]) (dout (N,C), y (R,C)), the dot
  // product summed in f32 in column order; dropped choices add nothing.
  virtual void MoeCombineWeightsBackward(const Tensor& dout, const Tensor& y, const Tensor& slots,
                                         Tensor& dweights) = 0;

  // loss (1) f32 = mean over counted rows of -log softmax(logits)[target]; logits (N,V); targets
  // (N) i32, each in [0, V) or kIgnoreTarget (-1: the row is not counted; packed documents, where
  // the target lies in the next document). The sum is over counted rows in row order, divided by
  // their number; 0 when no row is counted.
  virtual void CrossEntropyForward(const Tensor& logits, const Tensor& targets, Tensor& loss) = 0;
  // dlogits = grad_scale * (softmax(logits) - onehot(targets)) / (counted rows), and 0 on rows
  // not counted. WRITES, and dlogits may be the same tensor as logits (computed in place to save
  // a (N,V) buffer).
  virtual void CrossEntropyBackward(const Tensor& logits, const Tensor& targets, float grad_scale,
                                    Tensor& dlogits) = 0;
  // Vocab-parallel cross-entropy (tensor parallelism: each rank holds the logits of its vocabulary
  // rows, no rank the whole (N,V)). Each rank computes its stats, the ranks all-gather them, each
  // combines them into the loss and the row statistics its backward needs.
  //
  // The local half: logits (N,Vs) any float dtype, columns = vocabulary [vocab_begin,
  // vocab_begin + Vs); targets (N) i32 in [0, V) or kIgnoreTarget. stats (N,3) f32 per row: the
  // row's max m, sum over the row of exp(l - m), and the target's logit when the target lies in
  // the shard (0 otherwise, and 0 on kIgnoreTarget rows).
  virtual void CrossEntropyShardStats(const Tensor& logits, const Tensor& targets,
                                      int64_t vocab_begin, Tensor& stats) = 0;
  // all_stats (T,N,3) f32: the T ranks' stats in rank order. Per row: M = max over t of m_t,
  // S = sum over t in rank order of s_t * exp(m_t - M), z = sum over t of the third column.
  // row_stats (N,2) f32 = {M, S} (kept for backward); loss (1) f32 = sum over counted rows, in
  // row order, of log(S) + M - z, divided by their number (0 when none is counted): the same
  // accumulation as CrossEntropyForward, equal to it up to rounding (bit for bit when T = 1).
  virtual void CrossEntropyShardCombine(const Tensor& all_stats, const Tensor& targets,
                                        Tensor& row_stats, Tensor& loss) = 0;
  // dlogits (N,Vs) = grad_scale * (exp(l - M) / S - onehot(target - vocab_begin)) / (counted
  // rows), 0 on rows not counted, with {M, S} from row_stats (N,2) f32. WRITES, and dlogits may be
  // the same tensor as logits, as CrossEntropyBackward.
  virtual void CrossEntropyShardBackward(const Tensor& logits, const Tensor& targets,
                                         int64_t vocab_begin, const Tensor& row_stats,
                                         float grad_scale, Tensor& dlogits) = 0;

  // ---- elementwise
  virtual void Add(const Tensor& a, const Tensor& b, Tensor& out) = 0;  // out = a + b
  virtual void Accumulate(const Tensor& x, Tensor& acc) = 0;            // acc += x
  virtual void Scale(Tensor& t, float factor) = 0;                      // t *= factor

  // ---- reductions and the optimizer
  // Sum of squares in double, in a fixed order (blocks of a fixed size, combined in order).
  virtual double SumOfSquares(const Tensor& t) = 0;
  // False if any element is inf or NaN.
  virtual bool AllFinite(const Tensor& t) = 0;
  // One AdamW step on param (f32) with g = grad * grad_scale (grad any float dtype), m, v f32:
  //   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
  //   param *= 1 - lr * weight_decay
  //   param -= lr / (1 - b1^step) * m / (sqrt(v) / sqrt(1 - b2^step) + eps)
  // (PyTorch's torch.optim.AdamW order of operations, so an independent reference agrees.)
  virtual void AdamW(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                     const AdamWConfig& config, float grad_scale) = 0;
  // The same step with m and v stored block-wise in 8 bits (kernels/quantize.h): m, v (u8 codes,
  // param's shape) into SignedQuantMap / UnsignedQuantMap, m_absmax, v_absmax (f32,
  // QuantBlocks(numel)). Per block of kQuantBlock elements: dequantise m and v, update them and
  // param exactly as AdamW does (in f32), then requantise both with the block's new absmax.
  virtual void AdamW8bit(Tensor& param, const Tensor& grad, Tensor& m, Tensor& m_absmax, Tensor& v,
                         Tensor& v_absmax, const AdamWConfig& config, float grad_scale) = 0;
};

// The CPU backend: oneDNN matmuls and plain C++ loops, `num_threads` threads for both.
std::unique_ptr<Backend> MakeCpuBackend(MemoryLedger& ledger, int num_threads);

// The CPU backend in meta mode (a ledger-only backend): tensors made through its allocator are
// meta tensors (core/tensor.h) and every call validates its arguments and books exactly the
// workspace and staging the CPU backend books, without computing. SumOfSquares returns 0,
// AllFinite true; copies move nothing. The memory planner runs the real stage model, optimizer
// and engine on it (planner/memory_planner.h).
std::unique_ptr<Backend> MakeCpuMetaBackend(MemoryLedger& ledger, int num_threads);

// True when `backend` makes meta tensors (it books memory but computes nothing).
inline bool IsMeta(Backend& backend) { return backend.allocator().is_meta(); }

}  // namespace baton
