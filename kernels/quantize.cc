// The 8-bit code books and the host quantiser (see quantize.h).
#include "kernels/quantize.h"

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

uint16_t LowerBound(const QuantMap& map, float x) {
  return static_cast<uint16_t>(std::lower_bound(map.begin(), map.end(), x) - map.begin());
}

}  // namespace

QuantCoder::QuantCoder(const QuantMap& map) : map_(map), buckets_{} {
  padded_.front() = -std::numeric_limits<float>::infinity();
  std::copy(map.begin(), map.end(), padded_.begin() + 1);
  padded_.back() = std::numeric_limits<float>::infinity();
  for (uint32_t bucket = 0; bucket < buckets_.size(); ++bucket) {
    const float least = FromOrderedKey(bucket << kShift);
    const float greatest = FromOrderedKey((bucket << kShift) | ((1u << kShift) - 1));
    if (!(std::abs(least) <= 1.0f || std::abs(greatest) <= 1.0f)) continue;  // Encode falls back
    const uint16_t first = LowerBound(map, least);
    const uint16_t last = LowerBound(map, greatest);
    BATON_CHECK(last <= first + 1, "quantisation bucket {} spans map values {} to {}", bucket,
                first, last);
    buckets_[bucket] = static_cast<uint16_t>(first | (last > first ? kMayStep : 0));
  }
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
