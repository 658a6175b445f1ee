// What the transports book as comm for their own staging, in one place: the real transports
// allocate through these, and the memory planner's meta communicator (comm/meta_communicator.h)
// books the same tensors through them without sending anything (docs/memory.md).
#pragma once

#include <vector>

#include "core/memory.h"
#include "core/tensor.h"

namespace baton {

// Gloo's all-reduce over all ranks reduces 16-bit tensors as f32: an f32 copy of `tensor`'s
// elements, or an undefined tensor when it reduces `tensor` in place.
Tensor BookGlooAllReduceStaging(Allocator& allocator, const Tensor& tensor);

// Gloo's subgroup all-reduce (in rank order: two members exchange; n > 2 members reduce-scatter,
// member k summing slice k, of ceil(N/n) of the N elements, then all-gather): a member of a
// 2-member group stages one copy of the tensor (the peer's), a member of a larger group the other
// members' copies of its slice, (n - 1) ceil(N/n) elements in one tensor. Not called for a
// 2-member group whose pair shares a host: its shared-memory links add the peer's bytes as they
// arrive (comm/shared_memory.h) and stage nothing.
Tensor BookGlooGroupAllReduceStaging(Allocator& allocator, const Tensor& tensor, size_t members);

// NCCL's barrier: an all-reduce of one f32 kept for the communicator's life.
Tensor BookNcclBarrierScratch(Allocator& allocator);

}  // namespace baton
