// Shared fixture for the GPU tests (ctest label gpu): a CUDA backend and the CPU backend as the
// reference, with helpers to move tensors between them and compare by normalised error.
//
// Without a GPU (or without a driver) every test skips visibly in SetUp:
//   [  SKIPPED ] no CUDA device: cudaGetDeviceCount: CUDA driver version is insufficient ...
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/testing/numeric_check.h"

namespace baton::cuda_test {

class CudaVsCpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (cuda::CudaDeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
    gpu_ = MakeCudaBackend(gpu_ledger_, 0);
    cpu_ = MakeCpuBackend(cpu_ledger_, 2);
  }

  Backend& gpu() { return *gpu_; }
  Backend& cpu() { return *cpu_; }

  // Host tensors (the CPU backend's allocator).
  Tensor Random(const Shape& shape, float stddev = 1.0f, DType dtype = DType::kF32) {
    return numeric_check::RandomNormal(cpu_->allocator(), shape, rng_, stddev, dtype);
  }
  Tensor HostZeros(const Shape& shape, DType dtype = DType::kF32) {
    return Tensor::Zeros(cpu_->allocator(), shape, dtype, MemCategory::kActivations);
  }
  Tensor HostValues(const Shape& shape, const std::vector<float>& values,
                    DType dtype = DType::kF32) {
    return numeric_check::FromFloats(cpu_->allocator(), shape, values, dtype);
  }
  // i32 ids uniform in [0, bound).
  Tensor Ids(const Shape& shape, int64_t bound) {
    Tensor t = Tensor::Empty(cpu_->allocator(), shape, DType::kI32, MemCategory::kActivations);
    for (int64_t i = 0; i < t.numel(); ++i) {
      t.data<int32_t>()[i] = static_cast<int32_t>(rng_.NextBelow(static_cast<uint64_t>(bound)));
    }
    return t;
  }
  Tensor HostClone(const Tensor& host) {
    Tensor c =
        Tensor::Empty(cpu_->allocator(), host.shape(), host.dtype(), MemCategory::kActivations);
    CopyHost(host, c);
    return c;
  }

  // A device copy of a host tensor (same dtype unless given).
  Tensor ToGpu(const Tensor& host) { return ToGpu(host, host.dtype()); }
  Tensor ToGpu(const Tensor& host, DType dtype) {
    Tensor d = Tensor::Empty(gpu_->allocator(), host.shape(), dtype, MemCategory::kActivations);
    gpu_->Copy(host, d);
    return d;
  }
  Tensor GpuZeros(const Shape& shape, DType dtype = DType::kF32) {
    Tensor d = Tensor::Empty(gpu_->allocator(), shape, dtype, MemCategory::kActivations);
    gpu_->Zero(d);
    return d;
  }
  // A host copy of a device tensor, in its dtype.
  Tensor ToCpu(const Tensor& device) {
    Tensor h =
        Tensor::Empty(cpu_->allocator(), device.shape(), device.dtype(), MemCategory::kActivations);
    gpu_->Copy(device, h);
    return h;
  }

  // ||gpu - cpu|| / ||cpu|| after bringing the GPU result to the host. Each comparison prints
  // one line, "[ vs CPU   ] Suite.Test ERROR", which the GPU check's summary collects
  // (scripts/gpu-checks.sh).
  double ErrorVsCpu(const Tensor& gpu_result, const Tensor& cpu_result) {
    const double error = numeric_check::NormalisedError(ToCpu(gpu_result), cpu_result);
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    std::printf("[ vs CPU   ] %s.%s %.3g\n", test->test_suite_name(), test->name(), error);
    return error;
  }

  // Normalised-error bounds, GPU vs CPU on the same inputs: f32 differs only in summation order;
  // 16-bit results also differ by an occasional last-bit rounding flip.
  static double Tolerance(DType dtype) {
    switch (dtype) {
      case DType::kBF16:
        return 1e-2;
      case DType::kF16:
        return 3e-3;
      default:
        return 2e-5;
    }
  }

  MemoryLedger cpu_ledger_;
  MemoryLedger gpu_ledger_;
  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<Backend> gpu_;
  Rng rng_{20240917};
};

// Parameterised over the activation dtype.
class CudaVsCpuDTypeTest : public CudaVsCpuTest, public ::testing::WithParamInterface<DType> {
 protected:
  DType dtype() const { return GetParam(); }
};

inline std::string DTypeName(const ::testing::TestParamInfo<DType>& info) {
  return std::string(Name(info.param));
}

#define BATON_ALL_FLOAT_DTYPES ::testing::Values(DType::kF32, DType::kBF16, DType::kF16)

}  // namespace baton::cuda_test
