// The CUDA kernels' launchers: plain host functions, implemented in the .cu files, that the
// backend's C++20 host code (cuda_backend*.cc) calls with raw device pointers, dtypes and shapes.
// Arguments are already validated; each launcher queues its kernels on `stream` and checks the
// launch (BATON_CUDA_CHECK_LAUNCH). Float tensors may be f32, bf16 or f16 (f32 arithmetic);
// statistics, probabilities and optimizer state are f32; ids are i32.
//
// Determinism: no launcher uses floating-point atomics; every sum runs in an order fixed by the
// shape alone (per-thread strided loops, then fixed-shape shuffle/shared-memory trees, then
// partials combined in index order), so equal inputs give equal bits on the same GPU model.
//
// Ids out of range (tokens, targets) are not read or written through: the kernel records the
// first one in `id_error` (device memory) and the backend raises it at its next synchronising
// call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace baton::cuda {

// Written by kernels that find an id outside [0, bound); copied to the host at a sync.
struct IdError {
  int set;  // 0 until the first bad id
  int value;
  int bound;
  int64_t index;
};
static_assert(sizeof(IdError) % 4 == 0, "IdError is allocated as i32 words");

// The vocabulary rows [begin, begin + rows) that a token table, or a block of logits' columns,
// holds. `whole`: it is the whole vocabulary (begin 0), and ids outside it are errors. Otherwise
// it is one tensor-parallel rank's shard (Backend::EmbeddingShardForward): ids >= 0 outside it
// are other ranks' (no token term, no gradient, no one-hot), and only negative ids are errors
// (recorded with bound kAnyIdBound).
struct VocabRows {
  int64_t begin = 0;
  int64_t rows = 0;
  bool whole = true;
};
inline constexpr int kAnyIdBound = 0x7fffffff;

// ---- elementwise.cu
void LaunchCast(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
                cudaStream_t stream);
// out = a + b
void LaunchAdd(const void* a, DType a_dtype, const void* b, DType b_dtype, void* out,
               DType out_dtype, int64_t n, cudaStream_t stream);
// acc += x
void LaunchAccumulate(const void* x, DType x_dtype, void* acc, DType acc_dtype, int64_t n,
                      cudaStream_t stream);
// t *= factor
void LaunchScale(void* t, DType dtype, float factor, int64_t n, cudaStream_t stream);
// out[r][c] = float(q[r][c]) * scale[c] (one f32 multiply), stored as out_dtype (INT8 weights,
// Backend::DequantizeInt8): bit for bit the CPU backend's result.
// t[i] = 0 where mask[i] == 0 (a pruning mask, Backend::ApplyMask); other elements untouched.
void LaunchApplyMask(void* t, DType dtype, const uint8_t* mask, int64_t n, cudaStream_t stream);
void LaunchDequantizeInt8(const int8_t* q, const float* scale, void* out, DType out_dtype,
                          int64_t rows, int64_t cols, cudaStream_t stream);
// out (rows,cols) = row (cols) broadcast, or out += row when accumulate.
void LaunchBroadcastRows(const void* row, DType row_dtype, void* out, DType out_dtype, int64_t rows,
                         int64_t cols, bool accumulate, cudaStream_t stream);

// Sum of squares in double, in fixed blocks of kSumOfSquaresChunk elements combined in order:
// partials needs SumOfSquaresBlocks(n) doubles; the total lands in *total (device).
inline constexpr int64_t kSumOfSquaresChunk = 4096;
inline int64_t SumOfSquaresBlocks(int64_t n) {
  return (n + kSumOfSquaresChunk - 1) / kSumOfSquaresChunk;
}
void LaunchSumOfSquares(const void* t, DType dtype, int64_t n, double* partials, double* total,
                        cudaStream_t stream);
// *flag (device, zeroed by the caller) becomes 1 if any element is inf or NaN.
void LaunchNonFiniteFlag(const void* t, DType dtype, int64_t n, int* flag, cudaStream_t stream);

// The scalars of one AdamW step, formed on the host exactly as the CPU backend forms them.
struct AdamWScalars {
  float beta1, beta2, one_minus_beta1, one_minus_beta2;
  float decay;                  // 1 - lr * weight_decay
  float step_size;              // lr / (1 - beta1^step)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  float eps;
  float grad_scale;
};
// One AdamW step over n elements, in torch.optim.AdamW's order of f32 operations (no FMA
// contraction), so it matches the CPU backend bit for bit.
void LaunchAdamW(float* param, const void* grad, DType grad_dtype, float* m, float* v, int64_t n,
                 const AdamWScalars& scalars, cudaStream_t stream);
