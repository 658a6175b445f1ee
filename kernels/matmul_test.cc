// CPU backend GEMM: Matmul against a naive triple loop for every transpose combination,
// accumulate, bias, its gradients by finite differences, and BiasBackward.
#include <tuple>

#include "kernels/kernels_test_util.h"

namespace baton::kernels_test {
namespace {

using numeric_check::NormalisedError;
using numeric_check::ProjectedSum;

// out (m,n) = op(a) op(b) in double, a and b row-major as stored.
std::vector<float> NaiveMatmul(const std::vector<float>& a, bool trans_a,
                               const std::vector<float>& b, bool trans_b, int64_t m, int64_t n,
                               int64_t k) {
  return ReferenceGemm(trans_a, trans_b, m, n, k, 1.0f, a, trans_a ? m : k, b, trans_b ? k : n,
                       0.0f, std::vector<float>(static_cast<size_t>(m * n)), n);
}

class MatmulTest : public CpuBackendTest,
                   public ::testing::WithParamInterface<std::tuple<bool, bool>> {
 protected:
  bool trans_a() const { return std::get<0>(GetParam()); }
  bool trans_b() const { return std::get<1>(GetParam()); }
  Shape AShape(int64_t m, int64_t k) const { return trans_a() ? Shape{k, m} : Shape{m, k}; }
  Shape BShape(int64_t k, int64_t n) const { return trans_b() ? Shape{n, k} : Shape{k, n}; }
};

// Shapes include tall and wide outputs that the CPU backend cuts into row or column blocks.
TEST_P(MatmulTest, MatchesNaiveTripleLoop) {
  for (auto [m, n, k] : {std::tuple{7, 5, 9}, std::tuple{67, 45, 81}, std::tuple{1, 130, 3},
                         std::tuple{300, 40, 20}, std::tuple{20, 600, 30}}) {
    Tensor a = Random(AShape(m, k));
    Tensor b = Random(BShape(k, n));
    Tensor out = Random({m, n});  // overwritten: accumulate is off
    backend().Matmul(a, trans_a(), b, trans_b(), out, /*accumulate=*/false);
    const std::vector<float> expected =
        NaiveMatmul(Floats(a), trans_a(), Floats(b), trans_b(), m, n, k);
    EXPECT_LT(NormalisedError(Floats(out), expected), 1e-6) << m << "x" << n << "x" << k;
  }
}

TEST_P(MatmulTest, AccumulateAddsToExistingOutput) {
  const int64_t m = 11, n = 6, k = 13;
  Tensor a = Random(AShape(m, k));
  Tensor b = Random(BShape(k, n));
  Tensor out = Random({m, n});
  const std::vector<float> before = Floats(out);
  backend().Matmul(a, trans_a(), b, trans_b(), out, /*accumulate=*/true);
  std::vector<float> expected = NaiveMatmul(Floats(a), trans_a(), Floats(b), trans_b(), m, n, k);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] += before[i];
  EXPECT_LT(NormalisedError(Floats(out), expected), 1e-6);
}

TEST_P(MatmulTest, BiasIsBroadcastOverRows) {
  const int64_t m = 9, n = 7, k = 4;
  Tensor a = Random(AShape(m, k));
  Tensor b = Random(BShape(k, n));
  Tensor bias = Random({n});
  for (bool accumulate : {false, true}) {
    Tensor out = Random({m, n});
    const std::vector<float> before = Floats(out);
    backend().Matmul(a, trans_a(), b, trans_b(), out, accumulate, &bias);
    std::vector<float> expected = NaiveMatmul(Floats(a), trans_a(), Floats(b), trans_b(), m, n, k);
    const std::vector<float> bias_values = Floats(bias);
    for (int64_t i = 0; i < m * n; ++i) {
      expected[i] += bias_values[i % n] + (accumulate ? before[i] : 0.0f);
    }
    EXPECT_LT(NormalisedError(Floats(out), expected), 1e-6) << "accumulate " << accumulate;
  }
}

// The layer backward of out = op(a) op(b) + bias is three more GEMM calls and BiasBackward;
// finite differences confirm the transposes used for each case.
TEST_P(MatmulTest, GradientsOfEveryOperandMatchFiniteDifferences) {
  const int64_t m = 5, n = 4, k = 6;
  Tensor a = Random(AShape(m, k));
  Tensor b = Random(BShape(k, n));
  Tensor bias = Random({n});
  Tensor dout = Random({m, n});
  Tensor out = Zeros({m, n});
  const auto loss = [&] {
    backend().Matmul(a, trans_a(), b, trans_b(), out, false, &bias);
    return ProjectedSum(out, dout);
  };
  Tensor da = Zeros(a.shape());
  Tensor db = Zeros(b.shape());
  Tensor dbias = Zeros({n});
  if (!trans_a()) {  // da (m,k) = dout op(b)^T
    backend().Matmul(dout, false, b, !trans_b(), da, true);
  } else {  // da (k,m) = op(b) dout^T
    backend().Matmul(b, trans_b(), dout, true, da, true);
  }
  if (!trans_b()) {  // db (k,n) = op(a)^T dout
    backend().Matmul(a, !trans_a(), dout, false, db, true);
  } else {  // db (n,k) = dout^T op(a)
    backend().Matmul(dout, true, a, trans_a(), db, true);
  }
  backend().BiasBackward(dout, dbias);
  ExpectGradient(a, loss, da);
  ExpectGradient(b, loss, db);
  ExpectGradient(bias, loss, dbias);
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, MatmulTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "AT" : "A") + "_" +
                                  (std::get<1>(info.param) ? "BT" : "B");
                         });

