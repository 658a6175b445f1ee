// Device identification, the data-sheet peak table, and the measured bf16 GEMM rate (see
// device_peak.h).
#include "bench/gpu/device_peak.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "core/random.h"
#include "core/tensor.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"

namespace baton::gpu_bench {

double DataSheetBf16Tflops(const std::string& name) {
  // First match wins: more specific names first. Dense bf16, f32 accumulate, boost clock.
  static const std::pair<const char*, double> kTable[] = {
      {"GH200", 989.0},     {"H200 NVL", 835.0}, {"H200", 989.0}, {"H100 NVL", 835.0},
      {"H100 PCIe", 756.0}, {"H100", 989.0},     {"H800", 989.0}, {"B200", 2250.0},
      {"A100", 312.0},      {"A800", 312.0},     {"L40S", 362.0}, {"L4", 121.0},
      {"A10", 125.0},       {"A30", 165.0},
  };
  for (const auto& [pattern, tflops] : kTable) {
    if (name.find(pattern) != std::string::npos) return tflops;
  }
  return 0.0;
}

DeviceInfo QueryDevice(int device_index) {
  std::string why;
  const int count = cuda::CudaDeviceCount(&why);
  BATON_CHECK(count > device_index, "no CUDA device {}: {}", device_index,
              count == 0 ? why : fmt::format("{} devices", count));
  cudaDeviceProp props{};
  BATON_CUDA_CHECK(cudaGetDeviceProperties(&props, device_index));
  DeviceInfo info;
  info.name = props.name;
  info.multiprocessors = props.multiProcessorCount;
  info.memory_bytes = static_cast<int64_t>(props.totalGlobalMem);
  if (const char* env = std::getenv("BATON_PEAK_TFLOPS"); env != nullptr && *env != '\0') {
    info.peak_tflops = std::atof(env);
    info.peak_source = "BATON_PEAK_TFLOPS";
  } else {
    info.peak_tflops = DataSheetBf16Tflops(info.name);
    info.peak_source = info.peak_tflops > 0 ? "data sheet" : "unknown device";
  }
  return info;
}

GemmRate MeasureBf16Gemm(int device_index, int64_t n, int repeats) {
  MemoryLedger ledger;
  std::unique_ptr<Backend> gpu = MakeCudaBackend(ledger, device_index);
  // Inputs uniform in [-1, 1), rounded to bf16 on the device; the check reads them back.
  std::vector<float> host(static_cast<size_t>(n * n));
  Rng rng(7);
  Tensor a = Tensor::Empty(gpu->allocator(), {n, n}, DType::kBF16, MemCategory::kActivations);
  Tensor b = Tensor::Empty(gpu->allocator(), {n, n}, DType::kBF16, MemCategory::kActivations);
  for (Tensor* t : {&a, &b}) {
    for (float& v : host) v = static_cast<float>(rng.NextDouble() * 2.0 - 1.0);
    gpu->Copy(Tensor::Wrap(host.data(), {n, n}, DType::kF32), *t);
  }
  Tensor out = Tensor::Empty(gpu->allocator(), {n, n}, DType::kBF16, MemCategory::kActivations);
  gpu->Matmul(a, false, b, false, out, false);  // warm-up: algorithm choice, workspace
  gpu->Synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < repeats; ++r) gpu->Matmul(a, false, b, false, out, false);
  gpu->Synchronize();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  GemmRate rate;
  rate.size = n;
  rate.tflops = 2.0 * static_cast<double>(n) * n * n * repeats / seconds / 1e12;

  // Check 64 entries against double-precision dot products of the bf16 inputs (read back).
  const auto download = [&](const Tensor& t) {
    std::vector<float> values(static_cast<size_t>(n * n));
    Tensor view = Tensor::Wrap(values.data(), {n, n}, DType::kF32);
    gpu->Copy(t, view);
    return values;
  };
  const std::vector<float> ha = download(a), hb = download(b), ho = download(out);
  Rng pick(11);
  for (int check = 0; check < 64; ++check) {
    const auto i = static_cast<int64_t>(pick.NextBelow(static_cast<uint64_t>(n)));
    const auto j = static_cast<int64_t>(pick.NextBelow(static_cast<uint64_t>(n)));
    double ref = 0.0, squares = 0.0;
    for (int64_t k = 0; k < n; ++k) {
      const double term = static_cast<double>(ha[i * n + k]) * hb[k * n + j];
      ref += term;
      squares += term * term;
    }
    const double error = std::abs(ho[i * n + j] - ref) / (std::abs(ref) + std::sqrt(squares));
    rate.max_error = std::max(rate.max_error, error);
  }
  rate.correct = rate.max_error <= 1e-2;
  return rate;
}

}  // namespace baton::gpu_bench
