// The CPU backend's f32 row kernels for the Llama layers: RMSNorm, SwiGLU, rotary embeddings and
// grouped-query attention's key/value repeat. One row at a time, raw contiguous f32 pointers;
// the caller (CpuBackend) validates, converts 16-bit rows and runs rows in parallel. Semantics
// are those of the matching Backend methods (kernels/backend.h). Every result depends on the
// row's values only, and the weight gradient of RMSNorm is summed in a fixed block order, so
// bits do not depend on the thread count. Internal to kernels/cpu.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/rope.h"

namespace baton::cpu {

class ThreadPool;

// out (cols) = x * rstd * weight; returns rstd = 1 / sqrt(mean(x^2) + eps), the mean of the
// squares summed in double in column order.
float RmsNormForwardRow(const float* x, const float* weight, float eps, float* out, int64_t cols);

// RMSNorm backward runs in blocks of kLayerNormRowBlock rows (layer_kernels.h): per block, dx of
// its rows accumulated and its partial dweight (cols floats) written; then the partials summed in
// block order into dweight (LayerNormBackwardReduce's pattern).
void RmsNormBackwardBlock(const float* dout, const float* x, const float* weight, const float* rstd,
                          float* dx, float* partial_dweight, int64_t rows, int64_t cols);
void RmsNormBackwardReduce(const float* partials, int64_t blocks, float* dweight, int64_t cols,
                           ThreadPool* pool);

// One row: out (hidden) = silu(gate_up[0..hidden)) * gate_up[hidden..2 hidden).
void SwiGluForwardRow(const float* gate_up, float* out, int64_t hidden);
// One row: dgate_up (2 hidden) += the gradient, given dout (hidden).
void SwiGluBackwardRow(const float* gate_up, const float* dout, float* dgate_up, int64_t hidden);

// inv_freq (head_dim / 2) as kernels/rope.h defines it.
std::vector<float> RopeInverseFrequencies(const RopeConfig& rope, int64_t head_dim);
// One token's heads in place: `heads` consecutive heads of head_dim elements at `x`, all turned
// by the angles of `position` (negated when inverse).
void RotateHeads(float* x, int64_t heads, int64_t head_dim, const float* inv_freq, int64_t position,
                 bool inverse);

}  // namespace baton::cpu