// The same step with m and v stored block-wise in 8 bits (Backend::AdamW8bit, kernels/quantize.h):
// m, v are n u8 codes into SignedQuantMap / UnsignedQuantMap, m_absmax, v_absmax QuantBlocks(n)
// floats. One 256-thread block per quantisation block: dequantise, the AdamW step as above, the
// block's absmax by a max tree, then requantise to the nearest code (the code books are a kernel
// parameter); bit for bit the CPU backend's result.
void LaunchAdamW8bit(float* param, const void* grad, DType grad_dtype, uint8_t* m, float* m_absmax,
                     uint8_t* v, float* v_absmax, int64_t n, const AdamWScalars& scalars,
                     cudaStream_t stream);

// ---- layers.cu
// out (B*T,C) = wte[tokens] + wpe[pos], pos = t, or t - segment_starts[b,t] when
// segment_starts (B,T) is not null (packed documents; starts already checked). wpe null (Llama,
// rotary positions): out = wte[tokens], and wpe_dtype is not read. wte (vocab.rows, C) holds the
// rows `vocab`: a token of another rank's shard has no token term (out = wpe[pos], or 0).
void LaunchEmbeddingForward(const int32_t* tokens, const int32_t* segment_starts, const void* wte,
                            DType wte_dtype, const void* wpe, DType wpe_dtype, void* out,
                            DType out_dtype, int64_t batch, int64_t seq, int64_t channels,
                            VocabRows vocab, IdError* id_error, cudaStream_t stream);
// positions (rows) = r % seq - segment_starts[r]: packed documents' positions, which the
// embedding backward scatters dwpe by (LaunchEmbeddingBackwardTokens with positions as ids).
void LaunchPositions(const int32_t* segment_starts, int64_t rows, int64_t seq, int32_t* positions,
                     cudaStream_t stream);
// Workspace bytes for LaunchEmbeddingBackwardTokens with n = B*T rows.
size_t EmbeddingBackwardWorkspaceBytes(int64_t rows);
// dwte[tokens[r] - vocab.begin] += dout[r] for every row r whose token lies in `vocab` (dwte
// (vocab.rows, C)): rows are stably radix-sorted by token, then each run of equal tokens is
// summed in row order by one thread per channel (no atomics).
void LaunchEmbeddingBackwardTokens(const int32_t* tokens, const void* dout, DType dout_dtype,
                                   void* dwte, DType dwte_dtype, int64_t rows, int64_t channels,
                                   VocabRows vocab, void* workspace, size_t workspace_bytes,
                                   IdError* id_error, cudaStream_t stream);

// acc (cols) += column sums of x (rows,cols). `partials` needs ColumnSumsPartials(rows, cols)
// floats: rows are summed in fixed chunks of kColumnSumChunkRows, the chunks in order.
inline constexpr int64_t kColumnSumChunkRows = 256;
inline int64_t ColumnSumChunks(int64_t rows) {
  return (rows + kColumnSumChunkRows - 1) / kColumnSumChunkRows;
}
int64_t ColumnSumsPartials(int64_t rows, int64_t cols);
void LaunchColumnSums(const void* x, DType x_dtype, int64_t rows, int64_t cols, float* partials,
                      void* acc, DType acc_dtype, cudaStream_t stream);
// The second pass alone, for kernels that write their own chunk partials (RMSNorm's dweight):
// acc[c] += sum over chunks, in chunk order, of partials[chunk * cols + c].
void LaunchAddColumnPartials(const float* partials, int64_t chunks, int64_t cols, void* acc,
                             DType acc_dtype, cudaStream_t stream);

void LaunchLayerNormForward(const void* x, DType x_dtype, const void* weight, DType weight_dtype,
                            const void* bias, DType bias_dtype, void* out, DType out_dtype,
                            float* mean, float* rstd, int64_t rows, int64_t cols,
                            cudaStream_t stream);
