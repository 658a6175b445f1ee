// CPU backend Llama operations: RMSNorm, SwiGLU, rotary embeddings (rotate_half, Llama 3
// scaling, packed documents, offsets) and grouped-query attention's key/value repeat. Forward
// against reference loops written from the definitions, every backward by finite differences or
// as the transpose of its forward (<f(x), y> == <x, f^T(y)>), 16-bit storage as f32 arithmetic
// rounded once, and the meta backend computing nothing.
#include <cmath>
#include <numbers>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/kernels_test_util.h"

namespace baton::kernels_test {
namespace {

using numeric_check::NormalisedError;
using numeric_check::ProjectedSum;

double Dot(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = Floats(a), y = Floats(b);
  double sum = 0.0;
  for (size_t i = 0; i < x.size(); ++i) sum += static_cast<double>(x[i]) * y[i];
  return sum;
}

using RmsNormTest = CpuBackendTest;

TEST_F(RmsNormTest, ForwardScalesEachRowByItsRootMeanSquare) {
  const int64_t rows = 6, cols = 37;
  const float eps = 1e-6f;
  Tensor x = Random({2, 3, cols}, 3.0f);
  Tensor weight = Random({cols});
  Tensor out = Zeros(x.shape()), rstd = Zeros({rows});
  backend().RmsNormForward(x, weight, eps, out, rstd);
  const std::vector<float> xv = Floats(x), w = Floats(weight);
  std::vector<float> expected(xv.size());
  for (int64_t r = 0; r < rows; ++r) {
    double squares = 0.0;
    for (int64_t c = 0; c < cols; ++c) squares += xv[r * cols + c] * xv[r * cols + c];
    const double s = 1.0 / std::sqrt(squares / cols + eps);
    EXPECT_NEAR(rstd.data<float>()[r], s, 1e-6 * s);
    for (int64_t c = 0; c < cols; ++c) expected[r * cols + c] = xv[r * cols + c] * s * w[c];
  }
  EXPECT_LT(NormalisedError(Floats(out), expected), 1e-6);
}

TEST_F(RmsNormTest, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const int64_t rows = 40, cols = 9;  // rows span two of the backward's row blocks
  Tensor x = Random({rows, cols});
  Tensor weight = Random({cols});
  Tensor dout = Random({rows, cols});
  Tensor out = Zeros(x.shape()), rstd = Zeros({rows});
  const auto loss = [&] {
    backend().RmsNormForward(x, weight, 1e-5f, out, rstd);
    return ProjectedSum(out, dout);
  };
  loss();
  Tensor dx = Zeros(x.shape()), dweight = Zeros({cols});
  backend().RmsNormBackward(dout, x, weight, rstd, dx, dweight);
  ExpectGradient(x, loss, dx, 5e-3, 1e-3);
  ExpectGradient(weight, loss, dweight);
  const std::vector<float> once = Floats(dweight);
  backend().RmsNormBackward(dout, x, weight, rstd, dx, dweight);
  const std::vector<float> twice = Floats(dweight);
  for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], 2 * once[i], 1e-5);
}

TEST_F(RmsNormTest, RejectsAWeightOfAnotherWidthAndANonPositiveEps) {
  Tensor x = Random({4, 8}), out = Zeros({4, 8}), rstd = Zeros({4});
  Tensor narrow = Random({7}), weight = Random({8});
  EXPECT_THROW(backend().RmsNormForward(x, narrow, 1e-5f, out, rstd), Error);
  EXPECT_THROW(backend().RmsNormForward(x, weight, 0.0f, out, rstd), Error);
}

using SwiGluTest = CpuBackendTest;

TEST_F(SwiGluTest, ForwardIsSiluOfTheGateTimesUp) {
  const int64_t rows = 5, hidden = 11;
  Tensor gate_up = Random({rows, 2 * hidden}, 3.0f);
  Tensor out = Zeros({rows, hidden});
  backend().SwiGluForward(gate_up, out);
  const std::vector<float> g = Floats(gate_up);
  std::vector<float> expected(rows * hidden);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < hidden; ++i) {
      const double gate = g[r * 2 * hidden + i], up = g[r * 2 * hidden + hidden + i];
      expected[r * hidden + i] = static_cast<float>(gate / (1.0 + std::exp(-gate)) * up);
    }
  }
  EXPECT_LT(NormalisedError(Floats(out), expected), 1e-6);
}

