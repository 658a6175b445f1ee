// Magnitude pruning masks: exactly the smallest weights (unstructured), exactly 2 of every 4
// consecutive inputs per output channel (2:4), deterministic ties.
#include "model/prune.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/random.h"

namespace baton {
namespace {

TEST(PruneTest, UnstructuredRemovesTheSmallestMagnitudesExactly) {
  const std::vector<float> w = {0.5f, -0.1f, 0.3f, -0.7f, 0.1f, 0.0f, 2.0f, -0.3f};
  // Half: the four smallest |w| are 0.0, 0.1 (index 1), 0.1 (index 4), then 0.3 (index 2 before 7).
  EXPECT_EQ(MagnitudeMask(w.data(), 2, 4, 0.5, PrunePattern::kUnstructured),
            (std::vector<uint8_t>{1, 0, 0, 1, 0, 0, 1, 1}));
  EXPECT_EQ(MagnitudeMask(w.data(), 2, 4, 0.25, PrunePattern::kUnstructured),
            (std::vector<uint8_t>{1, 0, 1, 1, 1, 0, 1, 1}));
  Rng rng(3);
  std::vector<float> big(96 * 40);
  for (float& x : big) x = static_cast<float>(rng.NextNormal());
  for (double sparsity : {0.5, 0.9, 0.3}) {
    const std::vector<uint8_t> keep =
        MagnitudeMask(big.data(), 96, 40, sparsity, PrunePattern::kUnstructured);
    int64_t pruned = 0;
    float largest_pruned = 0, smallest_kept = 1e9f;
    for (size_t i = 0; i < keep.size(); ++i) {
      if (keep[i] == 0) {
        ++pruned;
        largest_pruned = std::max(largest_pruned, std::abs(big[i]));
      } else {
        smallest_kept = std::min(smallest_kept, std::abs(big[i]));
      }
    }
    EXPECT_EQ(pruned, std::llround(96 * 40 * sparsity)) << sparsity;
    EXPECT_LE(largest_pruned, smallest_kept) << sparsity;
  }
}

TEST(PruneTest, TwoOfFourKeepsTheTwoLargestOfEachFourInputsPerColumn) {
  // (8, 2): column 0 groups {1, -4, 3, 2} and {0, 0, 5, -5}; column 1 all equal.
  const std::vector<float> w = {1, 7, -4, 7, 3, 7, 2, 7, 0, 7, 0, 7, 5, 7, -5, 7};
  const std::vector<uint8_t> keep = MagnitudeMask(w.data(), 8, 2, 0.5, PrunePattern::k2of4);
  EXPECT_EQ(keep, (std::vector<uint8_t>{0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 1, 1, 0, 1, 0}));
  EXPECT_THROW(MagnitudeMask(w.data(), 8, 2, 0.3, PrunePattern::k2of4), Error);
  EXPECT_THROW(MagnitudeMask(w.data(), 2, 8, 0.5, PrunePattern::k2of4), Error);
}

}  // namespace
}  // namespace baton
