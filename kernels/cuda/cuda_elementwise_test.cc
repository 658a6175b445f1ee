// CUDA memory, elementwise, reduction and optimizer methods against the CPU backend: Zero, Copy
// in every direction and dtype, Add/Accumulate/Scale, SumOfSquares, AllFinite, and AdamW with f32
// or 8-bit state (bit for bit, since both run the same f32 operations without contraction),
// DequantizeInt8 (INT8 weights), plus the 8-bit step's argument checks on a meta backend.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "core/error.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/quantize.h"

namespace baton::cuda_test {
namespace {

// The first element of two same-shaped host tensors whose bytes differ, or -1 (bit for bit,
// where a normalised error would equate -0 and +0).
int64_t FirstDifference(const Tensor& a, const Tensor& b) {
  const size_t element = SizeOf(a.dtype());
  const auto* pa = static_cast<const unsigned char*>(a.raw());
  const auto* pb = static_cast<const unsigned char*>(b.raw());
  for (int64_t i = 0; i < a.numel(); ++i) {
    const size_t offset = static_cast<size_t>(i) * element;
    if (std::memcmp(pa + offset, pb + offset, element) != 0) return i;
  }
  return -1;
}

using CudaElementwiseTest = CudaVsCpuDTypeTest;

TEST_P(CudaElementwiseTest, CopyRoundTripsThroughEveryDirectionAndDtype) {
  const Tensor host = Random({123, 7}, 1.0f, dtype());
  for (DType device_dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const Tensor device = ToGpu(host, device_dtype);  // host -> device, maybe converting
    Tensor cpu_converted = HostZeros({123, 7}, device_dtype);
    CopyHost(host, cpu_converted);
    EXPECT_EQ(numeric_check::NormalisedError(ToCpu(device), cpu_converted), 0.0)
        << Name(dtype()) << " -> " << Name(device_dtype);
    Tensor device_copy = GpuZeros({123, 7}, dtype());
    gpu().Copy(device, device_copy);  // device -> device cast
    Tensor back = HostZeros({123, 7}, DType::kF32);
    gpu().Copy(device_copy, back);  // device -> host, converting
    Tensor expected = HostZeros({123, 7}, dtype());
    CopyHost(cpu_converted, expected);
    EXPECT_EQ(numeric_check::NormalisedError(back, expected), 0.0);
  }
}

TEST_P(CudaElementwiseTest, ZeroAddAccumulateScaleMatchCpu) {
  const Tensor a = Random({1000, 13}, 1.0f, dtype());
  const Tensor b = Random({1000, 13}, 1.0f, DType::kF32);
  Tensor cpu_out = HostZeros({1000, 13}, dtype());
  cpu().Add(a, b, cpu_out);
  cpu().Accumulate(a, cpu_out);
  cpu().Scale(cpu_out, -0.75f);
  Tensor gpu_out = ToGpu(Random({1000, 13}, 1.0f, dtype()));
  gpu().Zero(gpu_out);
  EXPECT_EQ(numeric_check::NormalisedError(ToCpu(gpu_out), HostZeros({1000, 13}, dtype())), 0.0);
  const Tensor gpu_a = ToGpu(a);
  gpu().Add(gpu_a, ToGpu(b), gpu_out);
  gpu().Accumulate(gpu_a, gpu_out);
  gpu().Scale(gpu_out, -0.75f);
  EXPECT_EQ(ErrorVsCpu(gpu_out, cpu_out), 0.0);  // one rounding per op on both sides
}

TEST_P(CudaElementwiseTest, SumOfSquaresMatchesCpu) {
  for (int64_t n : {0, 1, 4095, 4097, 1000003}) {
    const Tensor t = Random({n}, 1.0f, dtype());
    const double expected = cpu().SumOfSquares(t);
    const double actual = gpu().SumOfSquares(ToGpu(t));
    EXPECT_NEAR(actual, expected, 1e-12 * std::max(1.0, expected)) << n;
  }
}

TEST_P(CudaElementwiseTest, AllFiniteFindsInfAndNan) {
  Tensor host = Random({5000}, 1.0f, DType::kF32);
  EXPECT_TRUE(gpu().AllFinite(ToGpu(host, dtype())));
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    Tensor poisoned = HostClone(host);
    poisoned.data<float>()[4321] = bad;
    EXPECT_FALSE(gpu().AllFinite(ToGpu(poisoned, dtype()))) << bad;
  }
}

TEST_P(CudaElementwiseTest, AdamWMatchesCpuBitForBit) {
  const int64_t n = 10007;
  const Tensor param = Random({n});
  const Tensor grad = Random({n}, 0.1f, dtype());
  Tensor cpu_param = HostClone(param);
  Tensor cpu_m = Random({n}, 0.01f);
  Tensor cpu_v = HostZeros({n});
  Tensor gpu_param = ToGpu(cpu_param), gpu_m = ToGpu(cpu_m), gpu_v = ToGpu(cpu_v);
  const Tensor gpu_grad = ToGpu(grad);
  AdamWConfig config;
  config.lr = 3e-4f;
  config.weight_decay = 0.1f;
  for (int64_t step = 1; step <= 3; ++step) {
    config.step = step;
    cpu().AdamW(cpu_param, grad, cpu_m, cpu_v, config, 0.5f);
    gpu().AdamW(gpu_param, gpu_grad, gpu_m, gpu_v, config, 0.5f);
  }
  EXPECT_EQ(ErrorVsCpu(gpu_param, cpu_param), 0.0);
  EXPECT_EQ(ErrorVsCpu(gpu_m, cpu_m), 0.0);
  EXPECT_EQ(ErrorVsCpu(gpu_v, cpu_v), 0.0);
}

// Three steps (different step numbers and grad scales) from quantised random moments, on a tensor
// whose last block is short and on one of several full blocks: param, codes and absmax agree.
TEST_P(CudaElementwiseTest, AdamW8bitMatchesCpuBitForBit) {
  for (const int64_t n : {3 * kQuantBlock + 17, int64_t{5000}}) {
    const int64_t blocks = QuantBlocks(n);
    Tensor cpu_param = Random({n});
    Tensor cpu_m = HostZeros({n}, DType::kU8), cpu_v = HostZeros({n}, DType::kU8);
    Tensor cpu_m_absmax = HostZeros({blocks}), cpu_v_absmax = HostZeros({blocks});
    const Tensor m_values = Random({n}, 0.01f);
    Tensor v_values = Random({n}, 0.01f);
    for (int64_t i = 0; i < n; ++i) v_values.data<float>()[i] *= v_values.data<float>()[i];
    QuantizeBlocks(m_values.data<float>(), n, SignedQuantMap(), cpu_m.data<uint8_t>(),
                   cpu_m_absmax.data<float>());
    QuantizeBlocks(v_values.data<float>(), n, UnsignedQuantMap(), cpu_v.data<uint8_t>(),
                   cpu_v_absmax.data<float>());
    Tensor gpu_param = ToGpu(cpu_param), gpu_m = ToGpu(cpu_m), gpu_v = ToGpu(cpu_v);
    Tensor gpu_m_absmax = ToGpu(cpu_m_absmax), gpu_v_absmax = ToGpu(cpu_v_absmax);
    AdamWConfig config;
    config.lr = 3e-4f;
    config.weight_decay = 0.1f;
    const struct {
      int64_t step;
      float grad_scale;
    } steps[] = {{1, 0.5f}, {2, 1.0f}, {10, 0.25f}};
    for (const auto& [step, grad_scale] : steps) {
      config.step = step;
      const Tensor grad = Random({n}, 0.1f, dtype());
      const Tensor gpu_grad = ToGpu(grad);
      cpu().AdamW8bit(cpu_param, grad, cpu_m, cpu_m_absmax, cpu_v, cpu_v_absmax, config,
                      grad_scale);
      gpu().AdamW8bit(gpu_param, gpu_grad, gpu_m, gpu_m_absmax, gpu_v, gpu_v_absmax, config,
                      grad_scale);
    }
    EXPECT_GT(cpu_m_absmax.data<float>()[blocks - 1], 0.0f) << n;  // the state is not all zero
    EXPECT_GT(cpu_v_absmax.data<float>()[blocks - 1], 0.0f) << n;
    EXPECT_EQ(ErrorVsCpu(gpu_param, cpu_param), 0.0) << n;
    EXPECT_EQ(FirstDifference(ToCpu(gpu_param), cpu_param), -1) << n;
    EXPECT_EQ(FirstDifference(ToCpu(gpu_m), cpu_m), -1) << n;
    EXPECT_EQ(FirstDifference(ToCpu(gpu_v), cpu_v), -1) << n;
    EXPECT_EQ(FirstDifference(ToCpu(gpu_m_absmax), cpu_m_absmax), -1) << n;
    EXPECT_EQ(FirstDifference(ToCpu(gpu_v_absmax), cpu_v_absmax), -1) << n;
  }
}

TEST_P(CudaElementwiseTest, DequantizeInt8MatchesCpuBitForBit) {
  const int64_t rows = 300, cols = 77;
  Tensor cpu_q = HostZeros({rows, cols}, DType::kI8);
  for (int64_t i = 0; i < cpu_q.numel(); ++i) {
    cpu_q.data<int8_t>()[i] = static_cast<int8_t>(i % 255 - 127);
  }
  Tensor cpu_scale = Random({cols}, 0.01f);
  Tensor cpu_out = HostZeros({rows, cols}, dtype());
  cpu().DequantizeInt8(cpu_q, cpu_scale, cpu_out);
  Tensor gpu_out = GpuZeros({rows, cols}, dtype());
  gpu().DequantizeInt8(ToGpu(cpu_q), ToGpu(cpu_scale), gpu_out);
  EXPECT_EQ(ErrorVsCpu(gpu_out, cpu_out), 0.0);
  EXPECT_EQ(FirstDifference(ToCpu(gpu_out), cpu_out), -1);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaElementwiseTest, BATON_ALL_FLOAT_DTYPES, DTypeName);

// Meta mode needs no GPU: the 8-bit step validates like the CPU's (one absmax per block of
// kQuantBlock elements, u8 codes) and books no workspace.
TEST(CudaMetaAdamW8bit, RejectsAbsmaxOfTheWrongLengthAndBooksNoWorkspace) {
  MemoryLedger ledger;
  const std::unique_ptr<Backend> meta = MakeCudaMetaBackend(ledger, 0);
  const auto make = [&](const Shape& shape, DType dtype) {
    return Tensor::Empty(meta->allocator(), shape, dtype, MemCategory::kActivations);
  };
  const int64_t n = 3 * kQuantBlock + 17;  // 4 blocks, the last short
  Tensor param = make({n}, DType::kF32);
  const Tensor grad = make({n}, DType::kBF16);
  Tensor m = make({n}, DType::kU8), v = make({n}, DType::kU8);
  Tensor m_absmax = make({4}, DType::kF32), v_absmax = make({4}, DType::kF32);
  AdamWConfig config;
  config.step = 1;
  const int64_t workspace = ledger.current(MemCategory::kWorkspace);
  ledger.ResetPeaks();
  meta->AdamW8bit(param, grad, m, m_absmax, v, v_absmax, config, 1.0f);
  EXPECT_EQ(ledger.peak(MemCategory::kWorkspace), workspace);

  Tensor too_few = make({3}, DType::kF32), too_many = make({5}, DType::kF32);
  EXPECT_THROW(meta->AdamW8bit(param, grad, m, too_few, v, v_absmax, config, 1.0f), Error);
  EXPECT_THROW(meta->AdamW8bit(param, grad, m, m_absmax, v, too_many, config, 1.0f), Error);
  Tensor f32_state = make({n}, DType::kF32);
  EXPECT_THROW(meta->AdamW8bit(param, grad, f32_state, m_absmax, v, v_absmax, config, 1.0f), Error);
  config.step = 0;
  EXPECT_THROW(meta->AdamW8bit(param, grad, m, m_absmax, v, v_absmax, config, 1.0f), Error);
}

TEST_F(CudaVsCpuTest, CopyOfIdsAndIntoSameTensor) {
  const Tensor ids = Ids({3, 5}, 1000);
  const Tensor device = ToGpu(ids);
  const Tensor back = ToCpu(device);
  for (int64_t i = 0; i < ids.numel(); ++i) {
    EXPECT_EQ(back.data<int32_t>()[i], ids.data<int32_t>()[i]);
  }
  Tensor same = device;
  gpu().Copy(device, same);  // a no-op, not an error
}

TEST_F(CudaVsCpuTest, RejectsTensorsOfAnotherDevice) {
  Tensor host = HostZeros({4});
  EXPECT_THROW(gpu().Zero(host), Error);
  Tensor device = GpuZeros({4});
  EXPECT_THROW(gpu().Add(host, device, device), Error);
}

}  // namespace
}  // namespace baton::cuda_test
