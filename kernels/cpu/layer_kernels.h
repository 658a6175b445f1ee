// The CPU backend's f32 kernels for the GPT layers other than attention: embedding, LayerNorm,
// GELU, cross-entropy, and the bias helpers. Raw contiguous f32 pointers, shapes as arguments
// (LayerNorm, GELU and the column sums also take bf16 activations, BF16 of fast_math.h, read and
// written directly with f32 arithmetic: the bits of converting them to f32 and back);
// arguments are already validated by the caller (CpuBackend). Semantics are those of the
// matching Backend methods (kernels/backend.h): gradients accumulate unless stated.
//
// Every function is deterministic for any `pool`: rows are independent, and sums across rows
// run in a fixed order. Internal to kernels/cpu.
#pragma once

#include <cstdint>

namespace baton::cpu {

class ThreadPool;
struct BF16;  // fast_math.h

// out (rows,cols) = row (cols) broadcast, or out += row when accumulate.
void BroadcastRows(const float* row, float* out, int64_t rows, int64_t cols, bool accumulate,
                   ThreadPool* pool);
// acc (cols) += column sums of x (rows,cols); each column summed over rows in order.
void ColumnSumsAccumulate(const float* x, int64_t rows, int64_t cols, float* acc, ThreadPool* pool);
void ColumnSumsAccumulate(const BF16* x, int64_t rows, int64_t cols, float* acc, ThreadPool* pool);

// The rows [begin, begin + rows) of the vocabulary that a token table (or a block of logits'
// columns) holds: all of it, or one tensor-parallel rank's shard (Backend::EmbeddingShardForward).
struct VocabRows {
  int64_t begin = 0;
  int64_t rows = 0;
  // The row of `id` in the table, or -1 when the id lies outside it.
  int64_t Local(int64_t id) const { return id >= begin && id < begin + rows ? id - begin : -1; }
};

// out (B,T,C) = wte[tokens] + wpe[pos], pos = t, or t - segment_starts[b,t] when segment_starts
// (B,T) is not null (packed documents); wte[tokens] alone when wpe is null. wte holds the rows
// `vocab` of the vocabulary: a token outside them has no token term (wpe[pos] or 0). Token ids
// and starts must already be valid.
void EmbeddingForward(const int32_t* tokens, const int32_t* segment_starts, VocabRows vocab,
                      const float* wte, const float* wpe, float* out, int64_t batch, int64_t seq,
                      int64_t channels, ThreadPool* pool);
// dwte[tokens[b,t] - vocab.begin] += dout[b,t] for the tokens in `vocab` (others skipped);
// dwpe[pos] += dout[b,t] (pos as above); each summed in (b,t) order. Either output may be null.
void EmbeddingBackward(const int32_t* tokens, const int32_t* segment_starts, VocabRows vocab,
                       const float* dout, float* dwte, float* dwpe, int64_t batch, int64_t seq,
                       int64_t channels, ThreadPool* pool);

void LayerNormForward(const float* x, const float* weight, const float* bias, float* out,
                      float* mean, float* rstd, int64_t rows, int64_t cols, ThreadPool* pool);
void LayerNormForward(const BF16* x, const float* weight, const float* bias, BF16* out, float* mean,
                      float* rstd, int64_t rows, int64_t cols, ThreadPool* pool);
// LayerNorm backward runs in blocks of this many rows: each block's partial weight/bias
// gradients, then their sums in block order (fixed, so results don't depend on the threads).
inline constexpr int64_t kLayerNormRowBlock = 32;
// Floats of scratch for the blocks' partial weight/bias gradients (2 * cols per block).
int64_t LayerNormBackwardScratch(int64_t rows, int64_t cols);
// The two passes, the first run by the caller block by block (in parallel), then the second.
// Block: dx of its rows (pointers at the block's first row; at most kLayerNormRowBlock rows)
// accumulated, and its partials written to `partials` (its 2 * cols floats of the scratch).
// Reduce: the `blocks` partials of `scratch` summed in block order, added to dweight and dbias.
void LayerNormBackwardBlock(const float* dout, const float* x, const float* weight,
                            const float* mean, const float* rstd, float* dx, float* partials,
                            int64_t rows, int64_t cols);
void LayerNormBackwardBlock(const BF16* dout, const BF16* x, const float* weight, const float* mean,
                            const float* rstd, BF16* dx, float* partials, int64_t rows,
                            int64_t cols);
void LayerNormBackwardReduce(const float* scratch, int64_t blocks, float* dweight, float* dbias,
                             int64_t cols, ThreadPool* pool);

void GeluForward(const float* x, float* out, int64_t n, ThreadPool* pool);
void GeluForward(const BF16* x, BF16* out, int64_t n, ThreadPool* pool);
void GeluBackward(const float* x, const float* dout, float* dx, int64_t n, ThreadPool* pool);
void GeluBackward(const BF16* x, const BF16* dout, BF16* dx, int64_t n, ThreadPool* pool);

// row_losses (rows) = -log softmax(logits row)[target], 0 where the target is kIgnoreTarget.
// Targets must already be in range (or kIgnoreTarget).
void CrossEntropyRowLosses(const float* logits, const int32_t* targets, float* row_losses,
                           int64_t rows, int64_t vocab, ThreadPool* pool);
// The vocab-parallel cross-entropy's local half (Backend::CrossEntropyShardStats): stats
// (rows,3) = {max, sum of exp(l - max), the target's logit or 0} per row of logits (rows,
// vocab.rows), whose columns are the vocabulary rows `vocab`.
void CrossEntropyShardStats(const float* logits, const int32_t* targets, VocabRows vocab,
                            float* stats, int64_t rows, ThreadPool* pool);
// Combines `ranks` ranks' stats (ranks,rows,3) in rank order (Backend::CrossEntropyShardCombine):
// row_stats (rows,2) = {M, S}, row_losses (rows) = (M - z) + log(S), 0 where the target is
// kIgnoreTarget.
void CrossEntropyCombineStats(const float* all_stats, const int32_t* targets, int64_t ranks,
                              int64_t rows, float* row_stats, float* row_losses);
// dlogits = factor * (exp(l - M) / S - onehot(targets - vocab.begin)), 0 on rows whose target is
// kIgnoreTarget, for logits (rows, vocab.rows) whose columns are the vocabulary rows `vocab`.
// {M, S} per row from row_stats (rows,2), or when it is null the row's own max and sum of exps
// (softmax; vocab is then the whole vocabulary). WRITES; dlogits may equal logits.
void CrossEntropyBackward(const float* logits, const int32_t* targets, VocabRows vocab,
                          const float* row_stats, float factor, float* dlogits, int64_t rows,
                          ThreadPool* pool);

}  // namespace baton::cpu
