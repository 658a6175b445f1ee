// The numeric test helpers themselves: normalised error, random fills, and a gradient checker
// that accepts true gradients and catches wrong ones.
#include "kernels/testing/numeric_check.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

namespace baton::numeric_check {
namespace {

class NumericCheckTest : public ::testing::Test {
 protected:
  Tensor Make(const Shape& shape) {
    return Tensor::Zeros(allocator_, shape, DType::kF32, MemCategory::kActivations);
  }
  MemoryLedger ledger_;
  CpuAllocator allocator_{ledger_};
  Rng rng_{7};
};

TEST_F(NumericCheckTest, NormalisedErrorIsRelativeToTheReference) {
  const std::vector<float> reference = {3.0f, 4.0f};
  const std::vector<float> off = {3.0f, 4.5f};
  EXPECT_DOUBLE_EQ(NormalisedError(off, reference), 0.5 / 5.0);
  EXPECT_EQ(NormalisedError(reference, reference), 0.0);
  const std::vector<float> zeros = {0.0f, 0.0f};
  EXPECT_EQ(NormalisedError(zeros, zeros), 0.0);
  EXPECT_GT(NormalisedError(reference, zeros), 1e20);
}

TEST_F(NumericCheckTest, NormalisedErrorComparesTensorsOfDifferentDtypes) {
  Tensor a = FromFloats(allocator_, {3}, std::vector<float>{1.0f, 2.0f, 3.0f}, DType::kBF16);
  Tensor b = FromFloats(allocator_, {3}, std::vector<float>{1.0f, 2.0f, 3.0f});
  EXPECT_EQ(NormalisedError(a, b), 0.0);
}

TEST_F(NumericCheckTest, ColumnsOfTakesEachRowsColumnsInItsDtype) {
  Tensor t =
      FromFloats(allocator_, {2, 1, 4}, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, DType::kBF16);
  Tensor middle = ColumnsOf(allocator_, t, 1, 2);
  EXPECT_EQ(middle.shape(), (Shape{2, 2}));
  EXPECT_EQ(middle.dtype(), DType::kBF16);
  EXPECT_EQ(ToFloatVector(middle), (std::vector<float>{2, 3, 6, 7}));
  EXPECT_THROW(ColumnsOf(allocator_, t, 3, 2), Error);
}

TEST_F(NumericCheckTest, FillNormalHasTheRequestedMeanAndSpread) {
  Tensor t = Make({20000});
  FillNormal(t, rng_, 2.0f, 1.0f);
  double sum = 0.0, squares = 0.0;
  for (float v : ToFloatVector(t)) {
    sum += v;
    squares += static_cast<double>(v) * v;
  }
  const double mean = sum / 20000;
  EXPECT_NEAR(mean, 1.0, 0.05);
  EXPECT_NEAR(std::sqrt(squares / 20000 - mean * mean), 2.0, 0.05);
}

// loss(x) = sum(r * x^3): its gradient is 3 x^2 r.
class CubicTest : public NumericCheckTest {
 protected:
  CubicTest() : x_(Make({40})), r_(Make({40})), grad_(Make({40})) {
    FillNormal(x_, rng_);
    FillNormal(r_, rng_);
    for (int i = 0; i < 40; ++i) {
      grad_.data<float>()[i] = 3 * x_.data<float>()[i] * x_.data<float>()[i] * r_.data<float>()[i];
    }
  }
  double Loss() {
    Tensor cube = Make({40});
    for (int i = 0; i < 40; ++i) cube.data<float>()[i] = std::pow(x_.data<float>()[i], 3.0f);
    ++calls_;
    return ProjectedSum(cube, r_);
  }
  Tensor x_, r_, grad_;
  int calls_ = 0;
};

TEST_F(CubicTest, TrueGradientPassesAndInputIsRestored) {
  const std::vector<float> before = ToFloatVector(x_);
  const GradCheckResult result = CheckGradient(
      x_, [this] { return Loss(); }, grad_);
  EXPECT_TRUE(result.ok) << result.Describe();
  EXPECT_LT(result.error, 1e-3);
  EXPECT_EQ(result.entries.size(), 40u);
  EXPECT_EQ(ToFloatVector(x_), before);
}

TEST_F(CubicTest, ScaledOrSingleWrongGradientFails) {
  Tensor scaled = Make({40});
  for (int i = 0; i < 40; ++i) scaled.data<float>()[i] = 1.05f * grad_.data<float>()[i];
  EXPECT_FALSE(CheckGradient(
                   x_, [this] { return Loss(); }, scaled)
                   .ok);
  grad_.data<float>()[17] += 1.0f;
  const GradCheckResult result = CheckGradient(
      x_, [this] { return Loss(); }, grad_);
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.Describe().find("[17]"), std::string::npos) << result.Describe();
}

TEST_F(CubicTest, LargeInputsAreSampled) {
  GradCheckOptions options;
  options.max_elements = 10;
  const GradCheckResult result = CheckGradient(
      x_, [this] { return Loss(); }, grad_, options);
  ASSERT_EQ(result.entries.size(), 10u);
  EXPECT_EQ(calls_, 20);
  for (size_t i = 1; i < result.entries.size(); ++i) {
    EXPECT_LT(result.entries[i - 1].index, result.entries[i].index);
  }
  EXPECT_TRUE(result.ok) << result.Describe();
}

TEST_F(NumericCheckTest, GradientCheckNeedsAnF32InputAndMatchingGradient) {
  Tensor half = FromFloats(allocator_, {2}, std::vector<float>{1.0f, 2.0f}, DType::kBF16);
  Tensor grad = Make({2});
  EXPECT_THROW(CheckGradient(
                   half, [] { return 0.0; }, grad),
               Error);
  Tensor x = Make({3});
  EXPECT_THROW(CheckGradient(
                   x, [] { return 0.0; }, grad),
               Error);
}

}  // namespace
}  // namespace baton::numeric_check