TEST_F(SwiGluTest, BackwardMatchesFiniteDifferences) {
  Tensor gate_up = Random({2, 3, 14}, 2.0f);
  Tensor dout = Random({2, 3, 7});
  Tensor out = Zeros({2, 3, 7});
  const auto loss = [&] {
    backend().SwiGluForward(gate_up, out);
    return ProjectedSum(out, dout);
  };
  Tensor dgate_up = Zeros(gate_up.shape());
  backend().SwiGluBackward(gate_up, dout, dgate_up);
  ExpectGradient(gate_up, loss, dgate_up);
}

TEST_F(SwiGluTest, RejectsAnOddWidthAndAMismatchedOut) {
  Tensor odd = Random({2, 7}), out = Zeros({2, 3});
  EXPECT_THROW(backend().SwiGluForward(odd, out), Error);
  Tensor gate_up = Random({2, 8});
  EXPECT_THROW(backend().SwiGluForward(gate_up, out), Error);
}

using CopyColumnsTest = CpuBackendTest;

// Columns of every row into other columns of another tensor's rows, the rest of it untouched;
// columns out of range, other rows or another dtype refused.
TEST_F(CopyColumnsTest, CopiesAColumnRangeOfEveryRowAndRefusesOutOfRange) {
  const Tensor src = Random({2, 3, 7});
  Tensor dst = Random({6, 5});
  const std::vector<float> before = ToFloatVector(dst);
  backend().CopyColumns(src, 2, dst, 1, 3);
  const std::vector<float> from = ToFloatVector(src), to = ToFloatVector(dst);
  for (int64_t r = 0; r < 6; ++r) {
    for (int64_t c = 0; c < 5; ++c) {
      const float want = c >= 1 && c < 4 ? from[r * 7 + 2 + c - 1] : before[r * 5 + c];
      EXPECT_EQ(to[r * 5 + c], want) << r << ", " << c;
    }
  }
  EXPECT_THROW(backend().CopyColumns(src, 5, dst, 0, 3), Error);
  EXPECT_THROW(backend().CopyColumns(src, 0, dst, 3, 3), Error);
  Tensor fewer = Random({5, 5});
  EXPECT_THROW(backend().CopyColumns(src, 0, fewer, 0, 3), Error);
}

using RotaryTest = CpuBackendTest;

// Reference rotation of head element pairs (i, i + D/2) by position * inv_freq[i], in double.
std::vector<float> ReferenceRotary(const std::vector<float>& qkv, int64_t batch, int64_t seq,
                                   const AttentionHeads& heads, int64_t dim,
                                   const std::vector<int64_t>& positions, double theta) {
  std::vector<float> out = qkv;
  const int64_t cols = (heads.query + 2 * heads.kv) * dim;
  for (int64_t row = 0; row < batch * seq; ++row) {
    for (int64_t h = 0; h < heads.query + heads.kv; ++h) {  // queries and keys, not values
      for (int64_t i = 0; i < dim / 2; ++i) {
        const double inv = 1.0 / std::pow(theta, 2.0 * i / dim);
        const double angle = positions[row] * inv;
        const int64_t a = row * cols + h * dim + i, b = a + dim / 2;
        out[a] = static_cast<float>(qkv[a] * std::cos(angle) - qkv[b] * std::sin(angle));
        out[b] = static_cast<float>(qkv[b] * std::cos(angle) + qkv[a] * std::sin(angle));
      }
    }
  }
  return out;
}

TEST_F(RotaryTest, TurnsQueryAndKeyPairsByPositionTimesFrequencyAndLeavesValues) {
  const int64_t batch = 2, seq = 5, dim = 8;
  const AttentionHeads heads{4, 2};
  Tensor qkv = Random({batch, seq, (4 + 2 * 2) * dim});
  const std::vector<float> before = Floats(qkv);
  RopeConfig rope;
  rope.theta = 10000.0;
  const int64_t start = 3;
  backend().RotaryEmbedding(qkv, Tensor(), start, heads, rope, /*inverse=*/false);
  std::vector<int64_t> positions;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seq; ++t) positions.push_back(start + t);
  const std::vector<float> expected =
      ReferenceRotary(before, batch, seq, heads, dim, positions, rope.theta);
  EXPECT_LT(NormalisedError(Floats(qkv), expected), 1e-6);
  const std::vector<float> after = Floats(qkv);
  const int64_t cols = 8 * dim;
  for (int64_t row = 0; row < batch * seq; ++row) {  // the values' columns are untouched
    for (int64_t c = 6 * dim; c < cols; ++c)
      EXPECT_EQ(after[row * cols + c], before[row * cols + c]);
  }
}

