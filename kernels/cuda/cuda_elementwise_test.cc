// CUDA memory, elementwise, reduction and optimizer methods against the CPU backend: Zero, Copy
// in every direction and dtype, Add/Accumulate/Scale, SumOfSquares, AllFinite and AdamW (bit for
// bit, since both run the same f32 operations without contraction).
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/cuda/cuda_test_util.h"

namespace baton::cuda_test {
namespace {

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

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaElementwiseTest, BATON_ALL_FLOAT_DTYPES, DTypeName);

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
