// Element-wise sums of host tensors in a fixed order, for the in-process and Gloo communicators'
// deterministic reductions.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace baton {

// Writes x_0 + x_1 + ... (summed left to right) into every tensor of `tensors`. All must be
// contiguous host tensors of one dtype and element count. f32 sums in f32, f16/bf16 in f32 with
// one rounding at the end, i32 in 64-bit integers (then truncated). Reads all inputs of an
// element before writing it, so the tensors may be the caller's own buffers.
void SumInOrder(const std::vector<Tensor>& tensors);

// mine[i] = mine[i] + theirs[i] (theirs[i] + mine[i] when !mine_first) over `n` elements of
// `dtype`, by SumInOrder's rules: the bits SumInOrder gives the two tensors in that order. For
// sums streamed from a transport's buffer (comm/shared_memory.h).
void AddInto(void* mine, const void* theirs, DType dtype, int64_t n, bool mine_first);

}  // namespace baton
