// CPU backend embedding, LayerNorm and GELU: forward against reference loops, every backward by
// finite differences, and backward accumulating into the gradients it is given.
#include <cmath>
#include <numbers>

#include "kernels/cpu/fast_math.h"
#include "kernels/kernels_test_util.h"

namespace baton::kernels_test {
namespace {

using numeric_check::NormalisedError;
using numeric_check::ProjectedSum;

using EmbeddingTest = CpuBackendTest;

TEST_F(EmbeddingTest, ForwardAddsTokenAndPositionRows) {
  const int64_t batch = 2, seq = 3, vocab = 5, channels = 4, max_seq = 6;
  Tensor tokens = Ids({batch, seq}, vocab);
  Tensor wte = Random({vocab, channels});
  Tensor wpe = Random({max_seq, channels});
  Tensor out = Zeros({batch, seq, channels});
  backend().EmbeddingForward(tokens, wte, wpe, out);
  const std::vector<float> o = Floats(out), te = Floats(wte), pe = Floats(wpe);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      const int32_t token = tokens.data<int32_t>()[b * seq + t];
      for (int64_t c = 0; c < channels; ++c) {
        EXPECT_EQ(o[(b * seq + t) * channels + c], te[token * channels + c] + pe[t * channels + c]);
      }
    }
  }
}

TEST_F(EmbeddingTest, OutOfRangeTokenIsRejected) {
  Tensor tokens = Ids({1, 2}, 3);
  tokens.data<int32_t>()[1] = 3;
  Tensor wte = Random({3, 4});
  Tensor wpe = Random({2, 4});
  Tensor out = Zeros({1, 2, 4});
  EXPECT_THROW(backend().EmbeddingForward(tokens, wte, wpe, out), Error);
  Tensor short_wpe = Random({1, 4});
  tokens.data<int32_t>()[1] = 0;
  EXPECT_THROW(backend().EmbeddingForward(tokens, wte, short_wpe, out), Error);
}

TEST_F(EmbeddingTest, BackwardMatchesFiniteDifferencesWithRepeatedTokens) {
  const int64_t batch = 3, seq = 4, vocab = 3, channels = 5;  // 12 tokens over 3 ids: repeats
  Tensor tokens = Ids({batch, seq}, vocab);
  Tensor wte = Random({vocab, channels});
  Tensor wpe = Random({seq + 2, channels});
  Tensor dout = Random({batch, seq, channels});
  Tensor out = Zeros({batch, seq, channels});
  const auto loss = [&] {
    backend().EmbeddingForward(tokens, wte, wpe, out);
    return ProjectedSum(out, dout);
  };
  Tensor dwte = Zeros(wte.shape());
  Tensor dwpe = Zeros(wpe.shape());
  backend().EmbeddingBackward(tokens, dout, dwte, dwpe);
  ExpectGradient(wte, loss, dwte);
  ExpectGradient(wpe, loss, dwpe);
}

TEST_F(EmbeddingTest, BackwardAccumulatesAndSkipsUndefinedGradients) {
  Tensor tokens = Ids({2, 8}, 4);
  Tensor dout = Random({2, 8, 6});
  Tensor dwte = Zeros({4, 6});
  Tensor dwpe = Zeros({8, 6});
  backend().EmbeddingBackward(tokens, dout, dwte, dwpe);
  const std::vector<float> wte_once = Floats(dwte), wpe_once = Floats(dwpe);
  backend().EmbeddingBackward(tokens, dout, dwte, dwpe);
  const std::vector<float> wte_twice = Floats(dwte), wpe_twice = Floats(dwpe);
  for (size_t i = 0; i < wte_once.size(); ++i) EXPECT_NEAR(wte_twice[i], 2 * wte_once[i], 1e-5);
  for (size_t i = 0; i < wpe_once.size(); ++i) EXPECT_EQ(wpe_twice[i], 2 * wpe_once[i]);
  Tensor undefined;
  backend().EmbeddingBackward(tokens, dout, undefined, dwpe);  // dwte skipped
  const std::vector<float> wpe_thrice = Floats(dwpe);
  for (size_t i = 0; i < wpe_once.size(); ++i) EXPECT_NEAR(wpe_thrice[i], 3 * wpe_once[i], 1e-5);
  EXPECT_EQ(Floats(dwte), wte_twice);
}

using LayerNormTest = CpuBackendTest;

TEST_F(LayerNormTest, ForwardNormalisesEachRowAndWritesStatistics) {
  const int64_t rows = 6, cols = 37;
  Tensor x = Random({2, 3, cols}, 3.0f);
  Tensor weight = Random({cols});
  Tensor bias = Random({cols});
  Tensor out = Zeros(x.shape());
  Tensor mean = Zeros({rows});
  Tensor rstd = Zeros({rows});
  backend().LayerNormForward(x, weight, bias, out, mean, rstd);
  const std::vector<float> xv = Floats(x), w = Floats(weight), bv = Floats(bias);
  std::vector<float> expected(xv.size());
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0.0, squares = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum += xv[r * cols + c];
    const double m = sum / cols;
    for (int64_t c = 0; c < cols; ++c) squares += (xv[r * cols + c] - m) * (xv[r * cols + c] - m);
    const double s = 1.0 / std::sqrt(squares / cols + 1e-5);
    EXPECT_NEAR(mean.data<float>()[r], m, 1e-5);
    EXPECT_NEAR(rstd.data<float>()[r], s, 1e-5 * s);
    for (int64_t c = 0; c < cols; ++c) {
      expected[r * cols + c] = static_cast<float>((xv[r * cols + c] - m) * s * w[c] + bv[c]);
    }
  }
  EXPECT_LT(NormalisedError(Floats(out), expected), 1e-6);
}

