// Magnitude pruning (see prune.h).
#include "model/prune.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "model/int8_weights.h"

namespace baton {

std::vector<uint8_t> MagnitudeMask(const float* w, int64_t rows, int64_t cols, double sparsity,
                                   PrunePattern pattern) {
  BATON_CHECK(rows > 0 && cols > 0 && sparsity >= 0.0 && sparsity < 1.0,
              "cannot prune a {}x{} matrix to sparsity {}", rows, cols, sparsity);
  const int64_t n = rows * cols;
  std::vector<uint8_t> keep(static_cast<size_t>(n), 1);
  if (pattern == PrunePattern::k2of4) {
    BATON_CHECK(rows % 4 == 0 && sparsity == 0.5,
                "2:4 pruning needs rows divisible by 4 and sparsity 0.5, got {} rows, sparsity {}",
                rows, sparsity);
    for (int64_t c = 0; c < cols; ++c) {
      for (int64_t r0 = 0; r0 < rows; r0 += 4) {
        int64_t order[4] = {r0, r0 + 1, r0 + 2, r0 + 3};
        // Largest first; a stable sort keeps the lower row ahead on equal magnitudes.
        std::stable_sort(order, order + 4, [&](int64_t a, int64_t b) {
          return std::abs(w[a * cols + c]) > std::abs(w[b * cols + c]);
        });
        keep[static_cast<size_t>(order[2] * cols + c)] = 0;
        keep[static_cast<size_t>(order[3] * cols + c)] = 0;
      }
    }
    return keep;
  }
  const int64_t pruned = std::llround(static_cast<double>(n) * sparsity);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // Smallest first; a stable sort puts the lower index first on equal magnitudes.
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return std::abs(w[a]) < std::abs(w[b]); });
  for (int64_t i = 0; i < pruned; ++i) keep[static_cast<size_t>(order[static_cast<size_t>(i)])] = 0;
  return keep;
}

bool TakesPruneMask(const Param& param) { return TakesInt8Weights(param) && !param.tied; }

void AllocatePruneMasks(Backend& backend, const std::vector<Param*>& params) {
  for (Param* p : params) {
    if (!TakesPruneMask(*p)) continue;
    p->mask =
        Tensor::Empty(backend.allocator(), p->value.shape(), DType::kU8, MemCategory::kParams);
    if (IsMeta(backend)) continue;
    const std::vector<uint8_t> ones(static_cast<size_t>(p->mask.numel()), 1);
    backend.Copy(Tensor::Wrap(const_cast<uint8_t*>(ones.data()), p->mask.shape(), DType::kU8),
                 p->mask);
    backend.Synchronize();
  }
}

}  // namespace baton
