// MeasureGemmGflops (see gemm_peak.h).
#include "kernels/cpu/gemm_peak.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "core/units.h"
#include "kernels/backend.h"

namespace baton {

double MeasureGemmGflops(int m, int n, int k, int repeats, int threads, DType dtype) {
  BATON_CHECK(m > 0 && n > 0 && k > 0 && repeats > 0 && threads > 0,
              "MeasureGemmGflops({}, {}, {}, {}, {})", m, n, k, repeats, threads);
  BATON_CHECK(dtype == DType::kF32 || dtype == DType::kBF16,
              "MeasureGemmGflops: f32 or bf16, not {}", Name(dtype));
  MemoryLedger ledger;
  const std::unique_ptr<Backend> backend = MakeCpuBackend(ledger, threads);
  Tensor a = Tensor::Empty(backend->allocator(), {m, k}, dtype, MemCategory::kWorkspace);
  Tensor b = Tensor::Empty(backend->allocator(), {k, n}, dtype, MemCategory::kWorkspace);
  Tensor c = Tensor::Empty(backend->allocator(), {m, n}, dtype, MemCategory::kWorkspace);
  // Small exact values: no denormals or overflow to slow anything down.
  const auto fill = [](Tensor& t, int period, float step) {
    std::vector<float> values(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % period) * step;
    ConvertFloats(values.data(), DType::kF32, t.raw(), t.dtype(), values.size());
  };
  fill(a, 7, 0.125f);
  fill(b, 5, 0.25f);
  const auto run = [&] { backend->Matmul(a, false, b, false, c, false, nullptr); };
  run();
  double best_seconds = std::numeric_limits<double>::infinity();
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    run();
    const double elapsed_s = Seconds(Clock::now() - start);
    best_seconds = std::min(best_seconds, elapsed_s);
  }
  const double flops = 2.0 * m * n * static_cast<double>(k);
  return flops / std::max(best_seconds, 1e-9) / 1e9;
}

}  // namespace baton
