// CUDA causal attention against the CPU backend: out and probs forward, dqkv backward
// (accumulating), in f32/bf16/f16, for sequence lengths that are and are not multiples of the
// warp size, with an out dtype differing from qkv's (the f32 path), and bit-for-bit repeatable.
// The same for flash attention (out and lse forward, dqkv backward), against the CPU's flash
// kernels and its materialised forward, plus what a meta backend books for it (nothing). And
// attention over a key-value cache (CachedAttentionForward): out against the CPU's, the caches bit
// for bit.
#include <algorithm>
#include <memory>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/cuda_test_util.h"

namespace baton::cuda_test {
namespace {

struct AttentionCase {
  int64_t batch, seq, channels;
  int heads;
};

class CudaAttentionTest : public CudaVsCpuDTypeTest {
 protected:
  void CompareForwardAndBackward(const AttentionCase& c, DType out_dtype) {
    const Shape qkv_shape{c.batch, c.seq, 3 * c.channels};
    const Shape out_shape{c.batch, c.seq, c.channels};
    const Shape probs_shape{c.batch, c.heads, c.seq, c.seq};
    const Tensor qkv = Random(qkv_shape, 1.0f, dtype());
    Tensor cpu_out = HostZeros(out_shape, out_dtype);
    Tensor cpu_probs = HostZeros(probs_shape);
    cpu().AttentionForward(qkv, c.heads, cpu_out, cpu_probs);
    const Tensor gpu_qkv = ToGpu(qkv);
    Tensor gpu_out = GpuZeros(out_shape, out_dtype);
    Tensor gpu_probs = GpuZeros(probs_shape);
    gpu().AttentionForward(gpu_qkv, c.heads, gpu_out, gpu_probs);
    const std::string where =
        ::testing::PrintToString(std::tuple{c.batch, c.seq, c.channels, c.heads}) + " out " +
        std::string(Name(out_dtype));
    const double tolerance = std::max(Tolerance(dtype()), Tolerance(out_dtype));
    EXPECT_LT(ErrorVsCpu(gpu_out, cpu_out), tolerance) << where;
    EXPECT_LT(ErrorVsCpu(gpu_probs, cpu_probs), dtype() == DType::kF32 ? 1e-5 : 1e-3) << where;

    const Tensor dout = Random(out_shape, 1.0f, out_dtype);
    Tensor cpu_dqkv = Random(qkv_shape, 1.0f, dtype());
    Tensor gpu_dqkv = ToGpu(cpu_dqkv);
    cpu().AttentionBackward(dout, qkv, cpu_probs, c.heads, cpu_dqkv);
    gpu().AttentionBackward(ToGpu(dout), gpu_qkv, ToGpu(cpu_probs), c.heads, gpu_dqkv);
    EXPECT_LT(ErrorVsCpu(gpu_dqkv, cpu_dqkv), 2 * tolerance) << where;
  }
};

TEST_P(CudaAttentionTest, MatchesCpu) {
  for (const AttentionCase& c : {AttentionCase{1, 1, 8, 2}, AttentionCase{2, 13, 24, 3},
                                 AttentionCase{2, 64, 64, 4}, AttentionCase{1, 130, 96, 2}}) {
    CompareForwardAndBackward(c, dtype());
  }
}

TEST_P(CudaAttentionTest, OutInAnotherDtypeRunsInF32) {
  CompareForwardAndBackward({2, 40, 32, 4}, dtype() == DType::kF32 ? DType::kBF16 : DType::kF32);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaAttentionTest, BATON_ALL_FLOAT_DTYPES, DTypeName);

TEST_F(CudaVsCpuTest, AttentionIsRepeatableBitForBit) {
  const int64_t batch = 2, seq = 100, channels = 64;
  const int heads = 4;
  const Tensor qkv = ToGpu(Random({batch, seq, 3 * channels}));
  const Tensor dout = ToGpu(Random({batch, seq, channels}));
  Tensor results[2];
  for (Tensor& dqkv : results) {
    Tensor out = GpuZeros({batch, seq, channels});
    Tensor probs = GpuZeros({batch, heads, seq, seq});
    dqkv = GpuZeros({batch, seq, 3 * channels});
    gpu().AttentionForward(qkv, heads, out, probs);
    gpu().AttentionBackward(dout, qkv, probs, heads, dqkv);
  }
  EXPECT_EQ(ErrorVsCpu(results[0], ToCpu(results[1])), 0.0);
}

class CudaFlashAttentionTest : public CudaVsCpuDTypeTest {
 protected:
  void CompareForwardAndBackward(const AttentionCase& c, DType out_dtype) {
    const Shape qkv_shape{c.batch, c.seq, 3 * c.channels};
    const Shape out_shape{c.batch, c.seq, c.channels};
    const Shape lse_shape{c.batch, c.heads, c.seq};
    const Tensor qkv = Random(qkv_shape, 1.0f, dtype());
    Tensor cpu_out = HostZeros(out_shape, out_dtype);
    Tensor cpu_lse = HostZeros(lse_shape);
    cpu().FlashAttentionForward(qkv, c.heads, cpu_out, cpu_lse);
    const Tensor gpu_qkv = ToGpu(qkv);
    Tensor gpu_out = GpuZeros(out_shape, out_dtype);
    Tensor gpu_lse = GpuZeros(lse_shape);
    gpu().FlashAttentionForward(gpu_qkv, c.heads, gpu_out, gpu_lse);
    const std::string where =
        ::testing::PrintToString(std::tuple{c.batch, c.seq, c.channels, c.heads}) + " out " +
        std::string(Name(out_dtype));
    const double tolerance = std::max(Tolerance(dtype()), Tolerance(out_dtype));
    EXPECT_LT(ErrorVsCpu(gpu_out, cpu_out), tolerance) << where;
    EXPECT_LT(ErrorVsCpu(gpu_lse, cpu_lse), dtype() == DType::kF32 ? 1e-5 : 1e-3) << where;

    // The same attention as the materialised kernels compute.
    Tensor materialized_out = HostZeros(out_shape, out_dtype);
    Tensor probs = HostZeros({c.batch, c.heads, c.seq, c.seq});
    cpu().AttentionForward(qkv, c.heads, materialized_out, probs);
    EXPECT_LT(ErrorVsCpu(gpu_out, materialized_out), tolerance) << where << " vs materialized";

    // Backward from the CPU forward's out and lse on both sides, onto random gradients.
    const Tensor dout = Random(out_shape, 1.0f, out_dtype);
    Tensor cpu_dqkv = Random(qkv_shape, 1.0f, dtype());
    Tensor gpu_dqkv = ToGpu(cpu_dqkv);
    cpu().FlashAttentionBackward(dout, qkv, cpu_out, cpu_lse, c.heads, cpu_dqkv);
    gpu().FlashAttentionBackward(ToGpu(dout), gpu_qkv, ToGpu(cpu_out), ToGpu(cpu_lse), c.heads,
                                 gpu_dqkv);
    EXPECT_LT(ErrorVsCpu(gpu_dqkv, cpu_dqkv), 2 * tolerance) << where;
  }
};

// T = 1; 3 heads of 8; T a multiple of the 32-row tile; T past a tile boundary; many heads with
// D = 64 (GPT-2's) and T not a multiple of the tile.
TEST_P(CudaFlashAttentionTest, MatchesCpu) {
  for (const AttentionCase& c :
       {AttentionCase{1, 1, 8, 2}, AttentionCase{2, 13, 24, 3}, AttentionCase{2, 64, 64, 4},
        AttentionCase{1, 130, 96, 2}, AttentionCase{1, 200, 512, 8}}) {
    CompareForwardAndBackward(c, dtype());
  }
}

TEST_P(CudaFlashAttentionTest, OutInAnotherDtype) {
  CompareForwardAndBackward({2, 40, 32, 4}, dtype() == DType::kF32 ? DType::kBF16 : DType::kF32);
}

// The widest head the kernels take (D = 256: more than 48 KiB of shared memory per block) and an
// odd one (D = 33: two chunks per lane, the second mostly idle).
TEST_P(CudaFlashAttentionTest, WideAndOddHeads) {
  for (const AttentionCase& c : {AttentionCase{1, 70, 512, 2}, AttentionCase{2, 45, 66, 2}}) {
    CompareForwardAndBackward(c, dtype());
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaFlashAttentionTest, BATON_ALL_FLOAT_DTYPES, DTypeName);

TEST_F(CudaVsCpuTest, FlashAttentionIsRepeatableBitForBit) {
  const int64_t batch = 2, seq = 100, channels = 64;
  const int heads = 4;
  const Tensor qkv = ToGpu(Random({batch, seq, 3 * channels}));
  const Tensor dout = ToGpu(Random({batch, seq, channels}));
  const Tensor dqkv_init = Random({batch, seq, 3 * channels});
  Tensor outs[2], lses[2], dqkvs[2];
  for (int run = 0; run < 2; ++run) {
    outs[run] = GpuZeros({batch, seq, channels});
    lses[run] = GpuZeros({batch, heads, seq});
    dqkvs[run] = ToGpu(dqkv_init);
    gpu().FlashAttentionForward(qkv, heads, outs[run], lses[run]);
    gpu().FlashAttentionBackward(dout, qkv, outs[run], lses[run], heads, dqkvs[run]);
  }
  EXPECT_EQ(ErrorVsCpu(outs[0], ToCpu(outs[1])), 0.0);
  EXPECT_EQ(ErrorVsCpu(lses[0], ToCpu(lses[1])), 0.0);
  EXPECT_EQ(ErrorVsCpu(dqkvs[0], ToCpu(dqkvs[1])), 0.0);
}

// Meta mode needs no GPU: the calls validate, book no workspace (no T x T scratch: the point of
// flash attention) and refuse heads wider than the kernels take.
// Packed documents: fills segment starts (B,T) i32 on the host for documents starting at
// `starts` (row b's list), as data/packing.h makes them.
void FillSegmentStarts(Tensor& segment_starts, const std::vector<std::vector<int32_t>>& starts) {
  const int64_t seq = segment_starts.size(1);
  int32_t* data = segment_starts.data<int32_t>();
  for (size_t b = 0; b < starts.size(); ++b) {
    int32_t current = 0;
    for (int64_t t = 0; t < seq; ++t) {
      if (std::find(starts[b].begin(), starts[b].end(), t) != starts[b].end()) {
        current = static_cast<int32_t>(t);
      }
      data[b * seq + t] = current;
    }
  }
}

// Flash and materialized attention with segment starts against the CPU's, forward and backward,
// across tiles (32) and with documents starting inside, at and past tile edges.
// Flash and materialized attention, forward and backward, of the GPU against the CPU with given
// first keys per query (segments: (2, 100) i32): packed documents' or a sliding window's.
class CudaFirstKeysTest : public CudaVsCpuTest {
 protected:
  void ExpectFirstKeysMatchCpu(const Tensor& segments);
};

void CudaFirstKeysTest::ExpectFirstKeysMatchCpu(const Tensor& segments) {
  const int64_t batch = 2, seq = 100, channels = 32;
  const int heads = 2;
  const Tensor gpu_segments = ToGpu(segments);
  const Tensor qkv = Random({batch, seq, 3 * channels});
  const Tensor dout = Random({batch, seq, channels});
  const Tensor gpu_qkv = ToGpu(qkv), gpu_dout = ToGpu(dout);
  // Flash.
  Tensor cpu_out = HostZeros({batch, seq, channels}), cpu_lse = HostZeros({batch, heads, seq});
  cpu().FlashAttentionForward(qkv, segments, heads, cpu_out, cpu_lse);
  Tensor gpu_out = GpuZeros({batch, seq, channels}), gpu_lse = GpuZeros({batch, heads, seq});
  gpu().FlashAttentionForward(gpu_qkv, gpu_segments, heads, gpu_out, gpu_lse);
  EXPECT_LT(ErrorVsCpu(gpu_out, cpu_out), 1e-5);
  EXPECT_LT(ErrorVsCpu(gpu_lse, cpu_lse), 1e-5);
  Tensor cpu_dqkv = HostZeros(qkv.shape());
  cpu().FlashAttentionBackward(dout, qkv, segments, cpu_out, cpu_lse, heads, cpu_dqkv);
  Tensor gpu_dqkv = GpuZeros(qkv.shape());
  gpu().FlashAttentionBackward(gpu_dout, gpu_qkv, gpu_segments, gpu_out, gpu_lse, heads, gpu_dqkv);
  EXPECT_LT(ErrorVsCpu(gpu_dqkv, cpu_dqkv), 1e-5);
  // Materialized.
  Tensor cpu_probs = HostZeros({batch, heads, seq, seq});
  cpu().AttentionForward(qkv, segments, heads, cpu_out, cpu_probs);
  Tensor gpu_probs = GpuZeros({batch, heads, seq, seq});
  gpu().AttentionForward(gpu_qkv, gpu_segments, heads, gpu_out, gpu_probs);
  EXPECT_LT(ErrorVsCpu(gpu_out, cpu_out), 1e-5);
  EXPECT_LT(ErrorVsCpu(gpu_probs, cpu_probs), 1e-5);
  cpu_dqkv = HostZeros(qkv.shape());
  cpu().AttentionBackward(dout, qkv, segments, cpu_probs, heads, cpu_dqkv);
  gpu_dqkv = GpuZeros(qkv.shape());
  gpu().AttentionBackward(gpu_dout, gpu_qkv, gpu_segments, gpu_probs, heads, gpu_dqkv);
  EXPECT_LT(ErrorVsCpu(gpu_dqkv, cpu_dqkv), 1e-5);
}

TEST_F(CudaFirstKeysTest, SegmentedAttentionMatchesCpu) {
  Tensor segments = HostZeros({2, 100}, DType::kI32);
  FillSegmentStarts(segments, {{0, 5, 6, 32, 70, 99}, {0, 64}});
  ExpectFirstKeysMatchCpu(segments);
}

// Mistral's sliding window (model/sublayer_ops.cc): first keys max(start, t - 16) that rise by one
// per query, over documents in row 1 (a tile of 64 keys is partly seen by a row's queries).
TEST_F(CudaFirstKeysTest, SlidingWindowFirstKeysMatchCpu) {
  Tensor segments = HostZeros({2, 100}, DType::kI32);
  FillSegmentStarts(segments, {{0}, {0, 40, 41, 90}});
  int32_t* starts = segments.data<int32_t>();
  for (int64_t t = 0; t < 2 * 100; ++t) {
    starts[t] = std::max<int32_t>(starts[t], static_cast<int32_t>(t % 100) - 16);
  }
  ExpectFirstKeysMatchCpu(segments);
}

TEST(CudaMetaFlashAttention, BooksNoWorkspaceAndRefusesHeadsWiderThan256) {
  MemoryLedger ledger;
  const std::unique_ptr<Backend> meta = MakeCudaMetaBackend(ledger, 0);
  const auto make = [&](const Shape& shape, DType dtype) {
    return Tensor::Empty(meta->allocator(), shape, dtype, MemCategory::kActivations);
  };
  const int64_t batch = 2, seq = 1024, channels = 768;
  const Tensor qkv = make({batch, seq, 3 * channels}, DType::kBF16);
  const Tensor dout = make({batch, seq, channels}, DType::kBF16);
  Tensor out = make({batch, seq, channels}, DType::kBF16);
  Tensor lse = make({batch, 12, seq}, DType::kF32);
  Tensor dqkv = make({batch, seq, 3 * channels}, DType::kBF16);
  const int64_t workspace = ledger.current(MemCategory::kWorkspace);
  ledger.ResetPeaks();
  meta->FlashAttentionForward(qkv, 12, out, lse);
  meta->FlashAttentionBackward(dout, qkv, out, lse, 12, dqkv);
  EXPECT_EQ(ledger.peak(MemCategory::kWorkspace), workspace);

  Tensor transposed_lse = make({batch, seq, 12}, DType::kF32);
  EXPECT_THROW(meta->FlashAttentionForward(qkv, 12, out, transposed_lse), Error);
  Tensor one_head_lse = make({batch, 1, seq}, DType::kF32);  // D = 768
  EXPECT_THROW(meta->FlashAttentionForward(qkv, 1, out, one_head_lse), Error);
  EXPECT_THROW(meta->FlashAttentionBackward(dout, qkv, out, one_head_lse, 1, dqkv), Error);
}

// ---- with a key-value cache

struct CachedCase {
  int64_t batch, past, queries, channels;
  int heads;
};

class CudaCachedAttentionTest : public CudaVsCpuDTypeTest {
 protected:
  // Caches of past + queries + 2 rows whose first `past` hold random keys and values; the new
  // positions' out and the caches after the call, GPU against CPU.
  void Compare(const CachedCase& c) {
    const int64_t slots = c.past + c.queries + 2;
    const Shape cache_shape{c.batch, slots, c.channels};
    const Tensor qkv = Random({c.batch, c.queries, 3 * c.channels}, 1.0f, dtype());
    Tensor cpu_k = Random(cache_shape, 1.0f, dtype()), cpu_v = Random(cache_shape, 1.0f, dtype());
    Tensor gpu_k = ToGpu(cpu_k), gpu_v = ToGpu(cpu_v);
    Tensor cpu_out = HostZeros({c.batch, c.queries, c.channels}, dtype());
    Tensor gpu_out = GpuZeros({c.batch, c.queries, c.channels}, dtype());
    cpu().CachedAttentionForward(qkv, c.heads, c.past, cpu_k, cpu_v, cpu_out);
    gpu().CachedAttentionForward(ToGpu(qkv), c.heads, c.past, gpu_k, gpu_v, gpu_out);
    const std::string where =
        ::testing::PrintToString(std::tuple{c.batch, c.past, c.queries, c.channels, c.heads});
    EXPECT_LT(ErrorVsCpu(gpu_out, cpu_out), Tolerance(dtype())) << where;
    EXPECT_EQ(ErrorVsCpu(gpu_k, cpu_k), 0.0) << where;
    EXPECT_EQ(ErrorVsCpu(gpu_v, cpu_v), 0.0) << where;
  }
};

// One token at position 0; a few tokens after a few; one token past the 512-key tile; a prefill
// (past 0); the widest head (D = 256) and an odd one.
TEST_P(CudaCachedAttentionTest, MatchesCpu) {
  for (const CachedCase& c :
       {CachedCase{1, 0, 1, 8, 2}, CachedCase{2, 5, 3, 24, 3}, CachedCase{1, 600, 1, 64, 2},
        CachedCase{2, 0, 40, 32, 4}, CachedCase{1, 100, 1, 512, 2}, CachedCase{2, 45, 2, 66, 2}}) {
    Compare(c);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaCachedAttentionTest, BATON_ALL_FLOAT_DTYPES, DTypeName);

TEST(CudaMetaCachedAttention, BooksNoWorkspaceAndChecksTheCaches) {
  MemoryLedger ledger;
  const std::unique_ptr<Backend> meta = MakeCudaMetaBackend(ledger, 0);
  const auto make = [&](const Shape& shape, DType dtype) {
    return Tensor::Empty(meta->allocator(), shape, dtype, MemCategory::kActivations);
  };
  const int64_t batch = 1, context = 1024, channels = 768;
  const Tensor qkv = make({batch, 1, 3 * channels}, DType::kBF16);
  Tensor out = make({batch, 1, channels}, DType::kBF16);
  Tensor k_cache = make({batch, context, channels}, DType::kBF16);
  Tensor v_cache = make({batch, context, channels}, DType::kBF16);
  const int64_t workspace = ledger.current(MemCategory::kWorkspace);
  ledger.ResetPeaks();
  meta->CachedAttentionForward(qkv, 12, context - 1, k_cache, v_cache, out);
  EXPECT_EQ(ledger.peak(MemCategory::kWorkspace), workspace);
  EXPECT_THROW(meta->CachedAttentionForward(qkv, 12, context, k_cache, v_cache, out), Error);
  Tensor f32_cache = make({batch, context, channels}, DType::kF32);
  EXPECT_THROW(meta->CachedAttentionForward(qkv, 12, 0, f32_cache, v_cache, out), Error);
  EXPECT_THROW(meta->CachedAttentionForward(qkv, 1, 0, k_cache, v_cache, out), Error);  // D = 768
}

}  // namespace
}  // namespace baton::cuda_test
