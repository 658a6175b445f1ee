// 8-bit optimizer state: the code books, the nearest-value quantiser, block-wise round trips and
// the CPU backend's AdamW8bit against f32 AdamW.
#include "kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/kernels_test_util.h"

namespace baton::kernels_test {
namespace {

TEST(QuantMapTest, SignedAndUnsignedMapsAreStrictlyIncreasingWithZeroAndOne) {
  for (const QuantMap* map : {&SignedQuantMap(), &UnsignedQuantMap()}) {
    for (size_t i = 1; i < map->size(); ++i) EXPECT_LT((*map)[i - 1], (*map)[i]) << i;
    EXPECT_EQ(map->back(), 1.0f);
    EXPECT_NE(std::find(map->begin(), map->end(), 0.0f), map->end());
  }
  const QuantMap& s = SignedQuantMap();
  EXPECT_EQ(s[127], 0.0f);  // 127 negatives below it
  for (int i = 0; i < 127; ++i) EXPECT_EQ(s[i], -s[254 - i]) << i;
  EXPECT_EQ(UnsignedQuantMap()[0], 0.0f);
  // Seven decades: the smallest non-zero magnitudes are in [1e-7, 1e-6).
  EXPECT_GT(s[128], 1e-7f);
  EXPECT_LT(s[128], 1e-6f);
  EXPECT_GT(UnsignedQuantMap()[1], 1e-7f);
}

TEST(QuantMapTest, QuantizeReturnsTheNearestValue) {
  Rng rng(5);
  for (const QuantMap* map : {&SignedQuantMap(), &UnsignedQuantMap()}) {
    for (int i = 0; i < 256; ++i) EXPECT_EQ(Quantize((*map)[i], *map), i);
    for (int trial = 0; trial < 2000; ++trial) {
      const float lo = map->front();
      // Spread over the decades: u^8 puts many samples near zero.
      const float u = static_cast<float>(rng.NextDouble());
      const float x = lo < 0 && trial % 2 ? -std::pow(u, 8.0f) : std::pow(u, 8.0f);
      const uint8_t code = Quantize(x, *map);
      for (float value : *map) {
        ASSERT_LE(std::abs((*map)[code] - x), std::abs(value - x)) << x;
      }
    }
  }
}

TEST(QuantMapTest, BlocksRoundTripWithinHalfTheCoarsestStepOfTheirAbsmax) {
  const int64_t n = 3 * kQuantBlock + 17;  // a short last block
  Rng rng(9);
  std::vector<float> x(n);
  for (float& value : x) value = static_cast<float>(rng.NextNormal()) * 1e-3f;
  x[5] = 0.0f;
  std::vector<uint8_t> codes(n);
  std::vector<float> absmax(QuantBlocks(n)), back(n);
  for (const QuantMap* map : {&SignedQuantMap(), &UnsignedQuantMap()}) {
    std::vector<float> input = x;
    if (map == &UnsignedQuantMap()) {
      for (float& value : input) value = value * value;  // like Adam's v
    }
    QuantizeBlocks(input.data(), n, *map, codes.data(), absmax.data());
    DequantizeBlocks(codes.data(), absmax.data(), n, *map, back.data());
    // The widest gap between neighbouring values is in the top decade: 0.9 / 64 (signed) or
    // 0.9 / 128 (unsigned).
    const float half_gap = map == &SignedQuantMap() ? 0.9f / 128 : 0.9f / 256;
    for (int64_t i = 0; i < n; ++i) {
      const float block_max = absmax[static_cast<size_t>(i / kQuantBlock)];
      ASSERT_LE(std::abs(back[i] - input[i]), half_gap * block_max * 1.0001f) << i;
    }
    EXPECT_EQ(back[5], 0.0f);
    for (int64_t b = 0; b < QuantBlocks(n); ++b) {  // each block's largest element is exact
      const int64_t begin = b * kQuantBlock, end = std::min(n, begin + kQuantBlock);
      float max = 0.0f;
      for (int64_t i = begin; i < end; ++i) max = std::max(max, std::abs(input[i]));
      EXPECT_EQ(absmax[b], max);
    }
  }
}

class AdamW8bitTest : public CpuBackendTest {
 protected:
  AdamWConfig Config(int64_t step) const {
    AdamWConfig config;
    config.lr = 1e-2f;
    config.weight_decay = 0.1f;
    config.step = step;
    return config;
  }
};

// From zero state the first step's m and v are exact, so the parameter takes f32 AdamW's step
// bit for bit; later steps track it within what 8-bit moments allow.
TEST_F(AdamW8bitTest, TracksF32AdamWAndMatchesItExactlyOnTheFirstStep) {
  const int64_t n = 5000;
  const Tensor start = Random({n});
  Tensor p32 = Zeros({n}), p8 = Zeros({n});
  backend().Copy(start, p32);
  backend().Copy(start, p8);
  Tensor m32 = Zeros({n}), v32 = Zeros({n});
  Tensor m8 = Zeros({n}, DType::kU8), v8 = Zeros({n}, DType::kU8);
  Tensor am = Zeros({QuantBlocks(n)}), av = Zeros({QuantBlocks(n)});
  for (int64_t step = 1; step <= 30; ++step) {
    const Tensor grad = Random({n});
    backend().AdamW(p32, grad, m32, v32, Config(step), 0.5f);
    backend().AdamW8bit(p8, grad, m8, am, v8, av, Config(step), 0.5f);
    if (step == 1) {
      EXPECT_EQ(Floats(p8), Floats(p32));
    }
  }
  // Relative to how far the parameters moved.
  std::vector<float> moved32 = Floats(p32), moved8 = Floats(p8);
  const std::vector<float> s = Floats(start);
  for (int64_t i = 0; i < n; ++i) {
    moved32[i] -= s[i];
    moved8[i] -= s[i];
  }
  EXPECT_LT(numeric_check::NormalisedError(moved8, moved32), 2e-2);
  // The stored moments decode to f32 Adam's within the code book's resolution.
  std::vector<float> m_back(n);
  DequantizeBlocks(m8.data<uint8_t>(), am.data<float>(), n, SignedQuantMap(), m_back.data());
  EXPECT_LT(numeric_check::NormalisedError(m_back, Floats(m32)), 5e-2);
}

TEST_F(AdamW8bitTest, ChecksCodesAndBlockCounts) {
  const int64_t n = 600;
  Tensor p = Random({n}), g = Random({n});
  Tensor m = Zeros({n}, DType::kU8), v = Zeros({n}, DType::kU8);
  Tensor am = Zeros({3}), av = Zeros({3}), short_absmax = Zeros({2});
  Tensor f32_m = Zeros({n});
  EXPECT_NO_THROW(backend().AdamW8bit(p, g, m, am, v, av, Config(1), 1.0f));
  EXPECT_THROW(backend().AdamW8bit(p, g, m, short_absmax, v, av, Config(2), 1.0f), Error);
  EXPECT_THROW(backend().AdamW8bit(p, g, f32_m, am, v, av, Config(2), 1.0f), Error);
  EXPECT_THROW(backend().AdamW8bit(p, g, m, am, v, av, Config(0), 1.0f), Error);
}

}  // namespace
}  // namespace baton::kernels_test
