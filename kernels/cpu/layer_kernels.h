// The CPU backend's f32 kernels for the GPT layers other than attention: embedding, LayerNorm,
// GELU, cross-entropy, and the bias helpers. Raw contiguous f32 pointers, shapes as arguments;
// arguments are already validated by the caller (CpuBackend). Semantics are those of the
// matching Backend methods (kernels/backend.h): gradients accumulate unless stated.
//
// Every function is deterministic for any `pool`: rows are independent, and sums across rows
// run in a fixed order. Internal to kernels/cpu.
#pragma once

#include <cstdint>

namespace baton::cpu {

class ThreadPool;

// out (rows,cols) = row (cols) broadcast, or out += row when accumulate.
void BroadcastRows(const float* row, float* out, int64_t rows, int64_t cols, bool accumulate,
                   ThreadPool* pool);
// acc (cols) += column sums of x (rows,cols); each column summed over rows in order.
void ColumnSumsAccumulate(const float* x, int64_t rows, int64_t cols, float* acc, ThreadPool* pool);

// out (B,T,C) = wte[tokens] + wpe[pos], pos = t, or t - segment_starts[b,t] when segment_starts
// (B,T) is not null (packed documents); wte[tokens] alone when wpe is null. Token ids and
// starts must already be valid.
void EmbeddingForward(const int32_t* tokens, const int32_t* segment_starts, const float* wte,
                      const float* wpe, float* out, int64_t batch, int64_t seq, int64_t channels,
                      ThreadPool* pool);
// dwte[tokens[b,t]] += dout[b,t]; dwpe[pos] += dout[b,t] (pos as above), each summed in (b,t)
// order. Either output may be null.
void EmbeddingBackward(const int32_t* tokens, const int32_t* segment_starts, const float* dout,
                       float* dwte, float* dwpe, int64_t batch, int64_t seq, int64_t channels,
                       ThreadPool* pool);

void LayerNormForward(const float* x, const float* weight, const float* bias, float* out,
                      float* mean, float* rstd, int64_t rows, int64_t cols, ThreadPool* pool);
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
void LayerNormBackwardReduce(const float* scratch, int64_t blocks, float* dweight, float* dbias,
                             int64_t cols, ThreadPool* pool);

void GeluForward(const float* x, float* out, int64_t n, ThreadPool* pool);
void GeluBackward(const float* x, const float* dout, float* dx, int64_t n, ThreadPool* pool);

// row_losses (rows) = -log softmax(logits row)[target], 0 where the target is kIgnoreTarget.
// Targets must already be in range (or kIgnoreTarget).
void CrossEntropyRowLosses(const float* logits, const int32_t* targets, float* row_losses,
                           int64_t rows, int64_t vocab, ThreadPool* pool);
// dlogits = factor * (softmax(logits) - onehot(targets)), 0 on rows whose target is
// kIgnoreTarget; WRITES; dlogits may equal logits.
void CrossEntropyBackward(const float* logits, const int32_t* targets, float factor, float* dlogits,
                          int64_t rows, int64_t vocab, ThreadPool* pool);

}  // namespace baton::cpu
