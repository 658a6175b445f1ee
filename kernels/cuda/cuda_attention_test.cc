// CUDA causal attention against the CPU backend: out and probs forward, dqkv backward
// (accumulating), in f32/bf16/f16, for sequence lengths that are and are not multiples of the
// warp size, with an out dtype differing from qkv's (the f32 path), and bit-for-bit repeatable.
#include <algorithm>
#include <tuple>

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

}  // namespace
}  // namespace baton::cuda_test
