// The 8-bit code books and the host quantiser (see quantize.h).
#include "kernels/quantize.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace baton {
namespace {

QuantMap BuildMap(bool is_signed) {
  std::vector<double> values = {0.0, 1.0};
  for (int k = 0; k <= 6; ++k) {
    const int steps = is_signed ? (1 << k) : (2 << k);
    const double low = std::pow(10.0, k - 7), high = std::pow(10.0, k - 6);
    for (int i = 0; i < steps; ++i) {
      const double mid = low + (high - low) * (i + 0.5) / steps;
      values.push_back(mid);
      if (is_signed) values.push_back(-mid);
    }
  }
  BATON_CHECK(values.size() == 256, "a quantisation map of {} values", values.size());
  std::sort(values.begin(), values.end());
  QuantMap map;
  for (size_t i = 0; i < map.size(); ++i) map[i] = static_cast<float>(values[i]);
  return map;
}

}  // namespace

const QuantMap& SignedQuantMap() {
  static const QuantMap map = BuildMap(true);
  return map;
}

const QuantMap& UnsignedQuantMap() {
  static const QuantMap map = BuildMap(false);
  return map;
}

uint8_t Quantize(float normalized, const QuantMap& map) {
  // The first value >= normalized, then whichever neighbour is nearer (the lower on a tie).
  const auto upper = std::lower_bound(map.begin(), map.end(), normalized);
  if (upper == map.begin()) return 0;
  if (upper == map.end()) return 255;
  const auto lower = upper - 1;
  const bool take_upper = (*upper - normalized) < (normalized - *lower);
  return static_cast<uint8_t>((take_upper ? upper : lower) - map.begin());
}

namespace {

float FromOrderedKey(uint32_t key) {
  return std::bit_cast<float>((key & 0x80000000u) != 0 ? key & 0x7FFFFFFFu : ~key);
}

}  // namespace

QuantCoder::QuantCoder(const QuantMap& map) : map_(map), entries_{} {
  for (uint32_t bucket = 0; bucket < entries_.size(); ++bucket) {
    const uint32_t least_key = bucket << 16, greatest_key = least_key | 0xFFFFu;
    const float least = FromOrderedKey(least_key), greatest = FromOrderedKey(greatest_key);
    if (!(std::abs(least) <= 1.0f || std::abs(greatest) <= 1.0f)) continue;  // Encode falls back
    const uint32_t base = Quantize(least, map), top = Quantize(greatest, map);
    BATON_CHECK(top <= base + 1, "quantisation bucket {} holds codes {} to {}", bucket, base, top);
    uint32_t threshold = 0x10000;  // above every float's low bits: no step in this bucket
    if (top > base) {
      // The least key whose float takes `top` (Quantize never decreases with its argument).
      uint32_t lo = least_key, hi = greatest_key;
      while (lo < hi) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (Quantize(FromOrderedKey(mid), map) == top) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      threshold = lo & 0xFFFFu;
    }
    entries_[bucket] = base << 17 | threshold;
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) int64_t QuantCoder::EncodeRowAvx2(const float* x, float scale,
                                                                  int64_t n, uint8_t* codes) const {
  const __m256 scale8 = _mm256_set1_ps(scale);
  const __m256 minus_one = _mm256_set1_ps(-1.0f), one = _mm256_set1_ps(1.0f);
  const __m256i sign_bit = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i low16 = _mm256_set1_epi32(0xFFFF), low17 = _mm256_set1_epi32(0x1FFFF);
  const int* entries = reinterpret_cast<const int*>(entries_.data());
  int64_t done = 0;
  for (; done + 8 <= n; done += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + done), scale8);
    const __m256 in_range =
        _mm256_and_ps(_mm256_cmp_ps(v, minus_one, _CMP_GE_OQ), _mm256_cmp_ps(v, one, _CMP_LE_OQ));
    if (_mm256_movemask_ps(in_range) != 0xFF) break;  // Encode's fallback, element by element
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i key =
        _mm256_xor_si256(bits, _mm256_or_si256(_mm256_srai_epi32(bits, 31), sign_bit));
    const __m256i entry = _mm256_i32gather_epi32(entries, _mm256_srli_epi32(key, 16), 4);
    // Below the threshold: threshold > low bits (both under 2^17, so a signed compare is exact).
    const __m256i below =
        _mm256_cmpgt_epi32(_mm256_and_si256(entry, low17), _mm256_and_si256(key, low16));
    // base + 1, less one where the float is below the threshold (below is -1 or 0).
    const __m256i code = _mm256_add_epi32(_mm256_srli_epi32(entry, 17),
                                          _mm256_add_epi32(below, _mm256_set1_epi32(1)));
    // Eight codes (0..255 in 32-bit lanes) to eight bytes: pack to 16 and 8 bits (each 128-bit
    // half keeps its four codes in its low dword), then the two halves' low dwords.
    const __m256i words = _mm256_packus_epi32(code, code);
    const __m256i bytes = _mm256_packus_epi16(words, words);
    const uint32_t low = static_cast<uint32_t>(_mm256_extract_epi32(bytes, 0));
    const uint32_t high = static_cast<uint32_t>(_mm256_extract_epi32(bytes, 4));
    std::memcpy(codes + done, &low, 4);
    std::memcpy(codes + done + 4, &high, 4);
  }
  return done;
}
#endif

