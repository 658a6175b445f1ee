// 16-bit activations and parameters on the CPU backend: for each kernel, bf16 or f16 tensors give
// the f32 result (on the same, already rounded, input values) within the 16-bit format's
// rounding.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/kernels_test_util.h"

namespace baton::kernels_test {
namespace {

using numeric_check::NormalisedError;

class HalfPrecisionTest : public CpuBackendTest, public ::testing::WithParamInterface<DType> {
 protected:
  DType half() const { return GetParam(); }
  // Normalised error allowed between a 16-bit result and the f32 one: a few roundings.
  double tolerance() const { return half() == DType::kBF16 ? 8e-3 : 1e-3; }

  Tensor As(const Tensor& t, DType dtype) {
    Tensor out = Zeros(t.shape(), dtype);
    backend().Copy(t, out);
    return out;
  }
  // A random input already rounded to the 16-bit format: {16-bit tensor, f32 copy}.
  std::pair<Tensor, Tensor> Input(const Shape& shape, float stddev = 1.0f) {
    Tensor h = Random(shape, stddev, half());
    return {h, As(h, DType::kF32)};
  }
  void ExpectClose(const Tensor& half_result, const Tensor& f32_result, const char* what) {
    EXPECT_EQ(half_result.dtype(), half()) << what;
    EXPECT_LT(NormalisedError(half_result, f32_result), tolerance()) << what;
  }
};

TEST_P(HalfPrecisionTest, MatmulWithBiasAndAccumulate) {
  auto [a16, a32] = Input({33, 20});
  auto [b16, b32] = Input({41, 20});
  auto [bias16, bias32] = Input({41});
  auto [init16, init32] = Input({33, 41});
  backend().Matmul(a16, false, b16, true, init16, /*accumulate=*/true, &bias16);
  backend().Matmul(a32, false, b32, true, init32, /*accumulate=*/true, &bias32);
  ExpectClose(init16, init32, "out");
  Tensor dbias16 = Zeros({41}, half()), dbias32 = Zeros({41});
  backend().BiasBackward(init16, dbias16);
  backend().BiasBackward(init32, dbias32);
  ExpectClose(dbias16, dbias32, "dbias");
}

TEST_P(HalfPrecisionTest, EmbeddingForwardAndBackward) {
  Tensor tokens = Ids({2, 6}, 9);
  auto [wte16, wte32] = Input({9, 8});
  auto [wpe16, wpe32] = Input({6, 8});
  Tensor out16 = Zeros({2, 6, 8}, half()), out32 = Zeros({2, 6, 8});
  backend().EmbeddingForward(tokens, wte16, wpe16, out16);
  backend().EmbeddingForward(tokens, wte32, wpe32, out32);
  ExpectClose(out16, out32, "out");
  Tensor dwte16 = Zeros({9, 8}, half()), dwte32 = Zeros({9, 8});
  Tensor dwpe16 = Zeros({6, 8}, half()), dwpe32 = Zeros({6, 8});
  backend().EmbeddingBackward(tokens, out16, dwte16, dwpe16);
  backend().EmbeddingBackward(tokens, out32, dwte32, dwpe32);
  ExpectClose(dwte16, dwte32, "dwte");
  ExpectClose(dwpe16, dwpe32, "dwpe");
}

TEST_P(HalfPrecisionTest, LayerNormForwardAndBackward) {
  auto [x16, x32] = Input({12, 24}, 2.0f);
  auto [w16, w32] = Input({24});
  auto [b16, b32] = Input({24});
  auto [dout16, dout32] = Input({12, 24});
  Tensor out16 = Zeros(x16.shape(), half()), out32 = Zeros(x32.shape());
  Tensor mean = Zeros({12}), rstd = Zeros({12});
  backend().LayerNormForward(x16, w16, b16, out16, mean, rstd);
  backend().LayerNormForward(x32, w32, b32, out32, mean, rstd);
  ExpectClose(out16, out32, "out");
  Tensor dx16 = Zeros(x16.shape(), half()), dw16 = Zeros({24}, half()), db16 = Zeros({24}, half());
  Tensor dx32 = Zeros(x32.shape()), dw32 = Zeros({24}), db32 = Zeros({24});
  backend().LayerNormBackward(dout16, x16, w16, mean, rstd, dx16, dw16, db16);
  backend().LayerNormBackward(dout32, x32, w32, mean, rstd, dx32, dw32, db32);
  ExpectClose(dx16, dx32, "dx");
  ExpectClose(dw16, dw32, "dweight");
  ExpectClose(db16, db32, "dbias");
}

TEST_P(HalfPrecisionTest, GeluForwardAndBackward) {
  auto [x16, x32] = Input({7, 50}, 2.0f);
  auto [dout16, dout32] = Input({7, 50});
  Tensor out16 = Zeros(x16.shape(), half()), out32 = Zeros(x32.shape());
  backend().GeluForward(x16, out16);
  backend().GeluForward(x32, out32);
  ExpectClose(out16, out32, "out");
  Tensor dx16 = Zeros(x16.shape(), half()), dx32 = Zeros(x32.shape());
  backend().GeluBackward(x16, dout16, dx16);
  backend().GeluBackward(x32, dout32, dx32);
  ExpectClose(dx16, dx32, "dx");
}

TEST_P(HalfPrecisionTest, AttentionForwardAndBackward) {
  auto [qkv16, qkv32] = Input({2, 5, 24});
  auto [dout16, dout32] = Input({2, 5, 8});
  Tensor out16 = Zeros({2, 5, 8}, half()), out32 = Zeros({2, 5, 8});
  Tensor probs16 = Zeros({2, 2, 5, 5}), probs32 = Zeros({2, 2, 5, 5});
  backend().AttentionForward(qkv16, 2, out16, probs16);
  backend().AttentionForward(qkv32, 2, out32, probs32);
  ExpectClose(out16, out32, "out");
  EXPECT_EQ(Floats(probs16), Floats(probs32));  // same inputs, f32 probabilities
  Tensor dqkv16 = Zeros(qkv16.shape(), half()), dqkv32 = Zeros(qkv32.shape());
  backend().AttentionBackward(dout16, qkv16, probs16, 2, dqkv16);
  backend().AttentionBackward(dout32, qkv32, probs32, 2, dqkv32);
  ExpectClose(dqkv16, dqkv32, "dqkv");
}

TEST_P(HalfPrecisionTest, FlashAttentionForwardAndBackward) {
  auto [qkv16, qkv32] = Input({2, 70, 24});  // two blocks of queries and keys
  auto [dout16, dout32] = Input({2, 70, 8});
  Tensor out16 = Zeros({2, 70, 8}, half()), out32 = Zeros({2, 70, 8});
  Tensor lse16 = Zeros({2, 2, 70}), lse32 = Zeros({2, 2, 70});
  backend().FlashAttentionForward(qkv16, 2, out16, lse16);
  backend().FlashAttentionForward(qkv32, 2, out32, lse32);
  ExpectClose(out16, out32, "out");
  // Same inputs, f32 softmax; the scores' products are exact either way, but a bf16 oneDNN
  // product (Bf16GemmInUse) may sum them in another order.
  const std::vector<float> lse_half = Floats(lse16), lse_f32 = Floats(lse32);
  for (size_t i = 0; i < lse_f32.size(); ++i) {
    EXPECT_NEAR(lse_half[i], lse_f32[i], 1e-5f * std::max(1.0f, std::abs(lse_f32[i]))) << i;
  }
  Tensor dqkv16 = Zeros(qkv16.shape(), half()), dqkv32 = Zeros(qkv32.shape());
  backend().FlashAttentionBackward(dout16, qkv16, out16, lse16, 2, dqkv16);
  backend().FlashAttentionBackward(dout32, qkv32, out32, lse32, 2, dqkv32);
  ExpectClose(dqkv16, dqkv32, "dqkv");
}

// At the models' head size, across two key blocks of 256 and with packed documents: where bf16
// products go to oneDNN (FlashAttentionForwardBf16) the probabilities and score gradients are
// rounded to bf16 before their products; the results stay within bf16's rounding of f32's.
TEST_P(HalfPrecisionTest, FlashAttentionAcrossKeyBlocksAndDocuments) {
  RecordProperty("path", cpu::GemmEnginesSummary());
  const int64_t batch = 2, seq = 300, channels = 64, heads = 2;  // head size 32
  const Tensor segments =
      SegmentStarts(backend().allocator(), seq, {{0, 37, 38, 100, 290}, {0, 260}});
  auto [qkv16, qkv32] = Input({batch, seq, 3 * channels});
  auto [dout16, dout32] = Input({batch, seq, channels});
  for (const Tensor* starts : {&segments, static_cast<const Tensor*>(nullptr)}) {
    const Tensor none;
    const Tensor& s = starts != nullptr ? *starts : none;
    Tensor out16 = Zeros(dout16.shape(), half()), out32 = Zeros(dout32.shape());
    Tensor lse16 = Zeros({batch, heads, seq}), lse32 = Zeros({batch, heads, seq});
    backend().FlashAttentionForward(qkv16, s, heads, out16, lse16);
    backend().FlashAttentionForward(qkv32, s, heads, out32, lse32);
    ExpectClose(out16, out32, "out");
    EXPECT_LT(NormalisedError(lse16, lse32), 1e-6);
    auto [dqkv16, dqkv32] = Input(qkv16.shape());  // gradients accumulate
    backend().FlashAttentionBackward(dout16, qkv16, s, out16, lse16, heads, dqkv16);
    backend().FlashAttentionBackward(dout32, qkv32, s, out32, lse32, heads, dqkv32);
    ExpectClose(dqkv16, dqkv32, "dqkv");
  }
}

TEST_P(HalfPrecisionTest, CrossEntropyIncludingInPlaceBackward) {
  auto [logits16, logits32] = Input({6, 30}, 2.0f);
  Tensor targets = Ids({6}, 30);
  Tensor loss16 = Zeros({1}), loss32 = Zeros({1});
  backend().CrossEntropyForward(logits16, targets, loss16);
  backend().CrossEntropyForward(logits32, targets, loss32);
  EXPECT_EQ(Floats(loss16), Floats(loss32));  // same inputs, f32 arithmetic
  Tensor d16 = Zeros(logits16.shape(), half()), d32 = Zeros(logits32.shape());
  backend().CrossEntropyBackward(logits16, targets, 3.0f, d16);
  backend().CrossEntropyBackward(logits32, targets, 3.0f, d32);
  ExpectClose(d16, d32, "dlogits");
  backend().CrossEntropyBackward(logits16, targets, 3.0f, logits16);  // in place
  EXPECT_EQ(Floats(logits16), Floats(d16));
}

// The row kernels convert 16-bit tensors one piece at a time (a chunk, a row, a block of rows)
// on 2 threads, or read bf16 directly (LayerNorm, GELU, Add, Accumulate, BiasBackward); the
// result must be exactly the f32 kernel's on the same values, rounded once.
// Shapes span several pieces; gradients accumulate into non-zero 16-bit values.
TEST_P(HalfPrecisionTest, RowKernelsAreTheF32KernelRoundedOnce) {
  const auto rounded = [&](const Tensor& f32) { return Floats(As(f32, half())); };
  {
    auto [x16, x32] = Input({70, 300}, 2.0f);  // 3 blocks of LayerNorm backward's 32 rows
    auto [w16, w32] = Input({300});
    auto [b16, b32] = Input({300});
    auto [dout16, dout32] = Input({70, 300});
    Tensor out16 = Zeros(x16.shape(), half()), out32 = Zeros(x32.shape());
    Tensor mean16 = Zeros({70}), rstd16 = Zeros({70}), mean32 = Zeros({70}), rstd32 = Zeros({70});
    backend().LayerNormForward(x16, w16, b16, out16, mean16, rstd16);
    backend().LayerNormForward(x32, w32, b32, out32, mean32, rstd32);
    EXPECT_EQ(Floats(out16), rounded(out32));
    EXPECT_EQ(Floats(mean16), Floats(mean32));
    EXPECT_EQ(Floats(rstd16), Floats(rstd32));
    auto [dx16, dx32] = Input(x16.shape());
    auto [dw16, dw32] = Input({300});
    auto [db16, db32] = Input({300});
    backend().LayerNormBackward(dout16, x16, w16, mean16, rstd16, dx16, dw16, db16);
    backend().LayerNormBackward(dout32, x32, w32, mean32, rstd32, dx32, dw32, db32);
    EXPECT_EQ(Floats(dx16), rounded(dx32));
    EXPECT_EQ(Floats(dw16), rounded(dw32));
    EXPECT_EQ(Floats(db16), rounded(db32));
  }
  {
    auto [x16, x32] = Input({3, 5000}, 2.0f);  // 4 chunks of 4096
    auto [dout16, dout32] = Input(x16.shape());
    Tensor out16 = Zeros(x16.shape(), half()), out32 = Zeros(x32.shape());
    backend().GeluForward(x16, out16);
    backend().GeluForward(x32, out32);
    EXPECT_EQ(Floats(out16), rounded(out32));
    auto [dx16, dx32] = Input(x16.shape());
    backend().GeluBackward(x16, dout16, dx16);
    backend().GeluBackward(x32, dout32, dx32);
    EXPECT_EQ(Floats(dx16), rounded(dx32));
  }
  {
    auto [logits16, logits32] = Input({9, 300}, 2.0f);
    Tensor targets = Ids({9}, 300);
    Tensor d16 = Zeros(logits16.shape(), half()), d32 = Zeros(logits32.shape());
    backend().CrossEntropyBackward(logits16, targets, 3.0f, d16);
    backend().CrossEntropyBackward(logits32, targets, 3.0f, d32);
    EXPECT_EQ(Floats(d16), rounded(d32));
    backend().CrossEntropyBackward(logits16, targets, 3.0f, logits16);  // in place
    EXPECT_EQ(Floats(logits16), rounded(d32));
  }
  {  // the residual sums and the bias gradient (all-bf16 operands are read where they are)
    auto [a16, a32] = Input({3, 5000});
    auto [b16, b32] = Input(a16.shape());
    Tensor sum16 = Zeros(a16.shape(), half()), sum32 = Zeros(a32.shape());
    backend().Add(a16, b16, sum16);
    backend().Add(a32, b32, sum32);
    EXPECT_EQ(Floats(sum16), rounded(sum32));
    backend().Accumulate(a16, b16);
    backend().Accumulate(a32, b32);
    EXPECT_EQ(Floats(b16), rounded(b32));
    Tensor db16 = Zeros({5000}), db32 = Zeros({5000});
    backend().BiasBackward(a16, db16);
    backend().BiasBackward(a32, db32);
    EXPECT_EQ(Floats(db16), Floats(db32));
  }
}

// A 16-bit Matmul converts the operand that varies across Sgemm's blocks, and out, one block at
// a time; each block is the f32 call Sgemm makes, so for every transpose, c cut by rows or by
// columns (3 blocks, the last one short), bias and accumulation, and mixed dtypes, the result is
// the f32 Matmul's on the same values, rounded once: the same bits.
//
// Where bf16 x bf16 goes to oneDNN's bf16 matmul instead (Bf16GemmInUse), oneDNN promises f32
// accumulation of exact bf16 products, not Sgemm's order: there each entry is checked against
// the exact sum, within the roundings that path makes (out + bias rounded to bf16, the f32 sum,
// the result rounded to bf16: 2^-8 of the magnitudes involved, with room to spare for the sum).
TEST_P(HalfPrecisionTest, MatmulByBlocksIsTheF32MatmulRoundedOnce) {
  RecordProperty("path", cpu::GemmEnginesSummary());
  SCOPED_TRACE(cpu::GemmEnginesSummary());
  int bounded = 0;
  for (const bool tall : {true, false}) {
    const int64_t m = tall ? 300 : 24, n = tall ? 24 : 300, k = 40;
    for (const bool trans_a : {false, true}) {
      for (const bool trans_b : {false, true}) {
        for (const DType b_dtype : {half(), DType::kF32}) {
          auto [a16, a32] = Input(trans_a ? Shape{k, m} : Shape{m, k});
          Tensor b32 = Random(trans_b ? Shape{n, k} : Shape{k, n}, 1.0f, half());
          b32 = As(b32, DType::kF32);  // values a 16-bit b can hold
          Tensor b = As(b32, b_dtype);
          auto [bias16, bias32] = Input({n});
          auto [out16, out32] = Input({m, n});
          const std::vector<float> init = Floats(out32);
          backend().Matmul(a16, trans_a, b, trans_b, out16, /*accumulate=*/true, &bias16);
          backend().Matmul(a32, trans_a, b32, trans_b, out32, /*accumulate=*/true, &bias32);
          const std::string where = fmt::format("m {} n {} trans_a {} trans_b {} b {}", m, n,
                                                trans_a, trans_b, Name(b_dtype));
          if (!(cpu::Bf16GemmInUse() && half() == DType::kBF16 && b_dtype == DType::kBF16)) {
            EXPECT_EQ(Floats(out16), Floats(As(out32, half()))) << where;
            continue;
          }
          ++bounded;
          const std::vector<float> av = Floats(a32), bv = Floats(b32), biasv = Floats(bias32);
          const std::vector<float> got = Floats(out16);
          int outside = 0;
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              double exact = static_cast<double>(init[i * n + j]) + biasv[j];
              double magnitude = std::abs(exact);
              for (int64_t p = 0; p < k; ++p) {
                const double product = static_cast<double>(av[trans_a ? p * m + i : i * k + p]) *
                                       bv[trans_b ? j * k + p : p * n + j];
                exact += product;
                magnitude += std::abs(product);
              }
              if (std::abs(got[i * n + j] - exact) > std::ldexp(magnitude, -8)) ++outside;
            }
          }
          EXPECT_EQ(outside, 0) << where << ": entries outside the bf16 rounding bound";
        }
      }
    }
  }
  EXPECT_EQ(bounded, cpu::Bf16GemmInUse() && half() == DType::kBF16 ? 8 : 0);
}

