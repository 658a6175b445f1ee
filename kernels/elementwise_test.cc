// CPU backend memory and elementwise ops and reductions: Zero, Copy, Add, Accumulate, Scale,
// SumOfSquares, AllFinite.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/kernels_test_util.h"

namespace baton::kernels_test {
namespace {

using ElementwiseTest = CpuBackendTest;

TEST_F(ElementwiseTest, ZeroClearsEveryElement) {
  Tensor t = Random({3, 1000});
  backend().Zero(t);
  EXPECT_EQ(Floats(t), std::vector<float>(3000, 0.0f));
  Tensor half = Random({17}, 1.0f, DType::kBF16);
  backend().Zero(half);
  EXPECT_EQ(Floats(half), std::vector<float>(17, 0.0f));
}

TEST_F(ElementwiseTest, CopyConvertsBetweenFloatTypes) {
  Tensor src = Values({4}, {1.0f, -2.5f, 3.140625f, 65504.0f});
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    Tensor dst = Zeros({4}, dtype);
    backend().Copy(src, dst);
    Tensor back = Zeros({4});
    backend().Copy(dst, back);
    const std::vector<float> expected =
        dtype == DType::kBF16 ? std::vector<float>{1.0f, -2.5f, 3.140625f, 65536.0f} : Floats(src);
    EXPECT_EQ(Floats(back), expected) << Name(dtype);
  }
}

TEST_F(ElementwiseTest, CopyMovesTokenIdsAndRejectsMismatches) {
  Tensor ids = Ids({3, 5}, 100);
  Tensor copy = Zeros({3, 5}, DType::kI32);
  backend().Copy(ids, copy);
  for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(copy.data<int32_t>()[i], ids.data<int32_t>()[i]);
  Tensor floats = Zeros({3, 5});
  EXPECT_THROW(backend().Copy(ids, floats), Error);
  Tensor wrong_shape = Zeros({5, 3}, DType::kI32);
  EXPECT_THROW(backend().Copy(ids, wrong_shape), Error);
}

TEST_F(ElementwiseTest, AddAccumulateAndScaleComputeElementwise) {
  Tensor a = Random({5000});
  Tensor b = Random({5000});
  Tensor sum = Zeros({5000});
  backend().Add(a, b, sum);
  const std::vector<float> av = Floats(a), bv = Floats(b);
  std::vector<float> expected(5000);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = av[i] + bv[i];
  EXPECT_EQ(Floats(sum), expected);
  backend().Accumulate(a, sum);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] += av[i];
  EXPECT_EQ(Floats(sum), expected);
  backend().Scale(sum, -0.5f);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] *= -0.5f;
  EXPECT_EQ(Floats(sum), expected);
  Tensor in_place = Clone(a);
  backend().Add(in_place, b, in_place);  // out may alias an input
  const std::vector<float> in_place_sum = Floats(in_place);
  for (size_t i = 0; i < av.size(); ++i) EXPECT_EQ(in_place_sum[i], av[i] + bv[i]);
}

TEST_F(ElementwiseTest, ShapeMismatchIsRejected) {
  Tensor a = Random({4, 3});
  Tensor b = Random({3, 4});
  Tensor out = Zeros({4, 3});
  EXPECT_THROW(backend().Add(a, b, out), Error);
  EXPECT_THROW(backend().Accumulate(b, out), Error);
}

TEST_F(ElementwiseTest, SumOfSquaresMatchesDoubleSumOverManyBlocks) {
  Tensor t = Random({10007}, 3.0f);
  double expected = 0.0;
  for (float v : Floats(t)) expected += static_cast<double>(v) * v;
  EXPECT_NEAR(backend().SumOfSquares(t), expected, 1e-12 * expected);
  Tensor small = Values({3}, {1.0f, -2.0f, 0.5f});
  EXPECT_EQ(backend().SumOfSquares(small), 5.25);
  Tensor empty = Zeros({0});
  EXPECT_EQ(backend().SumOfSquares(empty), 0.0);
}

TEST_F(ElementwiseTest, AllFiniteDetectsInfinityAndNanInEveryFloatType) {
  const float specials[] = {std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    Tensor t = Random({9000}, 100.0f, dtype);
    EXPECT_TRUE(backend().AllFinite(t)) << Name(dtype);
    for (float special : specials) {
      for (int64_t position : {int64_t{0}, int64_t{4097}, int64_t{8999}}) {
        Tensor bad = Clone(t);
        Tensor one = Values({1}, {special}, dtype);
        std::memcpy(static_cast<char*>(bad.raw()) + position * SizeOf(dtype), one.raw(),
                    SizeOf(dtype));
        EXPECT_FALSE(backend().AllFinite(bad))
            << Name(dtype) << " " << special << " at " << position;
      }
    }
  }
  Tensor largest_half = Values({1}, {65504.0f}, DType::kF16);
  EXPECT_TRUE(backend().AllFinite(largest_half));
}

}  // namespace
}  // namespace baton::kernels_test
