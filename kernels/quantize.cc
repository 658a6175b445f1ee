// The 8-bit code books and the host quantiser (see quantize.h).
#include "kernels/quantize.h"

#include <algorithm>
#include <cmath>
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
