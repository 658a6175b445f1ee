// The CPU GEMM engines (kernels/cpu/gemm.h): oneDNN and OpenBLAS each against a double-precision
// product, with alpha, beta and strided operands as attention uses them; each bit-identical for 1
// and 2 threads; the two within f32 rounding of each other through the whole attention kernel;
// and the bf16 matmul (where the CPU multiplies bf16) within bf16 rounding of f32, staging
// nothing.
#include <cstring>
#include <string>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/kernels_test_util.h"

namespace baton::kernels_test {
namespace {

using cpu::GemmEngine;
using numeric_check::NormalisedError;

// Runs the test body under each engine and restores the process's choice after.
class GemmEngineTest : public CpuBackendTest {
 protected:
  GemmEngineTest() : saved_(cpu::GemmEngineInUse()) {}
  ~GemmEngineTest() override { cpu::SetGemmEngine(saved_); }

  static constexpr GemmEngine kEngines[] = {GemmEngine::kOneDnn, GemmEngine::kOpenBlas};

 private:
  GemmEngine saved_;
};

std::vector<float> Filled(size_t n, Rng& rng) {
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.NextNormal());
  return v;
}

TEST_F(GemmEngineTest, EachEngineMatchesADoubleProductWithAlphaBetaAndStrides) {
  Rng rng(7);
  cpu::ThreadPool pool(2);
  for (const GemmEngine engine : kEngines) {
    cpu::SetGemmEngine(engine);
    for (const bool trans_a : {false, true}) {
      for (const bool trans_b : {false, true}) {
        // Leading dimensions wider than the rows, as attention's views of qkv; 300 rows split
        // into blocks.
        const int64_t m = 300, n = 40, k = 24;
        const int64_t lda = (trans_a ? m : k) + 5, ldb = (trans_b ? k : n) + 3, ldc = n + 7;
        const std::vector<float> a = Filled(static_cast<size_t>((trans_a ? k : m) * lda), rng);
        const std::vector<float> b = Filled(static_cast<size_t>((trans_b ? n : k) * ldb), rng);
        const std::vector<float> c0 = Filled(static_cast<size_t>(m * ldc), rng);
        for (const auto& [alpha, beta] :
             {std::pair{1.0f, 0.0f}, std::pair{0.125f, 1.0f}, std::pair{-2.0f, 0.5f}}) {
          std::vector<float> c = c0;
          cpu::Sgemm(trans_a, trans_b, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(),
                     ldc, &pool);
          const std::vector<float> expected =
              ReferenceGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c0, ldc);
          EXPECT_LT(NormalisedError(c, expected), 1e-6)
              << cpu::Name(engine) << " trans_a " << trans_a << " trans_b " << trans_b << " alpha "
              << alpha << " beta " << beta;
          // Padding between rows is never written.
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = n; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j]);
          }
        }
      }
    }
  }
}

TEST_F(GemmEngineTest, EachEngineIsBitIdenticalForOneAndTwoThreads) {
  std::unique_ptr<Backend> serial = MakeCpuBackend(ledger_, 1);
  // 256 rows (a gpt-small-cpu micro-batch) split into 2 blocks, and a wide product in 8.
  for (const auto& [m, k, n] : {std::tuple{256, 256, 256}, std::tuple{130, 64, 1100}}) {
    Tensor a = Random({m, k});
    Tensor b = Random({k, n});
    for (const GemmEngine engine : kEngines) {
      cpu::SetGemmEngine(engine);
      Tensor one = Zeros({m, n});
      Tensor two = Zeros({m, n});
      serial->Matmul(a, false, b, false, one, false, nullptr);
      backend().Matmul(a, false, b, false, two, false, nullptr);
      EXPECT_EQ(std::memcmp(one.raw(), two.raw(), one.nbytes()), 0)
          << cpu::Name(engine) << " " << m << "x" << k << "x" << n;
    }
  }
}

