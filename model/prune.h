// Magnitude pruning (`prune.*` while training, `baton compress --prune`; docs/memory.md,
// "Pruning"): which weights of a matrix to remove, and the masks that keep them removed.
//
// The matrices pruned are those INT8 weights take (model/int8_weights.h TakesInt8Weights): the
// blocks' Linear weights, in Conv1D layout (in, out). A mask is u8, the matrix's shape, 1 = kept.
#pragma once

#include <cstdint>
#include <vector>

#include "config/config.h"
#include "kernels/backend.h"
#include "model/layer.h"

namespace baton {

// The keep-mask of w (rows, cols), host f32, by magnitude:
// - unstructured: the round(rows * cols * sparsity) weights of smallest |w| are pruned (equal
//   magnitudes: the lower index goes first);
// - 2:4: in every column, each group of 4 consecutive rows keeps its 2 largest |w| (equal
//   magnitudes: the lower row is kept); rows must divide by 4 and sparsity be 0.5.
std::vector<uint8_t> MagnitudeMask(const float* w, int64_t rows, int64_t cols, double sparsity,
                                   PrunePattern pattern);

// True for the parameters pruning applies to (and that carry a mask).
bool TakesPruneMask(const Param& param);

// Gives every parameter TakesPruneMask picks a mask of ones (u8, booked as params).
void AllocatePruneMasks(Backend& backend, const std::vector<Param*>& params);

}  // namespace baton
