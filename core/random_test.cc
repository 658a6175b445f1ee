#include "core/random.h"

#include <gtest/gtest.h>

#include <cmath>

namespace baton {
namespace {

TEST(RngTest, StreamsAreReproducibleAndDistinct) {
  Rng a = Rng::ForStream(42, {7, 1});
  Rng b = Rng::ForStream(42, {7, 1});
  Rng c = Rng::ForStream(42, {1, 7});
  const uint64_t first = a.NextU64();
  EXPECT_EQ(first, b.NextU64());
  EXPECT_NE(first, c.NextU64());
}

TEST(RngTest, NormalsHaveUnitVariance) {
  Rng rng(1);
  double sum = 0, sum_sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = rng.NextNormal();
    sum += x;
    sum_sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.02);
}

TEST(RngTest, StateRestoresTheSequence) {
  Rng rng(3);
  rng.NextNormal();
  const Rng::State saved = rng.state();
  const double expected = rng.NextNormal();
  rng.NextU64();
  rng.set_state(saved);
  EXPECT_EQ(rng.NextNormal(), expected);
}

TEST(RngTest, NextBelowStaysInRange) {
  Rng rng(5);
  for (int i = 0; i < 1000; ++i) EXPECT_LT(rng.NextBelow(7), 7u);
}

}  // namespace
}  // namespace baton
