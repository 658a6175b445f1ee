#include "core/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

namespace baton {
namespace {

TEST(HalfTest, ExactValuesRoundTrip) {
  for (float v : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 0.000060975552f, 5.9604645e-08f}) {
    EXPECT_EQ(HalfToFloat(FloatToHalf(v)), v) << v;
  }
}

TEST(HalfTest, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const float f = HalfToFloat(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f))));
    } else {
      EXPECT_EQ(FloatToHalf(f), h) << bits;
    }
  }
}

TEST(HalfTest, RoundsToNearestEven) {
  // 1 + 2^-11 lies halfway between 1 and the next half (1 + 2^-10): ties go to even (1).
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f + 0x1p-11f)), 1.0f);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f + 3 * 0x1p-11f)), 1.0f + 0x1p-9f);
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f + 0x1p-11f + 0x1p-20f)), 1.0f + 0x1p-10f);
  // Smallest subnormal is 2^-24; 2^-25 is a tie and goes to zero, a bit more goes up.
  EXPECT_EQ(HalfToFloat(FloatToHalf(0x1p-25f)), 0.0f);
  EXPECT_EQ(HalfToFloat(FloatToHalf(0x1.0001p-25f)), 0x1p-24f);
}

TEST(HalfTest, OverflowAndSpecials) {
  EXPECT_EQ(HalfToFloat(FloatToHalf(65519.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(HalfToFloat(FloatToHalf(65520.0f))));
  EXPECT_TRUE(std::isinf(HalfToFloat(FloatToHalf(1e10f))));
  EXPECT_EQ(HalfToFloat(FloatToHalf(-std::numeric_limits<float>::infinity())),
            -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(BFloat16Test, RoundsToNearestEvenAndKeepsSpecials) {
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + 0x1p-8f)), 1.0f);  // tie to even
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);
  EXPECT_TRUE(std::isinf(BFloat16ToFloat(FloatToBFloat16(std::numeric_limits<float>::infinity()))));
  EXPECT_TRUE(std::isinf(BFloat16ToFloat(FloatToBFloat16(3.4028235e38f))));  // rounds up to inf
  EXPECT_TRUE(
      std::isnan(BFloat16ToFloat(FloatToBFloat16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits only in the low bits must not become infinity.
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::bit_cast<float>(0x7f800001u)))));
}

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(SizeOf(DType::kF32), 4u);
  EXPECT_EQ(SizeOf(DType::kBF16), 2u);
  EXPECT_EQ(ParseDType("fp16"), DType::kF16);
  EXPECT_EQ(ParseDType("bf16"), DType::kBF16);
  EXPECT_THROW(ParseDType("fp8"), std::runtime_error);
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

TEST(ConvertFloatsTest, BulkConversionsMatchTheScalarOnesBitForBit) {
  // Every half, and a spread of floats including subnormals, ties and specials, both ways.
  std::vector<uint16_t> halves(0x10000);
  for (uint32_t i = 0; i < 0x10000; ++i) halves[i] = static_cast<uint16_t>(i);
  std::vector<float> floats(halves.size());
  ConvertFloats(halves.data(), DType::kF16, floats.data(), DType::kF32, halves.size());
  for (size_t i = 0; i < halves.size(); ++i) {
    const float expected = HalfToFloat(halves[i]);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(floats[i]));
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(floats[i]), std::bit_cast<uint32_t>(expected)) << i;
    }
  }
  std::vector<float> inputs;
  for (uint32_t bits = 0; bits < 0xffffffffu - 0x10001u; bits += 0x10001u) {
    inputs.push_back(std::bit_cast<float>(bits));
  }
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    std::vector<uint16_t> out(inputs.size());
    ConvertFloats(inputs.data(), DType::kF32, out.data(), dtype, inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (std::isnan(inputs[i])) continue;
      const uint16_t expected =
          dtype == DType::kF16 ? FloatToHalf(inputs[i]) : FloatToBFloat16(inputs[i]);
      ASSERT_EQ(out[i], expected) << Name(dtype) << " " << inputs[i];
    }
  }
}

TEST(ConvertFloatsTest, Bf16BulkConversionsMatchTheScalarOnesIncludingNaNsAndTies) {
  // Every bf16 to f32 (a vector path and its scalar tail: 0x10000 + 3 elements).
  std::vector<uint16_t> all(0x10003);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> widened(all.size());
  ConvertFloats(all.data(), DType::kBF16, widened.data(), DType::kF32, all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(widened[i]), static_cast<uint32_t>(all[i]) << 16) << i;
  }
  // f32 to bf16, bit for bit, NaN payloads too: ties both ways, the largest finite values
  // rounding to infinity, signalling and quiet NaNs of both signs, subnormals.
  std::vector<uint32_t> bits = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x7f7fffffu, 0xff7fffffu,
                                0x7f800000u, 0xff800000u, 0x7f800001u, 0xff800001u, 0x7fc00000u,
                                0x7fffffffu, 0xffffffffu, 0x00008000u, 0x00018000u, 0x80000001u};
  for (uint32_t b = 0; b < 0xffffffffu - 0x7fff1u; b += 0x7fff1u) bits.push_back(b);
  std::vector<float> inputs(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) inputs[i] = std::bit_cast<float>(bits[i]);
  std::vector<uint16_t> out(inputs.size());
  ConvertFloats(inputs.data(), DType::kF32, out.data(), DType::kBF16, inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_EQ(out[i], FloatToBFloat16(inputs[i])) << std::hex << bits[i];
  }
}

}  // namespace
}  // namespace baton