// dx += ...; dweight += sum_r dout*norm; dbias += sum_r dout. `partials` needs
// 2 * ColumnSumsPartials(rows, cols) floats.
void LaunchLayerNormBackward(const void* dout, DType dout_dtype, const void* x, DType x_dtype,
                             const void* weight, DType weight_dtype, const float* mean,
                             const float* rstd, void* dx, DType dx_dtype, void* dweight,
                             DType dweight_dtype, void* dbias, DType dbias_dtype, float* partials,
                             int64_t rows, int64_t cols, cudaStream_t stream);

void LaunchGeluForward(const void* x, DType x_dtype, void* out, DType out_dtype, int64_t n,
                       cudaStream_t stream);
// dx += gelu'(x) * dout
void LaunchGeluBackward(const void* x, DType x_dtype, const void* dout, DType dout_dtype, void* dx,
                        DType dx_dtype, int64_t n, cudaStream_t stream);

// ---- llama.cu (the Llama layers; semantics as kernels/backend.h's methods)
// RMSNorm over rows of x (rows,cols), one warp per row: out = (x * rstd) * weight,
// rstd[r] = 1 / sqrt(mean(x^2) + eps) (f32 sum of squares).
void LaunchRmsNormForward(const void* x, DType x_dtype, const void* weight, DType weight_dtype,
                          float eps, void* out, DType out_dtype, float* rstd, int64_t rows,
                          int64_t cols, cudaStream_t stream);
// dx += the gradient (one warp per row); dweight += sum_r dout * x * rstd, per chunk of
// kColumnSumChunkRows rows into `partials` (ColumnSumsPartials(rows, cols) floats), the chunks
// then added in order (LaunchAddColumnPartials).
void LaunchRmsNormBackward(const void* dout, DType dout_dtype, const void* x, DType x_dtype,
                           const void* weight, DType weight_dtype, const float* rstd, void* dx,
                           DType dx_dtype, void* dweight, DType dweight_dtype, float* partials,
                           int64_t rows, int64_t cols, cudaStream_t stream);
// SwiGLU on rows of gate_up (rows, 2 hidden): out (rows, hidden) = silu(gate) * up.
void LaunchSwiGluForward(const void* gate_up, DType gate_up_dtype, void* out, DType out_dtype,
                         int64_t rows, int64_t hidden, cudaStream_t stream);
// dgate_up (rows, 2 hidden) += the gradient, given dout (rows, hidden).
void LaunchSwiGluBackward(const void* gate_up, DType gate_up_dtype, const void* dout,
                          DType dout_dtype, void* dgate_up, DType dgate_up_dtype, int64_t rows,
                          int64_t hidden, cudaStream_t stream);
// Mixture of experts (Backend::MoeDispatch, MoeCombine, MoeCombineWeightsBackward): one block per
// token; slots (tokens, k) i32 hold permuted rows of `rows` or -1; weights (tokens, k) f32 may be
// null (1). A slot outside [-1, rows) is skipped (the backend's caller made them; the CPU backend
// checks them). Dispatch writes out rows slots[n,j] = w x[n]; combine adds sum_j w y[slot] to
// out[n] in j order; the weights' gradient adds dot(dout[n], y[slot]) to dweights[n,j], a fixed
// block-sum tree.
void LaunchMoeDispatch(const void* x, DType x_dtype, const int32_t* slots, const float* weights,
                       void* out, DType out_dtype, int64_t tokens, int64_t k, int64_t rows,
                       int64_t cols, cudaStream_t stream);
void LaunchMoeCombine(const void* y, DType y_dtype, const int32_t* slots, const float* weights,
                      void* out, DType out_dtype, int64_t tokens, int64_t k, int64_t rows,
                      int64_t cols, cudaStream_t stream);
void LaunchMoeCombineWeightsBackward(const void* dout, DType dout_dtype, const void* y,
                                     DType y_dtype, const int32_t* slots, float* dweights,
                                     int64_t tokens, int64_t k, int64_t rows, int64_t cols,
                                     cudaStream_t stream);