TEST_F(LayerNormTest, BackwardMatchesFiniteDifferencesForInputWeightAndBias) {
  const int64_t rows = 40, cols = 9;  // rows span two of the backward's row blocks
  Tensor x = Random({rows, cols});
  Tensor weight = Random({cols});
  Tensor bias = Random({cols});
  Tensor dout = Random({rows, cols});
  Tensor out = Zeros(x.shape()), mean = Zeros({rows}), rstd = Zeros({rows});
  const auto loss = [&] {
    backend().LayerNormForward(x, weight, bias, out, mean, rstd);
    return ProjectedSum(out, dout);
  };
  loss();
  Tensor dx = Zeros(x.shape()), dweight = Zeros({cols}), dbias = Zeros({cols});
  backend().LayerNormBackward(dout, x, weight, mean, rstd, dx, dweight, dbias);
  ExpectGradient(x, loss, dx, 5e-3, 1e-3);
  ExpectGradient(weight, loss, dweight);
  ExpectGradient(bias, loss, dbias);
}

TEST_F(LayerNormTest, BackwardTwiceDoublesEveryGradient) {
  const int64_t rows = 70, cols = 16;
  Tensor x = Random({rows, cols}), weight = Random({cols}), bias = Random({cols});
  Tensor out = Zeros(x.shape()), mean = Zeros({rows}), rstd = Zeros({rows});
  backend().LayerNormForward(x, weight, bias, out, mean, rstd);
  Tensor dout = Random({rows, cols});
  Tensor dx = Zeros(x.shape()), dweight = Zeros({cols}), dbias = Zeros({cols});
  backend().LayerNormBackward(dout, x, weight, mean, rstd, dx, dweight, dbias);
  const std::vector<float> dx1 = Floats(dx), dw1 = Floats(dweight), db1 = Floats(dbias);
  backend().LayerNormBackward(dout, x, weight, mean, rstd, dx, dweight, dbias);
  const std::vector<float> dx2 = Floats(dx), dw2 = Floats(dweight), db2 = Floats(dbias);
  for (size_t i = 0; i < dx1.size(); ++i) EXPECT_EQ(dx2[i], 2.0f * dx1[i]);
  for (size_t i = 0; i < dw1.size(); ++i) EXPECT_EQ(dw2[i], 2.0f * dw1[i]);
  for (size_t i = 0; i < db1.size(); ++i) EXPECT_EQ(db2[i], 2.0f * db1[i]);
}

using GeluTest = CpuBackendTest;

TEST_F(GeluTest, ForwardMatchesTheTanhFormula) {
  Tensor x = Random({3, 1000}, 3.0f);
  Tensor out = Zeros(x.shape());
  backend().GeluForward(x, out);
  const std::vector<float> xv = Floats(x), o = Floats(out);
  for (size_t i = 0; i < xv.size(); ++i) {
    const double v = xv[i];
    const double expected =
        0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(o[i], expected, 1e-6 + 1e-6 * std::abs(expected)) << "x = " << v;
  }
  Tensor fixed = Values({3}, {0.0f, 1.0f, -1.0f});
  Tensor fixed_out = Zeros({3});
  backend().GeluForward(fixed, fixed_out);
  EXPECT_EQ(Floats(fixed_out)[0], 0.0f);
  EXPECT_NEAR(Floats(fixed_out)[1], 0.841192f, 1e-6f);
  EXPECT_NEAR(Floats(fixed_out)[2], -0.158808f, 1e-6f);
}

// The backend's loops are vectorised (and, on x86-64, may run an AVX2 clone); this scalar code
// in a test file is neither. Same bits means vectorisation did not change the arithmetic.
TEST_F(GeluTest, VectorisedKernelsGiveTheScalarFormulasBits) {
  Tensor x = Random({3, 1001}, 3.0f);
  Tensor dout = Random(x.shape());
  Tensor out = Zeros(x.shape());
  Tensor dx = Zeros(x.shape());
  backend().GeluForward(x, out);
  backend().GeluBackward(x, dout, dx);
  const std::vector<float> xv = Floats(x), dv = Floats(dout), o = Floats(out), g = Floats(dx);
  for (size_t i = 0; i < xv.size(); ++i) {
    ASSERT_EQ(o[i], cpu::GeluF(xv[i])) << "x = " << xv[i];
    ASSERT_EQ(g[i], 0.0f + cpu::GeluGradF(xv[i]) * dv[i]) << "x = " << xv[i];
  }
}

TEST_F(GeluTest, BackwardMatchesFiniteDifferences) {
  Tensor x = Random({4, 33}, 2.0f);
  Tensor dout = Random(x.shape());
  Tensor out = Zeros(x.shape());
  const auto loss = [&] {
    backend().GeluForward(x, out);
    return ProjectedSum(out, dout);
  };
  Tensor dx = Zeros(x.shape());
  backend().GeluBackward(x, dout, dx);
  ExpectGradient(x, loss, dx, 2e-3, 1e-3);
}

TEST_F(GeluTest, BackwardAccumulates) {
  Tensor x = Random({5, 7});
  Tensor dout = Random(x.shape());
  Tensor dx = Random(x.shape());
  const std::vector<float> before = Floats(dx);
  Tensor fresh = Zeros(x.shape());
  backend().GeluBackward(x, dout, fresh);
  backend().GeluBackward(x, dout, dx);
  const std::vector<float> after = Floats(dx), contribution = Floats(fresh);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(after[i], before[i] + contribution[i]);
}

}  // namespace
}  // namespace baton::kernels_test
