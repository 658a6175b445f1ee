// MeasureSgemmGflops (see gemm_peak.h).
#include "kernels/cpu/gemm_peak.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/thread_pool.h"

namespace baton {

double MeasureSgemmGflops(int m, int n, int k, int repeats, int threads) {
  BATON_CHECK(m > 0 && n > 0 && k > 0 && repeats > 0 && threads > 0,
              "MeasureSgemmGflops({}, {}, {}, {}, {})", m, n, k, repeats, threads);
  MemoryLedger ledger;
  CpuAllocator allocator(ledger);
  Tensor a = Tensor::Empty(allocator, {m, k}, DType::kF32, MemCategory::kWorkspace);
  Tensor b = Tensor::Empty(allocator, {k, n}, DType::kF32, MemCategory::kWorkspace);
  Tensor c = Tensor::Empty(allocator, {m, n}, DType::kF32, MemCategory::kWorkspace);
  // Small exact values: no denormals or overflow to slow anything down.
  for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = static_cast<float>(i % 7) * 0.125f;
  for (int64_t i = 0; i < b.numel(); ++i) b.data<float>()[i] = static_cast<float>(i % 5) * 0.25f;
  cpu::SetSingleThreadedBlas();
  cpu::ThreadPool pool(threads);
  const auto run = [&] {
    cpu::Sgemm(false, false, m, n, k, 1.0f, a.data<float>(), k, b.data<float>(), n, 0.0f,
               c.data<float>(), n, &pool);
  };
  run();
  double best_seconds = std::numeric_limits<double>::infinity();
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    run();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    best_seconds = std::min(best_seconds, elapsed.count());
  }
  const double flops = 2.0 * m * n * static_cast<double>(k);
  return flops / std::max(best_seconds, 1e-9) / 1e9;
}

}  // namespace baton
