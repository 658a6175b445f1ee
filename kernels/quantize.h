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
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/quant_blocks.h"

namespace baton {

using QuantMap = std::array<float, 256>;

const QuantMap& SignedQuantMap();    // for m
const QuantMap& UnsignedQuantMap();  // for v

// The code of the map value nearest to `normalized` (x / absmax, in [-1, 1]): a binary search,
// the definition QuantCoder must agree with.
uint8_t Quantize(float normalized, const QuantMap& map);

// Order-preserving key of a float's bits: negative floats below positive, each in value order.
inline uint32_t OrderedKey(float x) {
  uint32_t bits;  // memcpy, not std::bit_cast: CUDA sources include this header as C++17
  std::memcpy(&bits, &x, sizeof bits);
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}

// Quantize with one table load and one comparison, giving its codes bit for bit: the AdamW8bit
// kernel's inner loop. Quantize's code never decreases as its argument grows, so it steps up at
// 255 thresholds (the least float taking each code). Floats are ordered like their bit patterns
// (sign folded: OrderedKey), so the top 16 bits of a float's key pick a bucket (1/128 of a
// binade), narrower than the map's finest step: a bucket holds at most one threshold (the
// constructor checks this). Its entry is the code of the bucket's least float and the low 16 key
// bits of its threshold (2^16, above any, when it has none): the code is the base, plus one when
// the float's low key bits reach the threshold's. Values outside [-1, 1] and NaN take Quantize.
class QuantCoder {
 public:
  explicit QuantCoder(const QuantMap& map);
  uint8_t Encode(float normalized) const {
    if (!(normalized >= -1.0f && normalized <= 1.0f)) return Quantize(normalized, map_);
    const uint32_t key = OrderedKey(normalized);
    const uint32_t entry = entries_[key >> 16];
    return static_cast<uint8_t>((entry >> 17) + ((key & 0xFFFFu) >= (entry & 0x1FFFFu) ? 1 : 0));
  }
  // codes[i] = Encode(x[i] * scale) for i < n: eight at a time with AVX2 where the CPU has it
  // (the same bits: the same multiplication lane by lane), Encode's loop elsewhere.
  void EncodeRow(const float* x, float scale, int64_t n, uint8_t* codes) const;

 private:
#if defined(__x86_64__) && defined(__GNUC__)
  // EncodeRow's AVX2 path: groups of 8, from the first; returns how many it encoded (a multiple
  // of 8), stopping before a group that holds a value outside [-1, 1] or NaN.
  __attribute__((target("avx2"))) int64_t EncodeRowAvx2(const float* x, float scale, int64_t n,
                                                        uint8_t* codes) const;
#endif
  const QuantMap& map_;
  std::array<uint32_t, 65536> entries_;  // per bucket: base code << 17 | threshold's low bits
};

const QuantCoder& SignedQuantCoder();
const QuantCoder& UnsignedQuantCoder();

// Blocks of a tensor of n elements: ceil(n / kQuantBlock).
inline int64_t QuantBlocks(int64_t n) { return (n + kQuantBlock - 1) / kQuantBlock; }

// Host helpers (checkpoint conversion, tests): x (n f32) <-> codes (n) + absmax (QuantBlocks(n)).
void QuantizeBlocks(const float* x, int64_t n, const QuantMap& map, uint8_t* codes, float* absmax);
void DequantizeBlocks(const uint8_t* codes, const float* absmax, int64_t n, const QuantMap& map,
                      float* x);

// INT8 weights (`baton compress --int8`, `model.weights: int8`; docs/checkpoints.md): a weight
// matrix w (rows, cols) in Hugging Face Conv1D layout (in, out) gets one f32 scale per column
// (output channel), scale = max |w| over the column / 127, and codes q = round-half-even(w / scale)
// in [-127, 127], so w ~ q * scale within scale / 2. An all-zero column has scale 0 and codes 0.
inline constexpr float kInt8Max = 127.0f;
void QuantizeColumnsInt8(const float* w, int64_t rows, int64_t cols, int8_t* codes, float* scale);
// w[r][c] = float(q[r][c]) * scale[c], the product in f32: every backend's DequantizeInt8
// computes exactly this before rounding to its output dtype.
void DequantizeColumnsInt8(const int8_t* codes, const float* scale, int64_t rows, int64_t cols,
                           float* w);

}  // namespace baton