// Rotary embeddings in place on the first `heads` heads (queries then keys) of each row of qkv
// (batch*seq rows of `row_elements`): the pair (i, i + D/2) of a head turns by
// float(position) * inv_freq[i], negated when inverse. position = start + t, or t -
// segment_starts[b,t] when segment_starts is not null. inv_freq (head_dim / 2 floats, made on
// the host by RopeInverseFrequency) travels as a kernel parameter, so head_dim is at most
// kRopeMaxHeadDim.
inline constexpr int64_t kRopeMaxHeadDim = 512;
struct RopeFrequencies {
  float inv_freq[kRopeMaxHeadDim / 2];
};
void LaunchRotaryEmbedding(void* qkv, DType dtype, const int32_t* segment_starts, int64_t start,
                           int64_t batch, int64_t seq, int64_t row_elements, int64_t heads,
                           int64_t head_dim, const RopeFrequencies& frequencies, bool inverse,
                           cudaStream_t stream);
// Grouped-query attention's key/value repeat on `rows` rows: out (rows, 3 NH D) copies qkv's
// (rows, (NH + 2 KVH) D) queries and gives query head h key/value head h / (NH / KVH); qkv and
// out share `dtype`, so the bits are copied.
void LaunchRepeatKv(const void* qkv, void* out, DType dtype, int64_t rows, int64_t query_heads,
                    int64_t kv_heads, int64_t head_dim, cudaStream_t stream);
// Its transpose: dqkv += dout's queries, and per key/value head the sum of its query heads'
// slices of dout, added in head order in f32.
void LaunchRepeatKvBackward(const void* dout, DType dout_dtype, void* dqkv, DType dqkv_dtype,
                            int64_t rows, int64_t query_heads, int64_t kv_heads, int64_t head_dim,
                            cudaStream_t stream);

// ---- softmax.cu
// Attention's causal softmax, in place on `rows` rows of length `seq` of f32 scores (row i is
// query position i % seq): p = softmax over [0, t], zeros after. When copy is non-null, p is also
// written there in copy_dtype (the operand of the 16-bit P V product).
// With packed documents, segment_starts (B,T) (else null) moves each row's first visible key to
// its document's start: row r of scores is query t = r % seq of batch element
// r / rows_per_batch (rows_per_batch = NH*T); keys before the start are 0 like those after t.
void LaunchCausalSoftmax(float* scores, int64_t rows, int64_t seq, const int32_t* segment_starts,
                         int64_t rows_per_batch, void* copy, DType copy_dtype, cudaStream_t stream);
// In place on dprobs: ds = scale * p * (dp - sum(p * dp)) over [0, t], zeros after; copies as
// above (ds_copy for dS, probs_copy for P, each optional).
void LaunchCausalSoftmaxBackward(const float* probs, float* dprobs, int64_t rows, int64_t seq,
                                 const int32_t* segment_starts, int64_t rows_per_batch, float scale,
                                 void* ds_copy, void* probs_copy, DType copy_dtype,
                                 cudaStream_t stream);

// Backend's kIgnoreTarget, for device code (which does not include kernels/backend.h); the
// backend static_asserts that the two agree.
inline constexpr int32_t kDeviceIgnoreTarget = -1;

// loss[0] = mean over counted rows (target != kIgnoreTarget) of -log softmax(logits row)[target],
// 0 when none is counted; row_losses needs `rows` floats.
void LaunchCrossEntropyForward(const void* logits, DType logits_dtype, const int32_t* targets,
                               float* row_losses, float* loss, int64_t rows, int64_t vocab,
                               IdError* id_error, cudaStream_t stream);
// dlogits (rows, vocab.rows) = factor * (exp(l - M) / S - onehot(target - vocab.begin)), 0 on
// ignored rows, with factor = grad_scale / counted rows, computed into *factor (one device float)
// first; {M, S} per row from row_stats (rows,2), or with row_stats null the row's own max and sum
// of exps (softmax; vocab whole). WRITES; dlogits may be logits.
void LaunchCrossEntropyBackward(const void* logits, DType logits_dtype, const int32_t* targets,
                                VocabRows vocab, const float* row_stats, float grad_scale,
                                float* factor, void* dlogits, DType dlogits_dtype, int64_t rows,
                                IdError* id_error, cudaStream_t stream);
