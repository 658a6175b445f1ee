// CUDA Matmul (cuBLASLt) and BiasBackward against the CPU backend: every transpose combination,
// overwrite and accumulate, the bias epilogue, f32/bf16/f16, mixed dtypes (staged through f32),
// empty inner dimension, unaligned views, TF32 opt-in, and repeatability.
#include <tuple>

#include "kernels/cuda/cuda_test_util.h"

namespace baton::cuda_test {
namespace {

class CudaMatmulTest : public CudaVsCpuTest,
                       public ::testing::WithParamInterface<std::tuple<bool, bool, DType>> {
 protected:
  bool trans_a() const { return std::get<0>(GetParam()); }
  bool trans_b() const { return std::get<1>(GetParam()); }
  DType dtype() const { return std::get<2>(GetParam()); }
  Shape AShape(int64_t m, int64_t k) const { return trans_a() ? Shape{k, m} : Shape{m, k}; }
  Shape BShape(int64_t k, int64_t n) const { return trans_b() ? Shape{n, k} : Shape{k, n}; }

  // Runs the same Matmul on both backends and returns the normalised error of the GPU's out.
  double Compare(int64_t m, int64_t n, int64_t k, bool accumulate, bool with_bias) {
    const Tensor a = Random(AShape(m, k), 1.0f, dtype());
    const Tensor b = Random(BShape(k, n), 1.0f, dtype());
    const Tensor bias = Random({n}, 1.0f, dtype());
    Tensor cpu_out = Random({m, n}, 1.0f, dtype());
    Tensor gpu_out = ToGpu(cpu_out);
    const Tensor gpu_a = ToGpu(a), gpu_b = ToGpu(b), gpu_bias = ToGpu(bias);
    cpu().Matmul(a, trans_a(), b, trans_b(), cpu_out, accumulate, with_bias ? &bias : nullptr);
    gpu().Matmul(gpu_a, trans_a(), gpu_b, trans_b(), gpu_out, accumulate,
                 with_bias ? &gpu_bias : nullptr);
    return ErrorVsCpu(gpu_out, cpu_out);
  }
};

TEST_P(CudaMatmulTest, MatchesCpu) {
  for (auto [m, n, k] : {std::tuple{7, 5, 9}, std::tuple{128, 96, 64}, std::tuple{67, 45, 81},
                         std::tuple{1, 130, 3}, std::tuple{256, 768, 192}}) {
    EXPECT_LT(Compare(m, n, k, false, false), Tolerance(dtype())) << m << "x" << n << "x" << k;
  }
}

TEST_P(CudaMatmulTest, AccumulateMatchesCpu) {
  EXPECT_LT(Compare(33, 17, 40, true, false), Tolerance(dtype()));
}

TEST_P(CudaMatmulTest, BiasEpilogueMatchesCpu) {
  EXPECT_LT(Compare(64, 48, 32, false, true), Tolerance(dtype()));
  EXPECT_LT(Compare(9, 7, 5, true, true), Tolerance(dtype()));
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, CudaMatmulTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            BATON_ALL_FLOAT_DTYPES),
                         [](const ::testing::TestParamInfo<std::tuple<bool, bool, DType>>& info) {
                           return std::string(std::get<0>(info.param) ? "T" : "N") +
                                  (std::get<1>(info.param) ? "T" : "N") + "_" +
                                  std::string(Name(std::get<2>(info.param)));
                         });

TEST_F(CudaVsCpuTest, MatmulWithMixedDtypesIsStagedThroughF32) {
  // a bf16, b f32, out bf16: no cuBLASLt combination; bf16 x bf16 -> f32 is native.
  for (auto [da, db, dout] : {std::tuple{DType::kBF16, DType::kF32, DType::kBF16},
                              std::tuple{DType::kBF16, DType::kBF16, DType::kF32},
                              std::tuple{DType::kF32, DType::kF32, DType::kF16},
                              std::tuple{DType::kF16, DType::kBF16, DType::kF32}}) {
    const Tensor a = Random({20, 30}, 1.0f, da);
    const Tensor b = Random({30, 10}, 1.0f, db);
    const Tensor bias = Random({10}, 1.0f, DType::kF32);
    Tensor cpu_out = Random({20, 10}, 1.0f, dout);
    Tensor gpu_out = ToGpu(cpu_out);
    const Tensor gpu_bias = ToGpu(bias);
    cpu().Matmul(a, false, b, false, cpu_out, /*accumulate=*/true, &bias);
    gpu().Matmul(ToGpu(a), false, ToGpu(b), false, gpu_out, /*accumulate=*/true, &gpu_bias);
    EXPECT_LT(ErrorVsCpu(gpu_out, cpu_out), 1e-2) << Name(da) << Name(db) << Name(dout);
  }
}

TEST_F(CudaVsCpuTest, MatmulWithEmptyInnerDimensionWritesBiasOrZero) {
  const Tensor a = Random({4, 0});
  const Tensor b = Random({0, 3});
  const Tensor bias = Random({3});
  Tensor cpu_out = Random({4, 3});
  Tensor gpu_out = ToGpu(cpu_out);
  cpu().Matmul(a, false, b, false, cpu_out, false, &bias);
  const Tensor gpu_bias = ToGpu(bias);
  gpu().Matmul(ToGpu(a), false, ToGpu(b), false, gpu_out, false, &gpu_bias);
  EXPECT_EQ(ErrorVsCpu(gpu_out, cpu_out), 0.0);
}

TEST_F(CudaVsCpuTest, MatmulOnUnalignedRowSlices) {
  // Rows 1.. of a 16-bit tensor start 2 * 37 bytes in: cuBLASLt must be told the alignment.
  const Tensor a_full = Random({9, 37}, 1.0f, DType::kBF16);
  const Tensor b = Random({37, 11}, 1.0f, DType::kBF16);
  const Tensor a = a_full.Slice(0, 1, 9);
  Tensor cpu_out = HostZeros({8, 11});
  cpu().Matmul(HostClone(a), false, b, false, cpu_out, false);
  const Tensor gpu_a_full = ToGpu(a_full);
  Tensor gpu_out = GpuZeros({8, 11});
  gpu().Matmul(gpu_a_full.Slice(0, 1, 9), false, ToGpu(b), false, gpu_out, false);
  EXPECT_LT(ErrorVsCpu(gpu_out, cpu_out), 1e-5);
}

TEST_F(CudaVsCpuTest, MatmulIsRepeatableBitForBit) {
  const Tensor a = ToGpu(Random({300, 200}));
  const Tensor b = ToGpu(Random({200, 500}));
  Tensor first = GpuZeros({300, 500});
  Tensor second = GpuZeros({300, 500});
  gpu().Matmul(a, false, b, false, first, false);
  gpu().Matmul(a, false, b, false, second, false);
  EXPECT_EQ(ErrorVsCpu(first, ToCpu(second)), 0.0);
}

TEST_F(CudaVsCpuTest, Tf32IsOffByDefaultAndLooserWhenOn) {
  const Tensor a = Random({256, 256});
  const Tensor b = Random({256, 256});
  Tensor cpu_out = HostZeros({256, 256});
  cpu().Matmul(a, false, b, false, cpu_out, false);
  MemoryLedger ledger;
  cuda::CudaBackendOptions options;
  options.allow_tf32 = true;
  std::unique_ptr<Backend> tf32 = MakeCudaBackend(ledger, 0, options);
  Tensor ta = Tensor::Empty(tf32->allocator(), a.shape(), DType::kF32, MemCategory::kActivations);
  Tensor tb = Tensor::Empty(tf32->allocator(), b.shape(), DType::kF32, MemCategory::kActivations);
  Tensor tout =
      Tensor::Empty(tf32->allocator(), {256, 256}, DType::kF32, MemCategory::kActivations);
  tf32->Copy(a, ta);
  tf32->Copy(b, tb);
  tf32->Matmul(ta, false, tb, false, tout, false);
  Tensor host = HostZeros({256, 256});
  tf32->Copy(tout, host);
  EXPECT_LT(numeric_check::NormalisedError(host, cpu_out), 5e-3);  // 10-bit mantissa inputs
  Tensor exact = GpuZeros({256, 256});
  gpu().Matmul(ToGpu(a), false, ToGpu(b), false, exact, false);
  EXPECT_LT(ErrorVsCpu(exact, cpu_out), 1e-6);
}

TEST_F(CudaVsCpuTest, CublasFallbackMatchesCpu) {
  // The path a problem takes when cuBLASLt has no algorithm for it, forced for every GEMM.
  MemoryLedger ledger;
  cuda::CudaBackendOptions options;
  options.force_cublas = true;
  std::unique_ptr<Backend> blas = MakeCudaBackend(ledger, 0, options);
  const auto to_blas = [&](const Tensor& host) {
    Tensor t =
        Tensor::Empty(blas->allocator(), host.shape(), host.dtype(), MemCategory::kActivations);
    blas->Copy(host, t);
    return t;
  };
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (bool trans_a : {false, true}) {
      for (bool trans_b : {false, true}) {
        const Tensor a = Random(trans_a ? Shape{19, 23} : Shape{23, 19}, 1.0f, dtype);
        const Tensor b = Random(trans_b ? Shape{11, 19} : Shape{19, 11}, 1.0f, dtype);
        const Tensor bias = Random({11}, 1.0f, dtype);
        Tensor cpu_out = Random({23, 11}, 1.0f, dtype);
        Tensor blas_out = to_blas(cpu_out);
        const Tensor blas_bias = to_blas(bias);
        cpu().Matmul(a, trans_a, b, trans_b, cpu_out, /*accumulate=*/true, &bias);
        blas->Matmul(to_blas(a), trans_a, to_blas(b), trans_b, blas_out, true, &blas_bias);
        Tensor host = HostZeros({23, 11}, dtype);
        blas->Copy(blas_out, host);
        EXPECT_LT(numeric_check::NormalisedError(host, cpu_out), Tolerance(dtype))
            << Name(dtype) << trans_a << trans_b;
      }
    }
    // Attention's strided batches over heads.
    const Tensor qkv = Random({2, 21, 3 * 16}, 1.0f, dtype);
    Tensor cpu_out = HostZeros({2, 21, 16}, dtype), cpu_probs = HostZeros({2, 4, 21, 21});
    cpu().AttentionForward(qkv, 4, cpu_out, cpu_probs);
    Tensor blas_out = to_blas(cpu_out), blas_probs = to_blas(cpu_probs);
    blas->AttentionForward(to_blas(qkv), 4, blas_out, blas_probs);
    Tensor host = HostZeros({2, 21, 16}, dtype);
    blas->Copy(blas_out, host);
    EXPECT_LT(numeric_check::NormalisedError(host, cpu_out), Tolerance(dtype)) << Name(dtype);
  }
}

using CudaBiasBackwardTest = CudaVsCpuDTypeTest;

TEST_P(CudaBiasBackwardTest, MatchesCpu) {
  for (auto [rows, cols] : {std::tuple{5, 3}, std::tuple{1000, 77}, std::tuple{4096, 768}}) {
    const Tensor dout = Random({rows, cols}, 1.0f, dtype());
    Tensor cpu_dbias = Random({cols}, 1.0f, dtype());
    Tensor gpu_dbias = ToGpu(cpu_dbias);
    cpu().BiasBackward(dout, cpu_dbias);
    gpu().BiasBackward(ToGpu(dout), gpu_dbias);
    EXPECT_LT(ErrorVsCpu(gpu_dbias, cpu_dbias), Tolerance(dtype())) << rows << "x" << cols;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaBiasBackwardTest, BATON_ALL_FLOAT_DTYPES, DTypeName);

}  // namespace
}  // namespace baton::cuda_test