TEST_P(HalfPrecisionTest, ElementwiseOpsAndReductions) {
  auto [a16, a32] = Input({5000});
  auto [b16, b32] = Input({5000});
  Tensor sum16 = Zeros({5000}, half()), sum32 = Zeros({5000});
  backend().Add(a16, b32, sum16);  // mixed dtypes are fine
  backend().Add(a32, b32, sum32);
  ExpectClose(sum16, sum32, "Add");
  backend().Accumulate(b16, sum16);
  backend().Accumulate(b32, sum32);
  ExpectClose(sum16, sum32, "Accumulate");
  backend().Scale(sum16, 0.5f);
  backend().Scale(sum32, 0.5f);
  ExpectClose(sum16, sum32, "Scale");
  EXPECT_EQ(backend().SumOfSquares(a16), backend().SumOfSquares(a32));
  EXPECT_TRUE(backend().AllFinite(a16));
  Tensor big = Values({2}, {1.0f, 1e6f}, half());  // 1e6 overflows f16, not bf16
  EXPECT_EQ(backend().AllFinite(big), half() == DType::kBF16);
}

INSTANTIATE_TEST_SUITE_P(Formats, HalfPrecisionTest, ::testing::Values(DType::kBF16, DType::kF16),
                         [](const auto& info) { return std::string(Name(info.param)); });

}  // namespace
}  // namespace baton::kernels_test