TEST_F(RotaryTest, PositionsRestartAtEachPackedDocument) {
  const int64_t seq = 6, dim = 4;
  const AttentionHeads heads{2, 2};
  Tensor qkv = Random({1, seq, 6 * dim});
  const std::vector<float> before = Floats(qkv);
  Tensor starts = Ids({1, seq}, 1);
  const int32_t values[] = {0, 0, 0, 3, 3, 5};  // documents [0,3), [3,5), [5,6)
  std::copy(values, values + seq, starts.data<int32_t>());
  backend().RotaryEmbedding(qkv, starts, 0, heads, RopeConfig{}, false);
  const std::vector<float> expected =
      ReferenceRotary(before, 1, seq, heads, dim, {0, 1, 2, 0, 1, 0}, 10000.0);
  EXPECT_LT(NormalisedError(Floats(qkv), expected), 1e-6);
}

TEST_F(RotaryTest, TheInverseIsTheTransposeAndUndoesTheRotation) {
  const AttentionHeads heads{6, 3};
  const int64_t dim = 16;
  Tensor x = Random({2, 9, 12 * dim});
  Tensor y = Random({2, 9, 12 * dim});
  Tensor rx = Clone(x), ry = Clone(y);
  RopeConfig rope;
  rope.theta = 500000.0;
  backend().RotaryEmbedding(rx, Tensor(), 7, heads, rope, false);
  backend().RotaryEmbedding(ry, Tensor(), 7, heads, rope, true);
  EXPECT_NEAR(Dot(rx, y), Dot(x, ry), 1e-4 * std::abs(Dot(x, y)) + 1e-4);
  backend().RotaryEmbedding(rx, Tensor(), 7, heads, rope, true);
  EXPECT_LT(NormalisedError(Floats(rx), Floats(x)), 1e-6);
}

