// The CPU backend's causal self-attention kernels (f32), semantics as Backend::AttentionForward
// and AttentionBackward in kernels/backend.h.
//
// (batch, head) pairs run in parallel, each on one thread: the products Q K^T, P V and their
// gradients are single-threaded oneDNN matmul calls on strided views of qkv (no copies), cut
// into row blocks so that most of the causal zeros above the diagonal are skipped; the softmax
// and its backward are plain row loops. Each pair is computed the same way on any thread, so
// results do not depend on the thread count. Internal to kernels/cpu; callers validate shapes.
#pragma once

#include <cstdint>

namespace baton::cpu {

class ThreadPool;

struct AttentionShape {
  int64_t batch = 0;
  int64_t seq = 0;       // T
  int64_t channels = 0;  // C
  int64_t heads = 0;     // NH; head_dim = C / NH
  int64_t head_dim() const { return channels / heads; }
};

// Packed documents: `segment_starts`, when not null, is (B,T): query t of row b attends keys
// segment_starts[b*T + t] .. t (Backend::AttentionForward). A block of queries then skips the key
// blocks before its first query's segment start. Null: plain causal attention, the same bits as
// before segments existed.

// qkv (B,T,3C) -> out (B,T,C), probs (B,NH,T,T).
void AttentionForward(const float* qkv, const int32_t* segment_starts, float* out, float* probs,
                      const AttentionShape& shape, ThreadPool* pool);

// Floats of scratch AttentionBackward needs: one T x T block of score gradients per thread.
int64_t AttentionBackwardScratch(const AttentionShape& shape, int threads);

// dqkv (B,T,3C) += gradient, given dout (B,T,C), qkv and probs from the forward.
void AttentionBackward(const float* dout, const float* qkv, const int32_t* segment_starts,
                       const float* probs, float* dqkv, float* scratch, const AttentionShape& shape,
                       ThreadPool* pool);

// Flash-style (FlashAttention-2) causal attention: no T x T matrix. Per (batch, head) pair, on
// one thread, queries are cut into blocks of kFlashRows and keys into blocks of kFlashKeys; the
// forward streams over key blocks with an online softmax (running max and sum per row),
// accumulating straight into out, and keeps only lse (B,NH,T), each row's log-sum-exp; the
// backward walks key blocks in the outer loop and query blocks in the inner one, recomputing
// P = exp(S - lse) per block pair, so dK and dV of a key block are finished in one pass and dQ
// accumulates in a fixed order. Every product is a single-threaded sgemm on a block, so bits
// depend on the shape only. Wide key blocks make fewer, larger sgemm calls; a key block is cut
// at the query block's diagonal, so the masked triangle costs at most kFlashRows^2 / 2 per
// query block.
inline constexpr int64_t kFlashRows = 64;
inline constexpr int64_t kFlashKeys = 256;

// Floats of scratch FlashAttentionForward needs: a block of scores and two row vectors per
// thread.
int64_t FlashAttentionForwardScratch(const AttentionShape& shape, int threads);

// qkv (B,T,3C) -> out (B,T,C), lse (B,NH,T).
void FlashAttentionForward(const float* qkv, const int32_t* segment_starts, float* out, float* lse,
                           float* scratch, const AttentionShape& shape, ThreadPool* pool);

// Floats of scratch FlashAttentionBackward needs: two blocks of scores and a row of
// rowsum(dO * O) per thread.
int64_t FlashAttentionBackwardScratch(const AttentionShape& shape, int threads);

// dqkv (B,T,3C) += gradient, given dout (B,T,C), qkv, out and lse from the forward.
void FlashAttentionBackward(const float* dout, const float* qkv, const int32_t* segment_starts,
                            const float* out, const float* lse, float* dqkv, float* scratch,
                            const AttentionShape& shape, ThreadPool* pool);

// The flash kernels on bf16 qkv, out, dout and dqkv, for a CPU whose oneDNN multiplies bf16
// (Bf16GemmInUse, gemm.h): the same blocks and online softmax, every product a bf16 x bf16
// oneDNN call accumulating in f32 (so the probabilities and score gradients are rounded to bf16
// before they are multiplied, as FlashAttention-2 does on GPUs), the softmax in f32, and out and
// dqkv's gradient terms summed in f32 and rounded once. Bits depend on the shape only.
struct BF16;  // fast_math.h
int64_t FlashAttentionForwardScratchBf16(const AttentionShape& shape, int threads);
void FlashAttentionForwardBf16(const BF16* qkv, const int32_t* segment_starts, BF16* out,
                               float* lse, float* scratch, const AttentionShape& shape,
                               ThreadPool* pool);
int64_t FlashAttentionBackwardScratchBf16(const AttentionShape& shape, int threads);
void FlashAttentionBackwardBf16(const BF16* dout, const BF16* qkv, const int32_t* segment_starts,
                                const BF16* out, const float* lse, BF16* dqkv, float* scratch,
                                const AttentionShape& shape, ThreadPool* pool);

// Attention of new queries over a key-value cache (Backend::CachedAttentionForward), f32. Query i
// of a sequence sits at position past + i and sees keys 0 .. past + i. The flash forward's
// algorithm and blocks (kFlashRows queries, kFlashKeys keys, online softmax), with the diagonal
// moved by `past`; every product a single-threaded sgemm per (batch, head) pair (dot-product
// loops for blocks of under 4 queries, such as a decoding step's one), so bits depend on the
// shape only. Pointers are to element 0 of head 0 of batch 0; rows and batches are
// strided as given (elements), so q may be qkv's first third in place.
struct CachedAttentionArgs {
  const float* q = nullptr;  // (B,Tq,C) rows at q + b * q_batch + i * q_ld
  int64_t q_ld = 0;
  int64_t q_batch = 0;
  const float* k = nullptr;  // (B,past+Tq,C) rows at k + b * kv_batch + s * kv_ld
  const float* v = nullptr;  // as k
  int64_t kv_ld = 0;
  int64_t kv_batch = 0;
  float* out = nullptr;  // (B,Tq,C), dense
  int64_t past = 0;
  AttentionShape shape;  // seq = Tq, the new queries
  // Round the probabilities to bf16 before their product with v, as FlashAttentionForwardBf16
  // does (the model is bf16 and the CPU multiplies bf16), so that decoding with the cache
  // follows the forward pass it continues.
  bool bf16_probs = false;
};

// Scratch floats CachedAttentionForward needs: as FlashAttentionForwardScratch.
int64_t CachedAttentionScratch(int threads);

void CachedAttentionForward(const CachedAttentionArgs& args, float* scratch, ThreadPool* pool);

}  // namespace baton::cpu
