// CUDA vocab-parallel embedding and cross-entropy (Backend::EmbeddingShardForward and the rest)
// against the CPU backend, shard by shard, in f32/bf16/f16: a vocabulary of 50 split unevenly
// over three ranks, with packed documents, ignored targets and in-place gradients; plus the meta
// backend's checks (no GPU needed) and ids that are bad for a shard surfacing at the next sync.
#include <gmock/gmock.h>

#include <vector>

#include "core/error.h"
#include "kernels/cuda/cuda_test_util.h"

namespace baton::cuda_test {
namespace {

constexpr int64_t kVocab = 50;
// Rank t holds rows [kBegins[t], kBegins[t] + kRows[t]).
constexpr int64_t kRows[] = {20, 7, 23};
constexpr int64_t kBegins[] = {0, 20, 27};

class CudaVocabParallelTest : public CudaVsCpuDTypeTest {
 protected:
  Tensor Columns(const Tensor& t, int64_t col0, int64_t cols) {
    return numeric_check::ColumnsOf(cpu_->allocator(), t, col0, cols);
  }
  Tensor Targets(int64_t rows) {
    Tensor targets = Ids({rows}, kVocab);
    targets.data<int32_t>()[3] = kIgnoreTarget;
    targets.data<int32_t>()[10] = kIgnoreTarget;
    return targets;
  }
};

TEST_P(CudaVocabParallelTest, EmbeddingShardForwardMatchesCpu) {
  const int64_t batch = 3, seq = 12, channels = 40;
  std::vector<int32_t> starts(batch * seq);
  for (int64_t i = 0; i < batch * seq; ++i) starts[i] = i % seq < 5 ? 0 : 5;
  const Tensor segments = Tensor::Wrap(starts.data(), {batch, seq}, DType::kI32);
  const Tensor tokens = Ids({batch, seq}, kVocab);
  const Tensor wpe = Random({seq, channels}, 1.0f, dtype());
  for (int t = 0; t < 3; ++t) {
    const Tensor wte = Random({kRows[t], channels}, 1.0f, dtype());
    for (bool packed : {false, true}) {
      const Tensor position_table = t == 0 ? wpe : Tensor();
      Tensor cpu_out = HostZeros({batch, seq, channels}, dtype());
      cpu().EmbeddingShardForward(tokens, packed ? segments : Tensor(), kBegins[t], wte,
                                  position_table, cpu_out);
      Tensor gpu_out = GpuZeros({batch, seq, channels}, dtype());
      gpu().EmbeddingShardForward(
          ToGpu(tokens), packed ? ToGpu(segments) : Tensor(), kBegins[t], ToGpu(wte),
          position_table.defined() ? ToGpu(position_table) : Tensor(), gpu_out);
      EXPECT_LT(ErrorVsCpu(gpu_out, cpu_out), Tolerance(dtype())) << t << packed;
    }
  }
}

TEST_P(CudaVocabParallelTest, EmbeddingShardBackwardMatchesCpu) {
  const int64_t batch = 4, seq = 64, channels = 300;  // 256 tokens over 50 ids: many repeats
  const Tensor tokens = Ids({batch, seq}, kVocab);
  const Tensor dout = Random({batch, seq, channels}, 1.0f, dtype());
  for (int t = 0; t < 3; ++t) {
    Tensor cpu_dwte = Random({kRows[t], channels}, 1.0f, DType::kF32);
    Tensor cpu_dwpe = Random({seq, channels}, 1.0f, DType::kF32);
    Tensor gpu_dwte = ToGpu(cpu_dwte), gpu_dwpe = ToGpu(cpu_dwpe);
    cpu().EmbeddingShardBackward(tokens, Tensor(), kBegins[t], dout, cpu_dwte, cpu_dwpe);
    gpu().EmbeddingShardBackward(ToGpu(tokens), Tensor(), kBegins[t], ToGpu(dout), gpu_dwte,
                                 gpu_dwpe);
    EXPECT_LT(ErrorVsCpu(gpu_dwte, cpu_dwte), 2e-5) << t;
    EXPECT_LT(ErrorVsCpu(gpu_dwpe, cpu_dwpe), 2e-5) << t;
  }
}

// Stats per shard, their combination (loss and row stats), and the shard gradients, in place too.
TEST_P(CudaVocabParallelTest, CrossEntropyShardsMatchCpu) {
  const int64_t rows = 37;
  const float grad_scale = 0.5f;
  const Tensor logits = Random({rows, kVocab}, 3.0f, dtype());
  const Tensor targets = Targets(rows);
  const Tensor gpu_targets = ToGpu(targets);
  std::vector<float> stacked;
  std::vector<Tensor> gpu_stats;
  for (int t = 0; t < 3; ++t) {
    const Tensor shard = Columns(logits, kBegins[t], kRows[t]);
    Tensor cpu_stats = HostZeros({rows, 3});
    cpu().CrossEntropyShardStats(shard, targets, kBegins[t], cpu_stats);
    gpu_stats.push_back(GpuZeros({rows, 3}));
    gpu().CrossEntropyShardStats(ToGpu(shard), gpu_targets, kBegins[t], gpu_stats.back());
    EXPECT_LT(ErrorVsCpu(gpu_stats.back(), cpu_stats), 2e-5) << t;
    const std::vector<float> values = ToFloatVector(cpu_stats);
    stacked.insert(stacked.end(), values.begin(), values.end());
  }
  const Tensor all_stats = HostValues({3, rows, 3}, stacked);
  Tensor cpu_row_stats = HostZeros({rows, 2}), cpu_loss = HostZeros({1});
  cpu().CrossEntropyShardCombine(all_stats, targets, cpu_row_stats, cpu_loss);
  Tensor gpu_row_stats = GpuZeros({rows, 2}), gpu_loss = GpuZeros({1});
  gpu().CrossEntropyShardCombine(ToGpu(all_stats), gpu_targets, gpu_row_stats, gpu_loss);
  EXPECT_LT(ErrorVsCpu(gpu_row_stats, cpu_row_stats), 2e-5);
  EXPECT_LT(ErrorVsCpu(gpu_loss, cpu_loss), 2e-5);
  for (int t = 0; t < 3; ++t) {
    const Tensor shard = Columns(logits, kBegins[t], kRows[t]);
    Tensor cpu_dlogits = HostZeros(shard.shape(), dtype());
    cpu().CrossEntropyShardBackward(shard, targets, kBegins[t], cpu_row_stats, grad_scale,
                                    cpu_dlogits);
    Tensor gpu_dlogits = GpuZeros(shard.shape(), dtype());
    gpu().CrossEntropyShardBackward(ToGpu(shard), gpu_targets, kBegins[t], gpu_row_stats,
                                    grad_scale, gpu_dlogits);
    EXPECT_LT(ErrorVsCpu(gpu_dlogits, cpu_dlogits), Tolerance(dtype())) << t;
    Tensor gpu_in_place = ToGpu(shard);
    gpu().CrossEntropyShardBackward(gpu_in_place, gpu_targets, kBegins[t], gpu_row_stats,
                                    grad_scale, gpu_in_place);
    EXPECT_LT(ErrorVsCpu(gpu_in_place, cpu_dlogits), Tolerance(dtype())) << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaVocabParallelTest, BATON_ALL_FLOAT_DTYPES, DTypeName);

// A negative token is bad on any shard; a token past the shard is another rank's, not an error.
TEST_F(CudaVsCpuTest, NegativeTokenOnAShardIsReportedAtTheNextSync) {
  Tensor tokens = Ids({2, 4}, 10);
  tokens.data<int32_t>()[6] = 1000;  // another rank's
  const Tensor wte = ToGpu(Random({3, 8}));
  Tensor out = GpuZeros({2, 4, 8});
  gpu().EmbeddingShardForward(ToGpu(tokens), Tensor(), 4, wte, Tensor(), out);
  gpu().Synchronize();
  tokens.data<int32_t>()[5] = -3;
  gpu().EmbeddingShardForward(ToGpu(tokens), Tensor(), 4, wte, Tensor(), out);
  try {
    gpu().Synchronize();
    FAIL() << "expected an out-of-range id error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("element 5"));
  }
}

// Meta mode needs no GPU: the shard methods check their arguments and book their workspace.
TEST(CudaMetaVocabParallel, ChecksArgumentsWithoutAGpu) {
  MemoryLedger ledger;
  const std::unique_ptr<Backend> meta = MakeCudaMetaBackend(ledger, 0);
  const auto make = [&](const Shape& shape, DType dtype) {
    return Tensor::Empty(meta->allocator(), shape, dtype, MemCategory::kActivations);
  };
  const int64_t rows = 18;
  const Tensor tokens = make({2, 9}, DType::kI32), wte = make({7, 16}, DType::kBF16);
  const Tensor wpe = make({9, 16}, DType::kBF16);
  Tensor out = make({2, 9, 16}, DType::kBF16), dwte = make({7, 16}, DType::kF32);
  Tensor none;
  meta->EmbeddingShardForward(tokens, Tensor(), 7, wte, wpe, out);
  meta->EmbeddingShardBackward(tokens, Tensor(), 7, out, dwte, none);
  EXPECT_THROW(meta->EmbeddingShardForward(tokens, Tensor(), -1, wte, wpe, out), Error);
  EXPECT_THROW(meta->EmbeddingShardBackward(tokens, Tensor(), -1, out, dwte, none), Error);

  const Tensor logits = make({rows, 7}, DType::kBF16), targets = make({rows}, DType::kI32);
  Tensor stats = make({rows, 3}, DType::kF32), row_stats = make({rows, 2}, DType::kF32);
  Tensor loss = make({1}, DType::kF32), dlogits = make({rows, 7}, DType::kBF16);
  const Tensor all_stats = make({2, rows, 3}, DType::kF32);
  meta->CrossEntropyShardStats(logits, targets, 7, stats);
  ledger.ResetPeaks();
  meta->CrossEntropyShardCombine(all_stats, targets, row_stats, loss);
  EXPECT_EQ(ledger.peak(MemCategory::kWorkspace) - ledger.Current()[MemCategory::kWorkspace],
            4 * rows);  // the row losses
  meta->CrossEntropyShardBackward(logits, targets, 7, row_stats, 1.0f, dlogits);
  EXPECT_THROW(meta->CrossEntropyShardStats(logits, targets, -1, stats), Error);
  EXPECT_THROW(meta->CrossEntropyShardStats(logits, targets, 7, row_stats), Error);
  EXPECT_THROW(meta->CrossEntropyShardCombine(stats, targets, row_stats, loss), Error);
  EXPECT_THROW(meta->CrossEntropyShardCombine(all_stats, targets, stats, loss), Error);
  EXPECT_THROW(meta->CrossEntropyShardBackward(logits, targets, 7, stats, 1.0f, dlogits), Error);
  EXPECT_THROW(meta->CrossEntropyShardBackward(logits, targets, -1, row_stats, 1.0f, dlogits),
               Error);
}

}  // namespace
}  // namespace baton::cuda_test
