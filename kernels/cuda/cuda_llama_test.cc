// CUDA Llama-layer kernels against the CPU backend, forward and backward, in f32/bf16/f16:
// RMSNorm (odd widths, several row chunks, a repeatable weight gradient), SwiGLU, rotary
// embeddings (start > 0, packed documents, the inverse undoing the forward), the grouped-query
// key/value repeat (groups of 1, 2 and 4, and multi-query). The meta-mode checks at the end need
// no GPU.
#include <tuple>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/launch.h"

namespace baton::cuda_test {
namespace {

using CudaLlamaTest = CudaVsCpuDTypeTest;
using cuda::ColumnSumsPartials;
using cuda::kRopeMaxHeadDim;

constexpr float kRmsEps = 1e-5f;

TEST_P(CudaLlamaTest, RmsNormForwardMatchesCpu) {
  for (int64_t cols : {7, 128, 1000, 4099}) {
    const int64_t rows = 37;
    const Tensor x = Random({rows, cols}, 2.0f, dtype());
    const Tensor weight = Random({cols}, 1.0f, dtype());
    Tensor cpu_out = HostZeros({rows, cols}, dtype()), cpu_rstd = HostZeros({rows});
    cpu().RmsNormForward(x, weight, kRmsEps, cpu_out, cpu_rstd);
    Tensor gpu_out = GpuZeros({rows, cols}, dtype()), gpu_rstd = GpuZeros({rows});
    gpu().RmsNormForward(ToGpu(x), ToGpu(weight), kRmsEps, gpu_out, gpu_rstd);
    EXPECT_LT(ErrorVsCpu(gpu_out, cpu_out), Tolerance(dtype())) << cols;
    EXPECT_LT(ErrorVsCpu(gpu_rstd, cpu_rstd), 1e-5) << cols;
  }
}

TEST_P(CudaLlamaTest, RmsNormBackwardMatchesCpu) {
  // 300 and 1030 rows span two and five chunks of the weight gradient's partial sums.
  for (auto [rows, cols] : {std::tuple{37, 7}, std::tuple{300, 768}, std::tuple{1030, 97}}) {
    const Tensor x = Random({rows, cols}, 2.0f, dtype());
    const Tensor weight = Random({cols}, 1.0f, dtype());
    const Tensor dout = Random({rows, cols}, 1.0f, dtype());
    Tensor out = HostZeros({rows, cols}, dtype()), rstd = HostZeros({rows});
    cpu().RmsNormForward(x, weight, kRmsEps, out, rstd);
    Tensor cpu_dx = Random({rows, cols}, 1.0f, dtype());
    Tensor cpu_dw = Random({cols}, 1.0f, DType::kF32);
    Tensor gpu_dx = ToGpu(cpu_dx), gpu_dw = ToGpu(cpu_dw);
    cpu().RmsNormBackward(dout, x, weight, rstd, cpu_dx, cpu_dw);
    gpu().RmsNormBackward(ToGpu(dout), ToGpu(x), ToGpu(weight), ToGpu(rstd), gpu_dx, gpu_dw);
    EXPECT_LT(ErrorVsCpu(gpu_dx, cpu_dx), Tolerance(dtype())) << rows << "x" << cols;
    EXPECT_LT(ErrorVsCpu(gpu_dw, cpu_dw), 1e-5) << rows << "x" << cols;
  }
}

TEST_P(CudaLlamaTest, SwiGluForwardAndBackwardMatchCpu) {
  for (auto [rows, hidden] : {std::tuple{37, 7}, std::tuple{300, 33}, std::tuple{5, 1000}}) {
    const Tensor gate_up = Random({rows, 2 * hidden}, 3.0f, dtype());
    const Tensor dout = Random({rows, hidden}, 1.0f, dtype());
    Tensor cpu_out = HostZeros({rows, hidden}, dtype());
    cpu().SwiGluForward(gate_up, cpu_out);
    const Tensor gpu_gate_up = ToGpu(gate_up);
    Tensor gpu_out = GpuZeros({rows, hidden}, dtype());
    gpu().SwiGluForward(gpu_gate_up, gpu_out);
    EXPECT_LT(ErrorVsCpu(gpu_out, cpu_out), Tolerance(dtype())) << rows << "x" << hidden;
    Tensor cpu_dgate_up = Random({rows, 2 * hidden}, 1.0f, dtype());
    Tensor gpu_dgate_up = ToGpu(cpu_dgate_up);
    cpu().SwiGluBackward(gate_up, dout, cpu_dgate_up);
    gpu().SwiGluBackward(gpu_gate_up, ToGpu(dout), gpu_dgate_up);
    EXPECT_LT(ErrorVsCpu(gpu_dgate_up, cpu_dgate_up), Tolerance(dtype())) << rows << "x" << hidden;
  }
}

// One rotary problem: qkv (batch, seq, (query + 2 kv) head_dim).
struct RotaryCase {
  int64_t batch, seq;
  AttentionHeads heads;
  int64_t head_dim;
};

const std::vector<RotaryCase>& RotaryCases() {
  static const std::vector<RotaryCase> cases = {
      {2, 9, {4, 2}, 16}, {1, 33, {3, 3}, 10}, {2, 40, {8, 1}, 64}, {1, 17, {4, 4}, 128}};
  return cases;
}

TEST_P(CudaLlamaTest, RotaryEmbeddingMatchesCpu) {
  RopeConfig llama3;
  llama3.theta = 500000.0;
  llama3.factor = 8.0;
  for (const RotaryCase& c : RotaryCases()) {
    const int64_t cols = (c.heads.query + 2 * int64_t{c.heads.kv}) * c.head_dim;
    for (const auto& [start, inverse, rope] :
         {std::tuple{int64_t{0}, false, RopeConfig{}}, std::tuple{int64_t{5}, false, RopeConfig{}},
          std::tuple{int64_t{1000}, true, RopeConfig{}}, std::tuple{int64_t{3}, false, llama3}}) {
      Tensor cpu_qkv = Random({c.batch, c.seq, cols}, 1.0f, dtype());
      Tensor gpu_qkv = ToGpu(cpu_qkv);
      cpu().RotaryEmbedding(cpu_qkv, Tensor(), start, c.heads, rope, inverse);
      gpu().RotaryEmbedding(gpu_qkv, Tensor(), start, c.heads, rope, inverse);
      EXPECT_LT(ErrorVsCpu(gpu_qkv, cpu_qkv), Tolerance(dtype()))
          << c.seq << " positions, D " << c.head_dim << ", start " << start;
    }
  }
}

// Packed documents: positions restart at each document's start.
TEST_P(CudaLlamaTest, RotaryEmbeddingWithSegmentStartsMatchesCpu) {
  const int64_t batch = 2, seq = 9, head_dim = 16;
  const AttentionHeads heads{4, 2};
  std::vector<int32_t> starts = {0, 0, 0, 3, 3, 5, 5, 5, 5, 0, 1, 1, 1, 1, 1, 1, 7, 7};
  const Tensor segments = Tensor::Wrap(starts.data(), {batch, seq}, DType::kI32);
  const Tensor gpu_segments = ToGpu(segments);
  for (bool inverse : {false, true}) {
    Tensor cpu_qkv = Random({batch, seq, 8 * head_dim}, 1.0f, dtype());
    Tensor gpu_qkv = ToGpu(cpu_qkv);
    cpu().RotaryEmbedding(cpu_qkv, segments, 0, heads, RopeConfig{}, inverse);
    gpu().RotaryEmbedding(gpu_qkv, gpu_segments, 0, heads, RopeConfig{}, inverse);
    EXPECT_LT(ErrorVsCpu(gpu_qkv, cpu_qkv), Tolerance(dtype())) << "inverse " << inverse;
  }
}

// The inverse turns by minus the angle: forward then inverse gives back the input, up to the
// two roundings to the storage dtype.
TEST_P(CudaLlamaTest, RotaryEmbeddingInverseUndoesTheForward) {
  for (const RotaryCase& c : RotaryCases()) {
    const int64_t cols = (c.heads.query + 2 * int64_t{c.heads.kv}) * c.head_dim;
    const Tensor input = Random({c.batch, c.seq, cols}, 1.0f, dtype());
    Tensor qkv = ToGpu(input);
    gpu().RotaryEmbedding(qkv, Tensor(), 7, c.heads, RopeConfig{}, false);
    gpu().RotaryEmbedding(qkv, Tensor(), 7, c.heads, RopeConfig{}, true);
    EXPECT_LT(ErrorVsCpu(qkv, input), Tolerance(dtype())) << "D " << c.head_dim;
  }
}

TEST_P(CudaLlamaTest, RepeatKvForwardAndBackwardMatchCpu) {
  // Groups of 1 (multi-head), 2 and 4, and multi-query (one key/value head); odd head sizes.
  for (const auto& [heads, head_dim] :
       {std::tuple{AttentionHeads{4, 4}, int64_t{16}},
        std::tuple{AttentionHeads{4, 2}, int64_t{10}}, std::tuple{AttentionHeads{8, 2}, int64_t{7}},
        std::tuple{AttentionHeads{6, 1}, int64_t{9}}}) {
    const int64_t batch = 2, seq = 13;
    const int64_t in_cols = (heads.query + 2 * int64_t{heads.kv}) * head_dim;
    const int64_t out_cols = 3 * heads.query * head_dim;
    const Tensor qkv = Random({batch, seq, in_cols}, 1.0f, dtype());
    Tensor cpu_out = HostZeros({batch, seq, out_cols}, dtype());
    cpu().RepeatKv(qkv, heads, cpu_out);
    Tensor gpu_out = GpuZeros({batch, seq, out_cols}, dtype());
    gpu().RepeatKv(ToGpu(qkv), heads, gpu_out);
    // A copy: the same bits.
    EXPECT_EQ(ErrorVsCpu(gpu_out, cpu_out), 0.0) << heads.query << "/" << heads.kv;

    const Tensor dout = Random({batch, seq, out_cols}, 1.0f, dtype());
    Tensor cpu_dqkv = Random({batch, seq, in_cols}, 1.0f, dtype());
    Tensor gpu_dqkv = ToGpu(cpu_dqkv);
    cpu().RepeatKvBackward(dout, heads, cpu_dqkv);
    gpu().RepeatKvBackward(ToGpu(dout), heads, gpu_dqkv);
    // The group's heads summed in head order in f32 on both: the same bits too.
    EXPECT_EQ(ErrorVsCpu(gpu_dqkv, cpu_dqkv), 0.0) << heads.query << "/" << heads.kv;
  }
}

// Qwen3's q/k norms take the query and key heads out of qkv and put them back: columns of a
// (B,T,W) tensor to and from a narrower one, the same bits on both backends.
TEST_P(CudaLlamaTest, CopyColumnsMatchesCpu) {
  const int64_t batch = 2, seq = 13, wide = 40, narrow = 24;
  const Tensor qkv = Random({batch, seq, wide}, 1.0f, dtype());
  Tensor cpu_part = HostZeros({batch * seq, narrow}, dtype());
  cpu().CopyColumns(qkv, 7, cpu_part, 0, narrow);
  Tensor gpu_part = GpuZeros({batch * seq, narrow}, dtype());
  gpu().CopyColumns(ToGpu(qkv), 7, gpu_part, 0, narrow);
  EXPECT_EQ(ErrorVsCpu(gpu_part, cpu_part), 0.0);
  Tensor cpu_back = Random({batch, seq, wide}, 1.0f, dtype());
  Tensor gpu_back = ToGpu(cpu_back);
  cpu().CopyColumns(cpu_part, 4, cpu_back, 16, narrow - 4);
  gpu().CopyColumns(gpu_part, 4, gpu_back, 16, narrow - 4);
  EXPECT_EQ(ErrorVsCpu(gpu_back, cpu_back), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaLlamaTest, BATON_ALL_FLOAT_DTYPES, DTypeName);

TEST_F(CudaVsCpuTest, RmsNormBackwardIsRepeatableBitForBit) {
  const int64_t rows = 1030, cols = 300;
  const Tensor x = ToGpu(Random({rows, cols}, 2.0f));
  const Tensor weight = ToGpu(Random({cols}));
  const Tensor dout = ToGpu(Random({rows, cols}));
  Tensor out = GpuZeros({rows, cols}), rstd = GpuZeros({rows});
  gpu().RmsNormForward(x, weight, kRmsEps, out, rstd);
  Tensor dx_first = GpuZeros({rows, cols}), dw_first = GpuZeros({cols});
  Tensor dx_second = GpuZeros({rows, cols}), dw_second = GpuZeros({cols});
  gpu().RmsNormBackward(dout, x, weight, rstd, dx_first, dw_first);
  gpu().RmsNormBackward(dout, x, weight, rstd, dx_second, dw_second);
  EXPECT_EQ(ErrorVsCpu(dx_first, ToCpu(dx_second)), 0.0);
  EXPECT_EQ(ErrorVsCpu(dw_first, ToCpu(dw_second)), 0.0);
}

// ---- meta mode: no GPU needed

class CudaMetaLlamaTest : public ::testing::Test {
 protected:
  Tensor Make(const Shape& shape, DType dtype = DType::kBF16) {
    return Tensor::Empty(meta_->allocator(), shape, dtype, MemCategory::kActivations);
  }
  // Workspace bytes booked at the peak of `call`, over what was booked before.
  template <typename Call>
  int64_t WorkspaceOf(Call call) {
    const int64_t before = ledger_.current(MemCategory::kWorkspace);
    ledger_.ResetPeaks();
    call();
    return ledger_.peak(MemCategory::kWorkspace) - before;
  }

  MemoryLedger ledger_;
  std::unique_ptr<Backend> meta_ = MakeCudaMetaBackend(ledger_, 0);
};

TEST_F(CudaMetaLlamaTest, OnlyRmsNormBackwardBooksWorkspaceItsWeightPartials) {
  const int64_t rows = 600, cols = 96;
  const Tensor x = Make({rows, cols}), weight = Make({cols}), dout = Make({rows, cols});
  Tensor out = Make({rows, cols}), rstd = Make({rows}, DType::kF32);
  Tensor dx = Make({rows, cols}), dweight = Make({cols}, DType::kF32);
  EXPECT_EQ(WorkspaceOf([&] { meta_->RmsNormForward(x, weight, kRmsEps, out, rstd); }), 0);
  EXPECT_EQ(WorkspaceOf([&] { meta_->RmsNormBackward(dout, x, weight, rstd, dx, dweight); }),
            ColumnSumsPartials(rows, cols) * 4);

  const Tensor gate_up = Make({rows, 2 * cols});
  Tensor swiglu_out = Make({rows, cols}), dgate_up = Make({rows, 2 * cols});
  EXPECT_EQ(WorkspaceOf([&] {
              meta_->SwiGluForward(gate_up, swiglu_out);
              meta_->SwiGluBackward(gate_up, swiglu_out, dgate_up);
            }),
            0);

  const AttentionHeads heads{8, 2};
  const int64_t head_dim = 16;
  Tensor qkv = Make({2, 30, 12 * head_dim}), repeated = Make({2, 30, 24 * head_dim});
  EXPECT_EQ(WorkspaceOf([&] {
              meta_->RotaryEmbedding(qkv, Tensor(), 4, heads, RopeConfig{}, false);
              meta_->RepeatKv(qkv, heads, repeated);
              meta_->RepeatKvBackward(repeated, heads, qkv);
            }),
            0);
}

TEST_F(CudaMetaLlamaTest, RejectsWhatTheCpuRejects) {
  const AttentionHeads heads{4, 2};
  Tensor qkv = Make({1, 5, 8 * 16});
  Tensor segments = Make({1, 5}, DType::kI32);
  // Packed documents take no start; negative starts are refused.
  EXPECT_THROW(meta_->RotaryEmbedding(qkv, segments, 2, heads, RopeConfig{}, false), Error);
  EXPECT_THROW(meta_->RotaryEmbedding(qkv, Tensor(), -1, heads, RopeConfig{}, false), Error);
  meta_->RotaryEmbedding(qkv, segments, 0, heads, RopeConfig{}, false);
  // Odd head sizes, head sizes past the kernel's, and key/value heads that don't divide.
  Tensor odd = Make({1, 5, 8 * 15});
  EXPECT_THROW(meta_->RotaryEmbedding(odd, Tensor(), 0, heads, RopeConfig{}, false), Error);
  Tensor huge = Make({1, 5, 8 * (kRopeMaxHeadDim + 2)});
  EXPECT_THROW(meta_->RotaryEmbedding(huge, Tensor(), 0, heads, RopeConfig{}, false), Error);
  EXPECT_THROW(meta_->RotaryEmbedding(qkv, Tensor(), 0, AttentionHeads{4, 3}, RopeConfig{}, false),
               Error);
  // RepeatKv copies bits: one dtype.
  Tensor f32_out = Make({1, 5, 12 * 16}, DType::kF32);
  EXPECT_THROW(meta_->RepeatKv(qkv, heads, f32_out), Error);
  // SwiGLU needs an even width; RMSNorm a positive eps.
  Tensor gate_up = Make({3, 7}), swiglu_out = Make({3, 3});
  EXPECT_THROW(meta_->SwiGluForward(gate_up, swiglu_out), Error);
  const Tensor x = Make({3, 8}), weight = Make({8});
  Tensor out = Make({3, 8}), rstd = Make({3}, DType::kF32);
  EXPECT_THROW(meta_->RmsNormForward(x, weight, 0.0f, out, rstd), Error);
}

}  // namespace
}  // namespace baton::cuda_test