TEST_F(GemmEngineTest, AttentionAgreesAcrossEngines) {
  Tensor qkv = Random({2, 70, 3 * 32});
  std::vector<Tensor> outs;
  for (const GemmEngine engine : kEngines) {
    cpu::SetGemmEngine(engine);
    Tensor out = Zeros({2, 70, 32});
    Tensor probs = Zeros({2, 4, 70, 70});
    backend().AttentionForward(qkv, 4, out, probs);
    Tensor dqkv = Zeros(qkv.shape());
    backend().AttentionBackward(out, qkv, probs, 4, dqkv);
    Tensor flash = Zeros({2, 70, 32});
    Tensor lse = Zeros({2, 4, 70});
    backend().FlashAttentionForward(qkv, 4, flash, lse);
    outs.insert(outs.end(), {out, dqkv, flash});
  }
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_LT(NormalisedError(outs[i], outs[i + 3]), 1e-6) << "output " << i;
  }
}

// oneDNN's reference loop is correct but ~1000x slower, so the accuracy tests above would not
// notice a form that falls to it (oneDNN 3.x did for alpha and beta together when alpha was an
// eltwise post-op: attention's backward took seconds).
TEST_F(GemmEngineTest, EveryF32FormHasAnImplementationOtherThanOneDnnsReferenceLoop) {
  for (const bool trans_a : {false, true}) {
    for (const bool trans_b : {false, true}) {
      for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.125f, 0.0f},
                                        std::pair{1.0f, 1.0f}, std::pair{0.125f, 1.0f}}) {
        const cpu::GemmForm form{trans_a, trans_b, alpha, beta};
        for (const int64_t m : {int64_t{32}, int64_t{128}}) {
          const std::string impl = cpu::GemmImplementation(m, 96, 64, DType::kF32, form);
          EXPECT_NE(impl, "none");
          EXPECT_FALSE(impl.starts_with("ref"))
              << impl << " for m " << m << " trans_a " << trans_a << " trans_b " << trans_b
              << " alpha " << alpha << " beta " << beta;
        }
      }
    }
  }
}

TEST_F(GemmEngineTest, Bf16MatmulIsWithinBf16RoundingOfF32AndStagesNothing) {
  if (!cpu::Bf16GemmInUse()) {
    GTEST_SKIP() << "bf16 operands are staged to f32 here (" << cpu::GemmEnginesSummary()
                 << "): oneDNN's bf16 matmul needs AVX512_BF16 or AMX, and the oneDNN engine";
  }
  for (const bool trans_b : {false, true}) {
    const int64_t m = 200, k = 96, n = 72;
    Tensor a = Random({m, k}, 1.0f, DType::kBF16);
    Tensor b = Random(trans_b ? Shape{n, k} : Shape{k, n}, 1.0f, DType::kBF16);
    Tensor bias = Random({n}, 1.0f, DType::kBF16);
    Tensor a32 = Zeros({m, k});
    Tensor b32 = Zeros(b.shape());
    Tensor bias32 = Zeros({n});
    backend().Copy(a, a32);
    backend().Copy(b, b32);
    backend().Copy(bias, bias32);
    Tensor expected = Zeros({m, n});
    backend().Matmul(a32, false, b32, trans_b, expected, false, &bias32);
    for (const DType out_dtype : {DType::kF32, DType::kBF16}) {
      Tensor out = Zeros({m, n}, out_dtype);
      const int64_t before = ledger_.peak(MemCategory::kWorkspace);
      backend().Matmul(a, false, b, trans_b, out, false, &bias);
      EXPECT_EQ(ledger_.peak(MemCategory::kWorkspace), before) << "staged an operand";
      Tensor out32 = Zeros({m, n});
      backend().Copy(out, out32);
      // Same products of the same bf16 values, f32 sums: only the order of the sum and the
      // output's rounding differ.
      EXPECT_LT(NormalisedError(out32, expected), out_dtype == DType::kF32 ? 1e-5 : 8e-3)
          << Name(out_dtype) << " trans_b " << trans_b;
    }
  }
}

}  // namespace
}  // namespace baton::kernels_test
