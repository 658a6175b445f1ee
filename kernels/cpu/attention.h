// The CPU backend's causal self-attention kernels (f32), semantics as Backend::AttentionForward
// and AttentionBackward in kernels/backend.h.
//
// (batch, head) pairs run in parallel, each on one thread: the products Q K^T, P V and their
// gradients are single-threaded OpenBLAS sgemm calls on strided views of qkv (no copies), cut
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

// qkv (B,T,3C) -> out (B,T,C), probs (B,NH,T,T).
void AttentionForward(const float* qkv, float* out, float* probs, const AttentionShape& shape,
                      ThreadPool* pool);

// Floats of scratch AttentionBackward needs: one T x T block of score gradients per thread.
int64_t AttentionBackwardScratch(const AttentionShape& shape, int threads);

// dqkv (B,T,3C) += gradient, given dout (B,T,C), qkv and probs from the forward.
void AttentionBackward(const float* dout, const float* qkv, const float* probs, float* dqkv,
                       float* scratch, const AttentionShape& shape, ThreadPool* pool);

}  // namespace baton::cpu