// Vocab-parallel cross-entropy (Backend::CrossEntropyShardStats / Combine). Stats: stats (rows,3)
// = {max, sum of exp(l - max), the target's logit or 0} per row of logits (rows, vocab.rows), a
// shard's columns. Combine: all_stats (ranks,rows,3) in rank order, one thread per row: row_stats
// (rows,2) = {M, S}, row_losses (rows floats) = (M - z) + log S (0 on ignored rows), then loss[0]
// their mean over counted rows as LaunchCrossEntropyForward's.
void LaunchCrossEntropyShardStats(const void* logits, DType logits_dtype, const int32_t* targets,
                                  VocabRows vocab, float* stats, int64_t rows, IdError* id_error,
                                  cudaStream_t stream);
void LaunchCrossEntropyShardCombine(const float* all_stats, const int32_t* targets, int64_t ranks,
                                    int64_t rows, float* row_stats, float* row_losses, float* loss,
                                    IdError* id_error, cudaStream_t stream);

// ---- flash_attention.cu
// Causal attention without a T x T matrix (Backend::FlashAttentionForward/Backward): qkv
// (B,T,3C), out and dout (B,T,C), lse (B,NH,T) f32, D = C/NH. Each is ONE kernel over tiles of
// kFlashTile rows staged in shared memory as f32. The caller checks D <= kFlashMaxHeadDim and
// grids of FlashForwardBlocks / FlashBackwardBlocks blocks (at most 2^31 - 1). Large D needs more
// than 48 KiB of shared memory per block (3 or 4 tiles of 32 x (D|1) floats): the launch raises
// the kernel's limit and fails with CUDA's error on a GPU that has less.
inline constexpr int64_t kFlashTile = 32;
inline constexpr int64_t kFlashMaxHeadDim = 256;
inline int64_t FlashForwardBlocks(int64_t batch, int64_t seq, int64_t heads) {
  return (seq + kFlashTile - 1) / kFlashTile * batch * heads;
}
inline int64_t FlashBackwardBlocks(int64_t batch, int64_t seq, int64_t heads) {
  return 2 * FlashForwardBlocks(batch, seq, heads);
}
// out = softmax(scale Q K^T, causal) V in out_dtype, scale = 1/sqrt(D);
// lse[b,h,t] = log sum_{s<=t} exp(scale q_t.k_s). One block per (query tile, b, h), streaming the
// key tiles up to the diagonal with an online softmax.
// With packed documents, segment_starts (B,T) (else null): query t sees keys
// segment_starts[b,t] .. t only, and a query tile starts streaming at the key tile holding its
// first query's start.
void LaunchFlashAttentionForward(const void* qkv, const int32_t* segment_starts, DType qkv_dtype,
                                 void* out, DType out_dtype, float* lse, int64_t batch, int64_t seq,
                                 int64_t channels, int64_t heads, cudaStream_t stream);
// dqkv += the gradient through that forward, P recomputed as exp(scale Q K^T - lse) and
// Delta_t = dO_t . O_t formed in the kernel. Key blocks (dK, dV of one key tile) and query blocks
// (dQ of one query tile) share one grid: every element of dqkv has one writer, no atomics.
void LaunchFlashAttentionBackward(const void* dout, DType dout_dtype, const void* qkv,
                                  const int32_t* segment_starts, DType qkv_dtype, const void* out,
                                  DType out_dtype, const float* lse, void* dqkv, DType dqkv_dtype,
                                  int64_t batch, int64_t seq, int64_t channels, int64_t heads,
                                  cudaStream_t stream);

// ---- cached_attention.cu
// Attention over a key-value cache (Backend::CachedAttentionForward): qkv (B,Tq,3C) of the new
// positions, k_cache and v_cache (B,S,C) in qkv's dtype, out (B,Tq,C). Copies the new keys and
// values into rows [past, past + Tq) of the caches, then one block per (query, b, h) computes
// softmax(scale q K^T) V over keys 0 .. past + i with an online softmax over key tiles. The
// caller checks D <= kCachedMaxHeadDim and a grid of CachedAttentionBlocks (at most 2^31 - 1).
inline constexpr int64_t kCachedMaxHeadDim = 256;
inline int64_t CachedAttentionBlocks(int64_t batch, int64_t queries, int64_t heads) {
  return batch * queries * heads;
}
void LaunchCachedAttentionForward(const void* qkv, DType dtype, void* k_cache, void* v_cache,
                                  void* out, DType out_dtype, int64_t batch, int64_t queries,
                                  int64_t past, int64_t slots, int64_t channels, int64_t heads,
                                  cudaStream_t stream);

}  // namespace baton::cuda