TEST(RopeFrequencyTest, Llama3ScalingKeepsHighDividesLowAndBlendsBetween) {
  RopeConfig rope;
  rope.theta = 500000.0;
  rope.factor = 32.0;
  rope.low_freq_factor = 1.0;
  rope.high_freq_factor = 4.0;
  rope.original_context = 8192;
  const int64_t dim = 64;
  int kept = 0, divided = 0, blended = 0;
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double plain = 1.0 / std::pow(500000.0, 2.0 * i / dim);
    const double wavelen = 2 * std::numbers::pi / plain;
    const double scaled = RopeInverseFrequency(rope, i, dim);
    if (wavelen < 8192.0 / 4.0) {
      EXPECT_NEAR(scaled, plain, 1e-6 * plain) << i;
      ++kept;
    } else if (wavelen > 8192.0) {
      EXPECT_NEAR(scaled, plain / 32.0, 1e-6 * plain) << i;
      ++divided;
    } else {
      EXPECT_GT(scaled, plain / 32.0 * (1 - 1e-6)) << i;
      EXPECT_LT(scaled, plain * (1 + 1e-6)) << i;
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
  rope.factor = 0.0;
  for (int64_t i = 0; i < dim / 2; ++i) {
    EXPECT_NEAR(RopeInverseFrequency(rope, i, dim), 1.0 / std::pow(500000.0, 2.0 * i / dim),
                1e-6 / std::pow(500000.0, 2.0 * i / dim));
  }
}

using RepeatKvTest = CpuBackendTest;

TEST_F(RepeatKvTest, EachKeyValueHeadServesItsGroupOfQueryHeads) {
  const int64_t dim = 3;
  const AttentionHeads heads{4, 2};  // groups of 2
  Tensor qkv = Random({2, 3, 8 * dim});
  Tensor out = Zeros({2, 3, 12 * dim});
  backend().RepeatKv(qkv, heads, out);
  const std::vector<float> in = Floats(qkv), o = Floats(out);
  for (int64_t row = 0; row < 6; ++row) {
    for (int64_t c = 0; c < 4 * dim; ++c) EXPECT_EQ(o[row * 36 + c], in[row * 24 + c]);
    for (int part = 1; part <= 2; ++part) {
      for (int64_t h = 0; h < 4; ++h) {
        for (int64_t i = 0; i < dim; ++i) {
          EXPECT_EQ(o[row * 36 + part * 12 + h * dim + i],
                    in[row * 24 + 12 + (part - 1) * 6 + (h / 2) * dim + i]);
        }
      }
    }
  }
}

TEST_F(RepeatKvTest, BackwardIsTheTransposeForEveryGroupSize) {
  for (const AttentionHeads heads :
       {AttentionHeads{4, 4}, AttentionHeads{4, 2}, AttentionHeads{8, 2}, AttentionHeads{6, 1}}) {
    const int64_t dim = 5;
    const int64_t compact = (heads.query + 2 * heads.kv) * dim, full = 3 * heads.query * dim;
    Tensor x = Random({2, 4, compact});
    Tensor y = Random({2, 4, full});
    Tensor rx = Zeros({2, 4, full});
    backend().RepeatKv(x, heads, rx);
    Tensor ty = Random({2, 4, compact});  // accumulates onto this
    const Tensor ty0 = Clone(ty);
    backend().RepeatKvBackward(y, heads, ty);
    EXPECT_NEAR(Dot(rx, y), Dot(x, ty) - Dot(x, ty0), 1e-4) << heads.query << "/" << heads.kv;
  }
}

TEST_F(RepeatKvTest, RejectsHeadsThatDoNotDivideOrDoNotMatchTheWidth) {
  Tensor qkv = Random({1, 2, 8 * 3});
  Tensor out = Zeros({1, 2, 36});
  EXPECT_THROW(backend().RepeatKv(qkv, AttentionHeads{4, 3}, out), Error);
  EXPECT_THROW(backend().RepeatKv(qkv, AttentionHeads{5, 1}, out), Error);
}

// 16-bit storage: each op computes in f32 on the stored values and rounds its results once.
class LlamaHalfTest : public CpuBackendTest, public ::testing::WithParamInterface<DType> {};

TEST_P(LlamaHalfTest, SixteenBitResultsAreTheF32ResultsRoundedOnce) {
  const DType dtype = GetParam();
  Tensor x16 = Random({7, 24}, 2.0f, dtype);
  Tensor x32 = Zeros({7, 24});
  backend().Copy(x16, x32);  // the stored values, exactly
  Tensor w = Random({24});
  Tensor out16 = Zeros({7, 24}, dtype), out32 = Zeros({7, 24}), rounded = Zeros({7, 24}, dtype);
  Tensor rstd16 = Zeros({7}), rstd32 = Zeros({7});
  backend().RmsNormForward(x16, w, 1e-5f, out16, rstd16);
  backend().RmsNormForward(x32, w, 1e-5f, out32, rstd32);
  backend().Copy(out32, rounded);
  EXPECT_EQ(Floats(out16), Floats(rounded));
  EXPECT_EQ(Floats(rstd16), Floats(rstd32));

  Tensor swi16 = Zeros({7, 12}, dtype), swi32 = Zeros({7, 12}), swi_rounded = Zeros({7, 12}, dtype);
  backend().SwiGluForward(x16, swi16);
  backend().SwiGluForward(x32, swi32);
  backend().Copy(swi32, swi_rounded);
  EXPECT_EQ(Floats(swi16), Floats(swi_rounded));

  const AttentionHeads heads{2, 1};  // 4 heads of 6
  Tensor q16 = Clone(x16), q32 = Clone(x32);
  Tensor q16_3d = q16.View({1, 7, 24}), q32_3d = q32.View({1, 7, 24});
  backend().RotaryEmbedding(q16_3d, Tensor(), 0, heads, RopeConfig{}, false);
  backend().RotaryEmbedding(q32_3d, Tensor(), 0, heads, RopeConfig{}, false);
  Tensor q_rounded = Zeros({7, 24}, dtype);
  backend().Copy(q32, q_rounded);
  EXPECT_EQ(Floats(q16), Floats(q_rounded));
}

INSTANTIATE_TEST_SUITE_P(Formats, LlamaHalfTest, ::testing::Values(DType::kBF16, DType::kF16),
                         [](const auto& info) { return std::string(Name(info.param)); });

TEST(LlamaMetaTest, TheMetaBackendValidatesAndComputesNothing) {
  MemoryLedger ledger;
  std::unique_ptr<Backend> meta = MakeCpuMetaBackend(ledger, 2);
  const auto make = [&](Shape shape) {
    return Tensor::Empty(meta->allocator(), std::move(shape), DType::kBF16,
                         MemCategory::kActivations);
  };
  Tensor x = make({4, 8}), w = make({8}), out = make({4, 8});
  Tensor rstd = Tensor::Empty(meta->allocator(), {4}, DType::kF32, MemCategory::kActivations);
  meta->RmsNormForward(x, w, 1e-5f, out, rstd);
  Tensor qkv = make({1, 4, 8}), full = make({1, 4, 12});
  meta->RotaryEmbedding(qkv, Tensor(), 0, AttentionHeads{2, 1}, RopeConfig{}, false);
  meta->RepeatKv(qkv, AttentionHeads{2, 1}, full);
  Tensor wrong = make({1, 4, 10});
  EXPECT_THROW(meta->RepeatKv(qkv, AttentionHeads{2, 1}, wrong), Error);
}

}  // namespace
}  // namespace baton::kernels_test