using MatmulShapeTest = CpuBackendTest;

TEST_F(MatmulShapeTest, LeadingDimensionsOfActivationsAreRows) {
  Tensor x = Random({2, 3, 4});
  Tensor w = Random({4, 5});
  Tensor out = Zeros({2, 3, 5});
  backend().Matmul(x, false, w, false, out, false);
  const std::vector<float> expected = NaiveMatmul(Floats(x), false, Floats(w), false, 6, 5, 4);
  EXPECT_LT(NormalisedError(Floats(out), expected), 1e-6);
}

TEST_F(MatmulShapeTest, MismatchedInnerDimensionsAreRejected) {
  Tensor a = Random({3, 4});
  Tensor b = Random({5, 2});
  Tensor out = Zeros({3, 2});
  EXPECT_THROW(backend().Matmul(a, false, b, false, out, false), Error);
  Tensor wrong_out = Zeros({3, 3});
  Tensor b_ok = Random({4, 2});
  EXPECT_THROW(backend().Matmul(a, false, b_ok, false, wrong_out, false), Error);
}

TEST_F(MatmulShapeTest, EmptyInnerDimensionLeavesOnlyTheBias) {
  Tensor a = Zeros({3, 0});
  Tensor b = Zeros({0, 2});
  Tensor bias = Values({2}, {1.5f, -2.0f});
  Tensor out = Random({3, 2});
  backend().Matmul(a, false, b, false, out, false, &bias);
  EXPECT_EQ(Floats(out), (std::vector<float>{1.5f, -2.0f, 1.5f, -2.0f, 1.5f, -2.0f}));
}

TEST_F(MatmulShapeTest, BiasBackwardAddsColumnSums) {
  Tensor dout = Values({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor dbias = Values({2}, {10, 20});
  backend().BiasBackward(dout, dbias);
  EXPECT_EQ(Floats(dbias), (std::vector<float>{19, 32}));
}

TEST_F(MatmulShapeTest, BiasBackwardTwiceDoublesTheGradient) {
  Tensor dout = Random({300, 70});
  Tensor dbias = Zeros({70});
  backend().BiasBackward(dout, dbias);
  const std::vector<float> once = Floats(dbias);
  backend().BiasBackward(dout, dbias);
  const std::vector<float> twice = Floats(dbias);
  for (size_t i = 0; i < once.size(); ++i) EXPECT_EQ(twice[i], 2.0f * once[i]) << i;
}

}  // namespace
}  // namespace baton::kernels_test
