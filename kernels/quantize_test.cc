// 8-bit optimizer state: the code books, the nearest-value quantiser, block-wise round trips and
// the CPU backend's AdamW8bit against f32 AdamW. INT8 weights: the per-column quantiser and the
// CPU backend's DequantizeInt8.
#include "kernels/quantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <utility>
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

// The coder gives Quantize's code for every float of [-1, 1] it is tried on: a stride through all
// of them (every bucket many times), every float within 64 ulps of each map value and of each
// midpoint between neighbours (where the nearer one changes), and the special values.
TEST(QuantMapTest, CoderEncodesAsQuantizeDoesBitForBit) {
  const std::pair<const QuantMap*, const QuantCoder*> cases[] = {
      {&SignedQuantMap(), &SignedQuantCoder()}, {&UnsignedQuantMap(), &UnsignedQuantCoder()}};
  for (const auto& [map, coder] : cases) {
    int64_t checked = 0;
    const auto check = [&](float x) {
      ASSERT_EQ(coder->Encode(x), Quantize(x, *map)) << x;
      ++checked;
    };
    for (uint32_t bits = 0; bits <= 0x3F800000u; bits += 997) {  // 0 .. 1.0f, both signs
      check(std::bit_cast<float>(bits));
      check(-std::bit_cast<float>(bits));
    }
    std::vector<float> anchors(map->begin(), map->end());
    for (size_t i = 1; i < map->size(); ++i) anchors.push_back(((*map)[i - 1] + (*map)[i]) / 2);
    for (float anchor : anchors) {
      float below = anchor, above = anchor;
      for (int step = 0; step < 64; ++step) {
        check(below = std::nextafter(below, -2.0f));
        check(above = std::nextafter(above, 2.0f));
      }
    }
    for (float x :
         {0.0f, -0.0f, 1.0f, -1.0f, 1.0000001f, -1.0000001f, 3.0f, -3.0f,
          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
          std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min()}) {
      check(x);
    }
    EXPECT_GT(checked, 2'000'000);
    // EncodeRow (eight lanes at a time where the CPU has AVX2) gives Encode's codes, scaled, for
    // rows of every length, out-of-range and NaN values among them.
    Rng rng(11);
    for (int64_t n : {0, 1, 7, 8, 9, 31, 256, 1000}) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& value : x) value = static_cast<float>(rng.NextNormal()) * 0.3f;
      if (n > 20) x[13] = 7.0f, x[17] = std::numeric_limits<float>::quiet_NaN();
      for (float scale : {1.0f, 0.37f, 3.0f}) {
        std::vector<uint8_t> codes(static_cast<size_t>(n), 0xAB);
        coder->EncodeRow(x.data(), scale, n, codes.data());
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(codes[static_cast<size_t>(i)], coder->Encode(x[static_cast<size_t>(i)] * scale))
              << "n " << n << " scale " << scale << " element " << i;
        }
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

// Every step equals the host's composition bit for bit: the moments decoded by
// DequantizeBlocks, f32 AdamW's update of them (the backend's AdamW), then QuantizeBlocks (the
// binary search over the code book). The kernel's vector lookups, absmax and encoder are
// checked against those loops at every code the moments reach; the last block is short.
TEST_F(AdamW8bitTest, EveryStepIsTheHostDequantiseUpdateQuantise) {
  const int64_t n = 5000;
  Tensor p8 = Random({n}), p_ref = Zeros({n});
  backend().Copy(p8, p_ref);
  Tensor m8 = Zeros({n}, DType::kU8), v8 = Zeros({n}, DType::kU8);
  Tensor am = Zeros({QuantBlocks(n)}), av = Zeros({QuantBlocks(n)});
  std::vector<uint8_t> m_codes(n, 0), v_codes(n, 0);
  std::vector<float> m_absmax(QuantBlocks(n), 0.0f), v_absmax(QuantBlocks(n), 0.0f);
  for (int64_t step = 1; step <= 6; ++step) {
    const Tensor grad = Random({n});
    backend().AdamW8bit(p8, grad, m8, am, v8, av, Config(step), 0.5f);
    Tensor m_ref = Zeros({n}), v_ref = Zeros({n});
    DequantizeBlocks(m_codes.data(), m_absmax.data(), n, SignedQuantMap(), m_ref.data<float>());
    DequantizeBlocks(v_codes.data(), v_absmax.data(), n, UnsignedQuantMap(), v_ref.data<float>());
    backend().AdamW(p_ref, grad, m_ref, v_ref, Config(step), 0.5f);
    QuantizeBlocks(m_ref.data<float>(), n, SignedQuantMap(), m_codes.data(), m_absmax.data());
    QuantizeBlocks(v_ref.data<float>(), n, UnsignedQuantMap(), v_codes.data(), v_absmax.data());
    SCOPED_TRACE(::testing::Message() << "step " << step);
    ASSERT_EQ(Floats(p8), Floats(p_ref));
    ASSERT_EQ(Floats(am), m_absmax);
    ASSERT_EQ(Floats(av), v_absmax);
    ASSERT_TRUE(std::equal(m_codes.begin(), m_codes.end(), m8.data<uint8_t>()));
    ASSERT_TRUE(std::equal(v_codes.begin(), v_codes.end(), v8.data<uint8_t>()));
  }
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

TEST(Int8WeightsTest, ColumnsQuantiseToTheirAbsmaxOver127WithinHalfAStep) {
  const int64_t rows = 37, cols = 5;
  Rng rng(11);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& x : w) x = static_cast<float>(rng.NextNormal());
  for (int64_t r = 0; r < rows; ++r) w[static_cast<size_t>(r * cols + 3)] = 0.0f;  // a zero column
  w[2 * cols + 1] = -9.0f;                                                         // column 1's max
  std::vector<int8_t> q(w.size());
  std::vector<float> scale(static_cast<size_t>(cols));
  QuantizeColumnsInt8(w.data(), rows, cols, q.data(), scale.data());
  EXPECT_EQ(scale[1], 9.0f / 127.0f);
  EXPECT_EQ(q[2 * cols + 1], -127);
  EXPECT_EQ(scale[3], 0.0f);
  std::vector<float> back(w.size());
  DequantizeColumnsInt8(q.data(), scale.data(), rows, cols, back.data());
  for (int64_t c = 0; c < cols; ++c) {
    float max = 0;
    for (int64_t r = 0; r < rows; ++r) max = std::max(max, std::abs(w[r * cols + c]));
    EXPECT_EQ(scale[c], max / 127.0f) << c;
    for (int64_t r = 0; r < rows; ++r) {
      const size_t i = static_cast<size_t>(r * cols + c);
      EXPECT_LE(std::abs(back[i] - w[i]), scale[c] * 0.5f * (1 + 1e-5f)) << r << "," << c;
      EXPECT_LE(std::abs(static_cast<int>(q[i])), 127);
    }
  }
  // Halfway between two codes rounds to the even one.
  const float tie[] = {2.5f, 127.0f, -3.5f, 1.0f};
  int8_t tie_q[4];
  float tie_scale[1];
  QuantizeColumnsInt8(tie, 4, 1, tie_q, tie_scale);
  EXPECT_EQ(tie_scale[0], 1.0f);
  EXPECT_EQ(tie_q[0], 2);
  EXPECT_EQ(tie_q[2], -4);
}

class DequantizeInt8Test : public CpuBackendTest {};

TEST_F(DequantizeInt8Test, EqualsTheHostDequantiserRoundedToTheOutputDtype) {
  const int64_t rows = 70, cols = 90;  // more than one chunk of the CPU backend
  std::vector<int8_t> codes(static_cast<size_t>(rows * cols));
  Rng rng(3);
  for (int8_t& c : codes) c = static_cast<int8_t>(static_cast<int>(rng.NextDouble() * 255) - 127);
  std::vector<float> scales(static_cast<size_t>(cols));
  for (float& s : scales) s = static_cast<float>(rng.NextDouble() * 0.01);
  Tensor q = Zeros({rows, cols}, DType::kI8), scale = Zeros({cols});
  backend().Copy(Tensor::Wrap(codes.data(), {rows, cols}, DType::kI8), q);
  backend().Copy(Tensor::Wrap(scales.data(), {cols}, DType::kF32), scale);
  std::vector<float> expected(codes.size());
  DequantizeColumnsInt8(codes.data(), scales.data(), rows, cols, expected.data());
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    Tensor out = Zeros({rows, cols}, dtype);
    backend().DequantizeInt8(q, scale, out);
    std::vector<uint16_t> rounded(expected.size());
    std::vector<float> want = expected;
    if (dtype != DType::kF32) {
      ConvertFloats(expected.data(), DType::kF32, rounded.data(), dtype, expected.size());
      ConvertFloats(rounded.data(), dtype, want.data(), DType::kF32, expected.size());
    }
    EXPECT_EQ(Floats(out), want) << Name(dtype);
  }
  Tensor wrong_scale = Zeros({rows}), out = Zeros({rows, cols});
  EXPECT_THROW(backend().DequantizeInt8(q, wrong_scale, out), Error);
  Tensor not_codes = Zeros({rows, cols});
  EXPECT_THROW(backend().DequantizeInt8(not_codes, scale, out), Error);
}

}  // namespace
}  // namespace baton::kernels_test
