// Block-wise 8-bit quantisation of optimizer state (`optimizer.state: int8`, docs/memory.md):
// the dynamic (exponent + linear fraction) code books of Dettmers et al., "8-bit Optimizers via
// Block-wise Quantization" (2021), built here from that description.
//
// A tensor of n elements is cut into blocks of kQuantBlock consecutive elements (the last may be
// shorter). Each block stores one f32 absmax = max |x| over the block and one u8 code per element;
// x = map[code] * absmax. Each map is 256 increasing values in [-1, 1] (signed, for Adam's m) or
// [0, 1] (unsigned, for v), dense near +-1 and spread over seven decades below:
// - decade k = 0..6 covers [10^(k-7), 10^(k-6)) with the midpoints of 2^k (signed) or 2^(k+1)
//   (unsigned) equal steps of it: 127 (or 254) values, the top decade the finest;
// - plus 0 and 1 (so the block's largest element is stored exactly), and for the signed map the
//   negatives of its 127 values.
// Quantize picks the nearest map value (the lower one on a tie); 0 maps to 0 exactly.
#pragma once

#include <array>
#include <cstdint>

namespace baton {

inline constexpr int64_t kQuantBlock = 256;
// Tensors with fewer elements keep f32 state (the per-block absmax would not pay for itself and
// LayerNorm / bias moments are small).
inline constexpr int64_t kMinQuantizedElements = 4096;

using QuantMap = std::array<float, 256>;

const QuantMap& SignedQuantMap();    // for m
const QuantMap& UnsignedQuantMap();  // for v

// The code of the map value nearest to `normalized` (x / absmax, in [-1, 1]).
uint8_t Quantize(float normalized, const QuantMap& map);

// Blocks of a tensor of n elements: ceil(n / kQuantBlock).
inline int64_t QuantBlocks(int64_t n) { return (n + kQuantBlock - 1) / kQuantBlock; }

// Host helpers (checkpoint conversion, tests): x (n f32) <-> codes (n) + absmax (QuantBlocks(n)).
void QuantizeBlocks(const float* x, int64_t n, const QuantMap& map, uint8_t* codes, float* absmax);
void DequantizeBlocks(const uint8_t* codes, const float* absmax, int64_t n, const QuantMap& map,
                      float* x);

}  // namespace baton
