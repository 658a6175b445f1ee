// CUDA GPT-layer kernels against the CPU backend, forward and backward, in f32/bf16/f16:
// embedding (repeated tokens, position grads, undefined grads, no position table), LayerNorm, GELU,
// cross-entropy (in place), plus out-of-range ids surfacing at the next synchronising call, and
// repeatability of the atomics-free embedding and LayerNorm gradients.
#include <gmock/gmock.h>

#include <vector>

#include "core/error.h"
#include "kernels/cuda/cuda_test_util.h"

namespace baton::cuda_test {
namespace {

using CudaLayersTest = CudaVsCpuDTypeTest;

TEST_P(CudaLayersTest, EmbeddingForwardMatchesCpu) {
  const int64_t batch = 3, seq = 17, channels = 40, vocab = 50, max_seq = 20;
  const Tensor tokens = Ids({batch, seq}, vocab);
  const Tensor wte = Random({vocab, channels}, 1.0f, dtype());
  const Tensor wpe = Random({max_seq, channels}, 1.0f, dtype());
  Tensor cpu_out = HostZeros({batch, seq, channels}, dtype());
  cpu().EmbeddingForward(tokens, wte, wpe, cpu_out);
  Tensor gpu_out = GpuZeros({batch, seq, channels}, dtype());
  gpu().EmbeddingForward(ToGpu(tokens), ToGpu(wte), ToGpu(wpe), gpu_out);
  EXPECT_LT(ErrorVsCpu(gpu_out, cpu_out), Tolerance(dtype()));
}

// Llama: no learned positions (wpe undefined), out = wte[tokens], with or without packed
// documents' segment starts.
TEST_P(CudaLayersTest, EmbeddingForwardWithoutPositionsMatchesCpu) {
  const int64_t batch = 2, seq = 9, channels = 41, vocab = 50;
  std::vector<int32_t> starts = {0, 0, 0, 3, 3, 5, 5, 5, 5, 0, 1, 1, 1, 1, 1, 1, 7, 7};
  const Tensor segments = Tensor::Wrap(starts.data(), {batch, seq}, DType::kI32);
  const Tensor tokens = Ids({batch, seq}, vocab);
  const Tensor wte = Random({vocab, channels}, 1.0f, dtype());
  const Tensor gpu_tokens = ToGpu(tokens), gpu_wte = ToGpu(wte);
  Tensor cpu_out = HostZeros({batch, seq, channels}, dtype());
  cpu().EmbeddingForward(tokens, wte, Tensor(), cpu_out);
  Tensor gpu_out = GpuZeros({batch, seq, channels}, dtype());
  gpu().EmbeddingForward(gpu_tokens, gpu_wte, Tensor(), gpu_out);
  EXPECT_EQ(ErrorVsCpu(gpu_out, cpu_out), 0.0);  // a copy of wte's rows
  Tensor gpu_packed = GpuZeros({batch, seq, channels}, dtype());
  gpu().EmbeddingForward(gpu_tokens, ToGpu(segments), gpu_wte, Tensor(), gpu_packed);
  EXPECT_EQ(ErrorVsCpu(gpu_packed, cpu_out), 0.0);
}

TEST_P(CudaLayersTest, EmbeddingBackwardMatchesCpuWithRepeatedTokens) {
  const int64_t batch = 4, seq = 64, channels = 300, vocab = 7, max_seq = 70;  // many repeats
  const Tensor tokens = Ids({batch, seq}, vocab);
  const Tensor dout = Random({batch, seq, channels}, 1.0f, dtype());
  Tensor cpu_dwte = Random({vocab, channels}, 1.0f, DType::kF32);
  Tensor cpu_dwpe = Random({max_seq, channels}, 1.0f, DType::kF32);
  Tensor gpu_dwte = ToGpu(cpu_dwte);
  Tensor gpu_dwpe = ToGpu(cpu_dwpe);
  cpu().EmbeddingBackward(tokens, dout, cpu_dwte, cpu_dwpe);
  gpu().EmbeddingBackward(ToGpu(tokens), ToGpu(dout), gpu_dwte, gpu_dwpe);
  EXPECT_LT(ErrorVsCpu(gpu_dwte, cpu_dwte), 2e-5);
  EXPECT_LT(ErrorVsCpu(gpu_dwpe, cpu_dwpe), 2e-5);
}

TEST_P(CudaLayersTest, LayerNormForwardMatchesCpu) {
  for (int64_t cols : {7, 128, 768, 1000}) {
    const int64_t rows = 37;
    const Tensor x = Random({rows, cols}, 2.0f, dtype());
    const Tensor weight = Random({cols}, 1.0f, dtype());
    const Tensor bias = Random({cols}, 1.0f, dtype());
    Tensor cpu_out = HostZeros({rows, cols}, dtype());
    Tensor cpu_mean = HostZeros({rows}), cpu_rstd = HostZeros({rows});
    cpu().LayerNormForward(x, weight, bias, cpu_out, cpu_mean, cpu_rstd);
    Tensor gpu_out = GpuZeros({rows, cols}, dtype());
    Tensor gpu_mean = GpuZeros({rows}), gpu_rstd = GpuZeros({rows});
    gpu().LayerNormForward(ToGpu(x), ToGpu(weight), ToGpu(bias), gpu_out, gpu_mean, gpu_rstd);
    EXPECT_LT(ErrorVsCpu(gpu_out, cpu_out), Tolerance(dtype())) << cols;
    EXPECT_LT(ErrorVsCpu(gpu_mean, cpu_mean), 1e-5) << cols;
    EXPECT_LT(ErrorVsCpu(gpu_rstd, cpu_rstd), 1e-5) << cols;
  }
}

TEST_P(CudaLayersTest, LayerNormBackwardMatchesCpu) {
  for (auto [rows, cols] : {std::tuple{37, 7}, std::tuple{300, 768}, std::tuple{1030, 96}}) {
    const Tensor x = Random({rows, cols}, 2.0f, dtype());
    const Tensor weight = Random({cols}, 1.0f, dtype());
    const Tensor bias = Random({cols}, 1.0f, dtype());
    const Tensor dout = Random({rows, cols}, 1.0f, dtype());
    Tensor mean = HostZeros({rows}), rstd = HostZeros({rows});
    Tensor out = HostZeros({rows, cols}, dtype());
    cpu().LayerNormForward(x, weight, bias, out, mean, rstd);
    Tensor cpu_dx = Random({rows, cols}, 1.0f, dtype());
    Tensor cpu_dw = Random({cols}, 1.0f, DType::kF32);
    Tensor cpu_db = Random({cols}, 1.0f, DType::kF32);
    Tensor gpu_dx = ToGpu(cpu_dx), gpu_dw = ToGpu(cpu_dw), gpu_db = ToGpu(cpu_db);
    cpu().LayerNormBackward(dout, x, weight, mean, rstd, cpu_dx, cpu_dw, cpu_db);
    gpu().LayerNormBackward(ToGpu(dout), ToGpu(x), ToGpu(weight), ToGpu(mean), ToGpu(rstd), gpu_dx,
                            gpu_dw, gpu_db);
    EXPECT_LT(ErrorVsCpu(gpu_dx, cpu_dx), Tolerance(dtype())) << rows << "x" << cols;
    EXPECT_LT(ErrorVsCpu(gpu_dw, cpu_dw), 1e-5) << rows << "x" << cols;
    EXPECT_LT(ErrorVsCpu(gpu_db, cpu_db), 1e-5) << rows << "x" << cols;
  }
}

TEST_P(CudaLayersTest, GeluForwardAndBackwardMatchCpu) {
  const Tensor x = Random({1000, 33}, 3.0f, dtype());
  const Tensor dout = Random({1000, 33}, 1.0f, dtype());
  Tensor cpu_out = HostZeros({1000, 33}, dtype());
  cpu().GeluForward(x, cpu_out);
  Tensor gpu_out = GpuZeros({1000, 33}, dtype());
  gpu().GeluForward(ToGpu(x), gpu_out);
  EXPECT_LT(ErrorVsCpu(gpu_out, cpu_out), Tolerance(dtype()));
  Tensor cpu_dx = Random({1000, 33}, 1.0f, dtype());
  Tensor gpu_dx = ToGpu(cpu_dx);
  cpu().GeluBackward(x, dout, cpu_dx);
  gpu().GeluBackward(ToGpu(x), ToGpu(dout), gpu_dx);
  EXPECT_LT(ErrorVsCpu(gpu_dx, cpu_dx), Tolerance(dtype()));
}

TEST_P(CudaLayersTest, CrossEntropyForwardAndBackwardMatchCpu) {
  for (auto [rows, vocab] : {std::tuple{5, 7}, std::tuple{64, 50257}, std::tuple{300, 256}}) {
    const Tensor logits = Random({rows, vocab}, 3.0f, dtype());
    const Tensor targets = Ids({rows}, vocab);
    Tensor cpu_loss = HostZeros({1});
    cpu().CrossEntropyForward(logits, targets, cpu_loss);
    const Tensor gpu_logits = ToGpu(logits), gpu_targets = ToGpu(targets);
    Tensor gpu_loss = GpuZeros({1});
    gpu().CrossEntropyForward(gpu_logits, gpu_targets, gpu_loss);
    EXPECT_LT(ErrorVsCpu(gpu_loss, cpu_loss), 1e-5) << rows << "x" << vocab;
    Tensor cpu_dlogits = HostZeros({rows, vocab}, dtype());
    cpu().CrossEntropyBackward(logits, targets, 0.5f, cpu_dlogits);
    Tensor gpu_dlogits = GpuZeros({rows, vocab}, dtype());
    gpu().CrossEntropyBackward(gpu_logits, gpu_targets, 0.5f, gpu_dlogits);
    EXPECT_LT(ErrorVsCpu(gpu_dlogits, cpu_dlogits), Tolerance(dtype())) << rows << "x" << vocab;
  }
}

// Packed documents: rows whose target is kIgnoreTarget are not counted, on the GPU as on the CPU.
TEST_P(CudaLayersTest, CrossEntropyWithIgnoredTargetsMatchesCpu) {
  const int64_t rows = 40, vocab = 300;
  const Tensor logits = Random({rows, vocab}, 3.0f, dtype());
  Tensor targets = Ids({rows}, vocab);
  for (int64_t r = 0; r < rows; r += 3) targets.data<int32_t>()[r] = kIgnoreTarget;
  Tensor cpu_loss = HostZeros({1});
  cpu().CrossEntropyForward(logits, targets, cpu_loss);
  const Tensor gpu_logits = ToGpu(logits), gpu_targets = ToGpu(targets);
  Tensor gpu_loss = GpuZeros({1});
  gpu().CrossEntropyForward(gpu_logits, gpu_targets, gpu_loss);
  EXPECT_LT(ErrorVsCpu(gpu_loss, cpu_loss), 1e-5);
  Tensor cpu_dlogits = HostZeros({rows, vocab}, dtype());
  cpu().CrossEntropyBackward(logits, targets, 0.5f, cpu_dlogits);
  Tensor gpu_dlogits = GpuZeros({rows, vocab}, dtype());
  gpu().CrossEntropyBackward(gpu_logits, gpu_targets, 0.5f, gpu_dlogits);
  EXPECT_LT(ErrorVsCpu(gpu_dlogits, cpu_dlogits), Tolerance(dtype()));
}

TEST_P(CudaLayersTest, CrossEntropyBackwardInPlaceMatchesCpu) {
  const Tensor logits = Random({50, 1000}, 2.0f, dtype());
  const Tensor targets = Ids({50}, 1000);
  Tensor cpu_buffer = HostClone(logits);
  cpu().CrossEntropyBackward(cpu_buffer, targets, 1.0f, cpu_buffer);
  Tensor gpu_buffer = ToGpu(logits);
  gpu().CrossEntropyBackward(gpu_buffer, ToGpu(targets), 1.0f, gpu_buffer);
  EXPECT_LT(ErrorVsCpu(gpu_buffer, cpu_buffer), Tolerance(dtype()));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaLayersTest, BATON_ALL_FLOAT_DTYPES, DTypeName);

TEST_F(CudaVsCpuTest, EmbeddingBackwardIsRepeatableBitForBit) {
  const Tensor tokens = ToGpu(Ids({8, 256}, 11));
  const Tensor dout = ToGpu(Random({8, 256, 64}));
  Tensor first = GpuZeros({11, 64}), second = GpuZeros({11, 64});
  Tensor undefined;
  gpu().EmbeddingBackward(tokens, dout, first, undefined);
  gpu().EmbeddingBackward(tokens, dout, second, undefined);
  EXPECT_EQ(ErrorVsCpu(first, ToCpu(second)), 0.0);
}

// Packed documents: positions restart at each document, forward and backward (dwpe scattered by
// position), against the CPU.
TEST_F(CudaVsCpuTest, EmbeddingWithSegmentStartsMatchesCpu) {
  const int64_t batch = 2, seq = 9, channels = 16, vocab = 20;
  std::vector<int32_t> starts = {0, 0, 0, 3, 3, 5, 5, 5, 5, 0, 1, 1, 1, 1, 1, 1, 7, 7};
  const Tensor segments = Tensor::Wrap(starts.data(), {batch, seq}, DType::kI32);
  const Tensor tokens = Ids({batch, seq}, vocab);
  const Tensor wte = Random({vocab, channels}), wpe = Random({seq, channels});
  Tensor cpu_out = HostZeros({batch, seq, channels});
  cpu().EmbeddingForward(tokens, segments, wte, wpe, cpu_out);
  Tensor gpu_out = GpuZeros({batch, seq, channels});
  const Tensor gpu_segments = ToGpu(segments), gpu_tokens = ToGpu(tokens);
  gpu().EmbeddingForward(gpu_tokens, gpu_segments, ToGpu(wte), ToGpu(wpe), gpu_out);
  EXPECT_LT(ErrorVsCpu(gpu_out, cpu_out), 1e-6);
  const Tensor dout = Random({batch, seq, channels});
  Tensor cpu_dwte = HostZeros({vocab, channels}), cpu_dwpe = HostZeros({seq, channels});
  cpu().EmbeddingBackward(tokens, segments, dout, cpu_dwte, cpu_dwpe);
  Tensor gpu_dwte = GpuZeros({vocab, channels}), gpu_dwpe = GpuZeros({seq, channels});
  gpu().EmbeddingBackward(gpu_tokens, gpu_segments, ToGpu(dout), gpu_dwte, gpu_dwpe);
  EXPECT_LT(ErrorVsCpu(gpu_dwte, cpu_dwte), 1e-6);
  EXPECT_LT(ErrorVsCpu(gpu_dwpe, cpu_dwpe), 1e-6);
}

// Meta mode needs no GPU: an undefined wpe is accepted, a defined one still checked.
TEST(CudaMetaEmbedding, TakesAnUndefinedPositionTable) {
  MemoryLedger ledger;
  const std::unique_ptr<Backend> meta = MakeCudaMetaBackend(ledger, 0);
  const auto make = [&](const Shape& shape, DType dtype) {
    return Tensor::Empty(meta->allocator(), shape, dtype, MemCategory::kActivations);
  };
  const Tensor tokens = make({2, 9}, DType::kI32), wte = make({50, 16}, DType::kBF16);
  Tensor out = make({2, 9, 16}, DType::kBF16);
  meta->EmbeddingForward(tokens, wte, Tensor(), out);
  const Tensor short_wpe = make({8, 16}, DType::kBF16);
  EXPECT_THROW(meta->EmbeddingForward(tokens, wte, short_wpe, out), Error);
}

TEST_F(CudaVsCpuTest, OutOfRangeTokenIsReportedAtTheNextSync) {
  Tensor tokens = Ids({2, 4}, 10);
  tokens.data<int32_t>()[5] = 10;  // == vocab
  const Tensor wte = ToGpu(Random({10, 8}));
  const Tensor wpe = ToGpu(Random({4, 8}));
  Tensor out = GpuZeros({2, 4, 8});
  gpu().EmbeddingForward(ToGpu(tokens), wte, wpe, out);
  try {
    gpu().Synchronize();
    FAIL() << "expected an out-of-range id error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("element 5"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("is 10, outside [0, 10)"));
  }
  gpu().Synchronize();  // reported once
}

TEST_F(CudaVsCpuTest, NegativeTargetIsReportedAtTheNextSync) {
  Tensor targets = Ids({6}, 5);
  targets.data<int32_t>()[2] = -2;  // -1 is kIgnoreTarget (packed documents)
  Tensor loss = GpuZeros({1});
  gpu().CrossEntropyForward(ToGpu(Random({6, 5})), ToGpu(targets), loss);
  EXPECT_THROW(gpu().Synchronize(), Error);
}

}  // namespace
}  // namespace baton::cuda_test
