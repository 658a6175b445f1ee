// The CPU backend books its scratch in the ledger as workspace and releases it before returning;
// f32 kernels without scratch book nothing.
#include <functional>
#include <memory>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/kernels_test_util.h"

namespace baton::kernels_test {
namespace {

class LedgerTest : public CpuBackendTest {
 protected:
  // Runs `call` and returns the workspace peak it reached; expects every category back where it
  // started afterwards.
  int64_t WorkspacePeakOf(const std::function<void()>& call) {
    const MemoryFigures before = ledger_.Current();
    ledger_.ResetPeaks();
    call();
    const MemoryFigures after = ledger_.Current();
    for (MemCategory category : kAllMemCategories) {
      EXPECT_EQ(after[category], before[category]) << Name(category) << " not released";
    }
    return ledger_.peak(MemCategory::kWorkspace) - before[MemCategory::kWorkspace];
  }
};

TEST_F(LedgerTest, SixteenBitMatmulStagesExactlyItsOperandsAsF32Workspace) {
  Tensor a = Random({30, 20}, 1.0f, DType::kBF16);
  Tensor b = Random({20, 10}, 1.0f, DType::kF16);
  Tensor out = Zeros({30, 10}, DType::kBF16);
  const int64_t peak = WorkspacePeakOf([&] { backend().Matmul(a, false, b, false, out, true); });
  EXPECT_EQ(peak, 4 * (30 * 20 + 20 * 10 + 30 * 10));  // one block of c: each operand once
}

// A 16-bit Matmul cut into blocks stages the operand all blocks share whole, and the other
// operand and out one block per thread: no f32 copy of either. Here c (1000, 24) is cut into 8
// blocks of 128 rows (kernels/cpu/gemm.h); 2 threads. Where bf16 x bf16 goes to oneDNN's bf16
// matmul (Bf16GemmInUse: AVX512_BF16 or AMX, with BATON_CPU_GEMM=onednn, the default there), it
// reads the operands as stored and stages nothing; a mixed product (bf16 x f16) is staged on
// every path.
TEST_F(LedgerTest, SixteenBitMatmulStagesTheOtherOperandAndOutABlockPerThread) {
  RecordProperty("path", cpu::GemmEnginesSummary());
  SCOPED_TRACE(cpu::GemmEnginesSummary());
  const int64_t staged = 4 * (24 * 40 + 2 * 128 * (40 + 24));
  const int64_t bf16_expected = cpu::Bf16GemmInUse() ? 0 : staged;
  Tensor a = Random({1000, 40}, 1.0f, DType::kBF16);
  Tensor b = Random({24, 40}, 1.0f, DType::kBF16);
  Tensor out = Zeros({1000, 24}, DType::kBF16);
  const int64_t peak = WorkspacePeakOf([&] { backend().Matmul(a, false, b, true, out, false); });
  EXPECT_EQ(peak, bf16_expected);
  Tensor wide = Zeros({24, 1000}, DType::kBF16);  // cut by columns: a shared, b's columns
  EXPECT_EQ(WorkspacePeakOf([&] { backend().Matmul(b, false, a, true, wide, false); }),
            bf16_expected);
  Tensor b16 = Random({24, 40}, 1.0f, DType::kF16);  // mixed: staged wherever it runs
  EXPECT_EQ(WorkspacePeakOf([&] { backend().Matmul(a, false, b16, true, out, false); }), staged);
}

TEST_F(LedgerTest, KernelsWithScratchReleaseItBeforeReturning) {
  Tensor x = Random({40, 16});
  Tensor weight = Random({16}), bias = Random({16});
  Tensor out = Zeros(x.shape()), mean = Zeros({40}), rstd = Zeros({40});
  backend().LayerNormForward(x, weight, bias, out, mean, rstd);
  Tensor dx = Zeros(x.shape()), dweight = Zeros({16}), dbias = Zeros({16});
  EXPECT_GT(WorkspacePeakOf([&] {
              backend().LayerNormBackward(out, x, weight, mean, rstd, dx, dweight, dbias);
            }),
            0);

  Tensor qkv = Random({2, 6, 24});
  Tensor attention = Zeros({2, 6, 8}), probs = Zeros({2, 2, 6, 6});
  backend().AttentionForward(qkv, 2, attention, probs);
  Tensor dqkv = Zeros(qkv.shape());
  EXPECT_EQ(WorkspacePeakOf([&] { backend().AttentionBackward(attention, qkv, probs, 2, dqkv); }),
            2 * 4 * 6 * 6);  // one T x T block per thread
  Tensor lse = Zeros({2, 2, 6});
  EXPECT_EQ(WorkspacePeakOf([&] { backend().FlashAttentionForward(qkv, 2, attention, lse); }),
            2 * 4 * (64 * 256 + 2 * 64));  // per thread: a block of scores, row max and sum
  EXPECT_EQ(WorkspacePeakOf(
                [&] { backend().FlashAttentionBackward(attention, qkv, attention, lse, 2, dqkv); }),
            2 * 4 * (2 * 64 * 256 + 6));  // per thread: P and dS blocks, rowsum(dO O)

  Tensor logits = Random({9, 7});
  Tensor targets = Ids({9}, 7);
  Tensor loss = Zeros({1});
  EXPECT_EQ(WorkspacePeakOf([&] { backend().CrossEntropyForward(logits, targets, loss); }), 4 * 9);
  EXPECT_GT(WorkspacePeakOf([&] { backend().SumOfSquares(logits); }), 0);

  // 16-bit row kernels convert a piece at a time, never a whole tensor: GELU's chunks on the
  // stack, rows in per-thread buffers (2 threads here). LayerNorm and GELU read and write bf16
  // directly: no buffer at all.
  Tensor half = Random({3, 5}, 1.0f, DType::kBF16);
  Tensor gelu = Zeros({3, 5}, DType::kBF16);
  EXPECT_EQ(WorkspacePeakOf([&] { backend().GeluForward(half, gelu); }), 0);
  Tensor half_logits = Random({9, 7}, 1.0f, DType::kBF16);
  EXPECT_EQ(WorkspacePeakOf([&] { backend().CrossEntropyForward(half_logits, targets, loss); }),
            4 * 9 + 2 * 4 * 7);  // row losses, and one f32 row per thread
  Tensor half_x = Random({40, 16}, 1.0f, DType::kF16), half_out = Zeros({40, 16}, DType::kF16);
  EXPECT_EQ(WorkspacePeakOf(
                [&] { backend().LayerNormForward(half_x, weight, bias, half_out, mean, rstd); }),
            2 * 2 * 4 * 16);  // x's and out's rows, per thread
  Tensor bf16_x = Random({40, 16}, 1.0f, DType::kBF16), bf16_out = Zeros({40, 16}, DType::kBF16);
  EXPECT_EQ(WorkspacePeakOf(
                [&] { backend().LayerNormForward(bf16_x, weight, bias, bf16_out, mean, rstd); }),
            0);
  Tensor bf16_dx = Zeros({40, 16}, DType::kBF16), dweight16 = Zeros({16}), dbias16 = Zeros({16});
  EXPECT_EQ(WorkspacePeakOf([&] {
              backend().LayerNormBackward(bf16_out, bf16_x, weight, mean, rstd, bf16_dx, dweight16,
                                          dbias16);
            }),
            4 * 2 * 2 * 16);  // the partial sums of 2 blocks of rows, nothing else
}

// The meta backend computes nothing on a one-thread pool, yet books the per-thread buffers of
// the thread count it was made with, as the CPU backend does: f16 rows (LayerNorm; bf16 ones are
// read directly and book none) and the blocks of a 16-bit Matmul (c (1000, 24): 8 blocks, one
// buffer per thread); and every other kind of kernel books the same as the CPU backend's.
TEST(LedgerMetaTest, MetaBackendBooksPerThreadBuffersForItsThreadCount) {
  const auto peaks = [](bool meta) {
    MemoryLedger ledger;
    std::unique_ptr<Backend> backend =
        meta ? MakeCpuMetaBackend(ledger, 3) : MakeCpuBackend(ledger, 3);
    const auto make = [&](Shape shape, DType dtype) {
      return Tensor::Zeros(backend->allocator(), std::move(shape), dtype,
                           MemCategory::kActivations);
    };
    std::vector<int64_t> result;
    const auto peak_of = [&](const std::function<void()>& call) {
      ledger.ResetPeaks();
      const int64_t before = ledger.Current()[MemCategory::kWorkspace];
      call();
      result.push_back(ledger.peak(MemCategory::kWorkspace) - before);
    };
    Tensor x = make({40, 16}, DType::kF16), out = make({40, 16}, DType::kF16);
    Tensor weight = make({16}, DType::kF32), bias = make({16}, DType::kF32);
    Tensor mean = make({40}, DType::kF32), rstd = make({40}, DType::kF32);
    peak_of([&] { backend->LayerNormForward(x, weight, bias, out, mean, rstd); });
    Tensor x16 = make({40, 16}, DType::kBF16), out16 = make({40, 16}, DType::kBF16);
    peak_of([&] { backend->LayerNormForward(x16, weight, bias, out16, mean, rstd); });
    Tensor a = make({1000, 40}, DType::kBF16), b = make({24, 40}, DType::kF16);
    Tensor c = make({1000, 24}, DType::kBF16);
    peak_of([&] { backend->Matmul(a, false, b, true, c, false); });
    // One kernel of each other kind that books something, on 16-bit tensors (staged or in
    // pieces) and bf16 ones (read directly, or with flash attention's own scratch).
    Tensor qkv = make({2, 8, 48}, DType::kF16), att = make({2, 8, 16}, DType::kF16);
    Tensor probs = make({2, 2, 8, 8}, DType::kF32), lse = make({2, 2, 8}, DType::kF32);
    peak_of([&] { backend->AttentionForward(qkv, 2, att, probs); });
    Tensor qkv16 = make({2, 8, 48}, DType::kBF16), att16 = make({2, 8, 16}, DType::kBF16);
    peak_of([&] { backend->FlashAttentionForward(qkv16, 2, att16, lse); });
    Tensor dqkv16 = make({2, 8, 48}, DType::kBF16);
    peak_of([&] { backend->FlashAttentionBackward(att16, qkv16, att16, lse, 2, dqkv16); });
    Tensor logits = make({16, 40}, DType::kF16), targets = make({16}, DType::kI32);
    Tensor loss = make({1}, DType::kF32);
    peak_of([&] { backend->CrossEntropyForward(logits, targets, loss); });
    peak_of([&] { backend->CrossEntropyBackward(logits, targets, 1.0f, logits); });
    peak_of([&] { backend->RmsNormForward(x, weight, 1e-6f, out, rstd); });
    Tensor gate_up = make({40, 32}, DType::kF16);
    peak_of([&] { backend->SwiGluForward(gate_up, out); });
    peak_of([&] { backend->SumOfSquares(x); });
    return result;
  };
  const std::vector<int64_t> real = peaks(false);
  EXPECT_EQ(real[0], 3 * 2 * 4 * 16);  // x's and out's rows, per thread
  EXPECT_EQ(real[1], 0);               // bf16: none
  EXPECT_GT(real[5], 0);               // flash attention backward: scratch or staging
  EXPECT_GT(real.back(), 0);           // the sum's partials
  EXPECT_EQ(peaks(true), real);
}

TEST_F(LedgerTest, F32KernelsWithoutScratchBookNothing) {
  Tensor a = Random({8, 8}), b = Random({8, 8}), out = Zeros({8, 8});
  EXPECT_EQ(WorkspacePeakOf([&] { backend().Matmul(a, false, b, true, out, false); }), 0);
  EXPECT_EQ(WorkspacePeakOf([&] { backend().GeluForward(a, out); }), 0);
  EXPECT_EQ(WorkspacePeakOf([&] { backend().Add(a, b, out); }), 0);
  Tensor param = Random({8, 8}), m = Zeros({8, 8}), v = Zeros({8, 8});
  EXPECT_EQ(WorkspacePeakOf([&] { backend().AdamW(param, a, m, v, AdamWConfig{}, 1.0f); }), 0);
}

TEST_F(LedgerTest, WorkspaceIsReleasedWhenAKernelRejectsItsArguments) {
  Tensor logits = Random({4, 5}, 1.0f, DType::kBF16);
  Tensor targets = Ids({4}, 5);
  targets.data<int32_t>()[2] = 99;
  Tensor dlogits = Zeros({4, 5}, DType::kBF16);
  WorkspacePeakOf(
      [&] { EXPECT_THROW(backend().CrossEntropyBackward(logits, targets, 1.0f, dlogits), Error); });
}

}  // namespace
}  // namespace baton::kernels_test
