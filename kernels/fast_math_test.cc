// The CPU kernels' float helpers (kernels/cpu/fast_math.h): ExpF's accuracy and edge values,
// the fixed-order sums, dot products and max, and the bf16 conversions.
#include "kernels/cpu/fast_math.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype.h"

namespace baton::cpu {
namespace {

TEST(FastMathTest, ExpFIsWithinFourUlpOfExpOverItsRange) {
  double worst = 0.0;
  for (double x = -87.0; x <= 88.0; x += 0.00137) {
    const float xf = static_cast<float>(x);
    const double exact = std::exp(static_cast<double>(xf));
    worst = std::max(worst, std::abs(ExpF(xf) - exact) / exact);
  }
  EXPECT_LT(worst, 4 * std::numeric_limits<float>::epsilon());
}

TEST(FastMathTest, ExpFEdgeValues) {
  EXPECT_EQ(ExpF(0.0f), 1.0f);
  EXPECT_EQ(ExpF(-100.0f), 0.0f);
  EXPECT_EQ(ExpF(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isfinite(ExpF(1000.0f)));
  EXPECT_GT(ExpF(1000.0f), 1e38f);
  EXPECT_TRUE(std::isnan(ExpF(std::numeric_limits<float>::quiet_NaN())));
}

TEST(FastMathTest, SumAndDotAgreeWithDoublePrecision) {
  for (int n : {1, 7, 8, 9, 100, 1001}) {
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    double sum = 0.0, dot = 0.0, magnitude = 0.0;
    for (int i = 0; i < n; ++i) {
      x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
      y[i] = std::cos(0.11f * static_cast<float>(i));
      sum += x[i];
      dot += static_cast<double>(x[i]) * y[i];
      magnitude += std::abs(x[i]);
    }
    EXPECT_NEAR(SumF(x.data(), n), sum, 1e-6 * magnitude) << n;
    EXPECT_NEAR(DotF(x.data(), y.data(), n), dot, 1e-6 * magnitude) << n;
  }
}

TEST(FastMathTest, MaxFindsTheLargestAndSkipsNan) {
  std::vector<float> x = {
      3.0f,   -1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f, 9.5f, 0.0f, 1.0f, 4.0f, 9.25f,
      -20.0f, 9.0f};
  EXPECT_EQ(MaxF(x.data(), static_cast<int64_t>(x.size())), 9.5f);
  EXPECT_EQ(MaxF(x.data(), 2), 3.0f);
  std::vector<float> negative = {-5.0f, -2.0f, -7.0f};
  EXPECT_EQ(MaxF(negative.data(), 3), -2.0f);
}

TEST(FastMathTest, AbsMaxFindsTheLargestMagnitudeAndSkipsNan) {
  std::vector<float> x = {1.0f, -3.0f, 2.0f, 0.5f, -9.5f, 4.0f, 7.0f, -0.0f, 8.0f, 1.0f, 2.0f};
  x[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(AbsMaxF(x.data(), static_cast<int64_t>(x.size())), 9.5f);
  EXPECT_EQ(AbsMaxF(x.data(), 4), 3.0f);
  EXPECT_EQ(AbsMaxF(x.data(), 0), 0.0f);
  const float negative_zero = -0.0f;
  EXPECT_FALSE(std::signbit(AbsMaxF(&negative_zero, 1)));
}

// Widen and Narrow<BF16> are the bf16 kernels' conversions: the bits of core/dtype.h's. Every
// bf16 widens exactly; every float whose low half is one of the patterns that decide rounding
// (zero, just below, at and just above the halfway point, all ones), under each of the 65536 high
// halves, narrows as FloatToBFloat16 does: ties to even both ways, overflow to infinity,
// subnormals, and NaNs of every sign and payload (kept quiet). Scalar, and in a loop the
// compiler vectorises.
TEST(FastMathTest, Bf16WidenAndNarrowAreTheDtypeConversions) {
  std::vector<float> inputs;
  for (uint32_t high = 0; high < 0x10000; ++high) {
    for (uint32_t low : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      inputs.push_back(std::bit_cast<float>(high << 16 | low));
    }
  }
  std::vector<BF16> narrowed(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) narrowed[i] = Narrow<BF16>(inputs[i]);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const uint16_t expected = FloatToBFloat16(inputs[i]);
    ASSERT_EQ(narrowed[i].bits, expected) << std::hex << std::bit_cast<uint32_t>(inputs[i]);
    ASSERT_EQ(Narrow<BF16>(inputs[i]).bits, expected);
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const BF16 x{static_cast<uint16_t>(h)};
    ASSERT_EQ(std::bit_cast<uint32_t>(Widen(x)), std::bit_cast<uint32_t>(BFloat16ToFloat(x.bits)));
  }
}

}  // namespace
}  // namespace baton::cpu