void QuantCoder::EncodeRow(const float* x, float scale, int64_t n, uint8_t* codes) const {
  int64_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  while (avx2 && i + 8 <= n) {
    i += EncodeRowAvx2(x + i, scale, n - i, codes + i);
    if (i + 8 > n) break;
    // A group with a value outside [-1, 1] or NaN: those eight one by one.
    for (const int64_t end = i + 8; i < end; ++i) codes[i] = Encode(x[i] * scale);
  }
#endif
  for (; i < n; ++i) codes[i] = Encode(x[i] * scale);
}

const QuantCoder& SignedQuantCoder() {
  static const QuantCoder coder(SignedQuantMap());
  return coder;
}

const QuantCoder& UnsignedQuantCoder() {
  static const QuantCoder coder(UnsignedQuantMap());
  return coder;
}

void QuantizeBlocks(const float* x, int64_t n, const QuantMap& map, uint8_t* codes, float* absmax) {
  for (int64_t b = 0; b < QuantBlocks(n); ++b) {
    const int64_t begin = b * kQuantBlock, end = std::min(n, begin + kQuantBlock);
    float max = 0.0f;
    for (int64_t i = begin; i < end; ++i) max = std::max(max, std::abs(x[i]));
    absmax[b] = max;
    const float inv = max > 0.0f ? 1.0f / max : 0.0f;
    for (int64_t i = begin; i < end; ++i) codes[i] = Quantize(x[i] * inv, map);
  }
}

void DequantizeBlocks(const uint8_t* codes, const float* absmax, int64_t n, const QuantMap& map,
                      float* x) {
  for (int64_t i = 0; i < n; ++i) x[i] = map[codes[i]] * absmax[i / kQuantBlock];
}

void QuantizeColumnsInt8(const float* w, int64_t rows, int64_t cols, int8_t* codes, float* scale) {
  std::vector<float> max(static_cast<size_t>(cols), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      max[static_cast<size_t>(c)] =
          std::max(max[static_cast<size_t>(c)], std::abs(w[r * cols + c]));
    }
  }
  for (int64_t c = 0; c < cols; ++c) scale[c] = max[static_cast<size_t>(c)] / kInt8Max;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float s = scale[c];
      const float q = s > 0.0f ? std::nearbyint(w[r * cols + c] / s) : 0.0f;
      codes[r * cols + c] = static_cast<int8_t>(std::clamp(q, -kInt8Max, kInt8Max));
    }
  }
}

void DequantizeColumnsInt8(const int8_t* codes, const float* scale, int64_t rows, int64_t cols,
                           float* w) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      w[r * cols + c] = static_cast<float>(codes[r * cols + c]) * scale[c];
    }
  }
}

}  // namespace baton
