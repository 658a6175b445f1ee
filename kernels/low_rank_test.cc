// FactorLowRank: exact at full rank, exact on a matrix of that rank, the Eckart-Young error
// below it, and clear errors for ranks out of range.
#include "kernels/low_rank.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"

namespace baton {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> out(static_cast<size_t>(n));
  for (float& x : out) x = normal(rng);
  return out;
}

// ||W - U V||_F / ||W||_F, in double.
double RelativeError(const std::vector<float>& w, const LowRankFactors& f, int64_t in, int64_t out,
                     int64_t rank) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < in; ++i) {
    for (int64_t j = 0; j < out; ++j) {
      double uv = 0;
      for (int64_t l = 0; l < rank; ++l)
        uv += static_cast<double>(f.u[static_cast<size_t>(i * rank + l)]) *
              f.v[static_cast<size_t>(l * out + j)];
      const double x = w[static_cast<size_t>(i * out + j)];
      diff += (x - uv) * (x - uv);
      norm += x * x;
    }
  }
  return std::sqrt(diff / norm);
}

TEST(LowRankTest, FullRankReproducesTheMatrix) {
  for (auto [in, out] : {std::pair<int64_t, int64_t>{12, 40}, {40, 12}, {16, 16}}) {
    const std::vector<float> w = Random(in * out, 1);
    const int64_t k = std::min(in, out);
    const LowRankFactors f = FactorLowRank(w.data(), in, out, k);
    ASSERT_EQ(f.u.size(), static_cast<size_t>(in * k));
    ASSERT_EQ(f.v.size(), static_cast<size_t>(k * out));
    EXPECT_LT(RelativeError(w, f, in, out, k), 1e-6) << in << "x" << out;
  }
}

TEST(LowRankTest, TruncationErrorIsTheDroppedSingularValues) {
  const int64_t in = 24, out = 48, rank = 6;
  const std::vector<float> w = Random(in * out, 2);
  const LowRankFactors f = FactorLowRank(w.data(), in, out, rank);
  ASSERT_EQ(f.singular_values.size(), 24u);
  for (size_t i = 1; i < f.singular_values.size(); ++i)
    EXPECT_GE(f.singular_values[i - 1], f.singular_values[i]);
  double dropped = 0, all = 0;
  for (size_t i = 0; i < f.singular_values.size(); ++i) {
    const double s2 = f.singular_values[i] * f.singular_values[i];
    all += s2;
    if (i >= static_cast<size_t>(rank)) dropped += s2;
  }
  EXPECT_NEAR(RelativeError(w, f, in, out, rank), std::sqrt(dropped / all), 1e-5);
}

TEST(LowRankTest, AMatrixOfRankRIsFactoredExactlyAtR) {
  const int64_t in = 20, out = 30, r = 4;
  const std::vector<float> a = Random(in * r, 3), b = Random(r * out, 4);
  std::vector<float> w(static_cast<size_t>(in * out), 0.0f);
  for (int64_t i = 0; i < in; ++i)
    for (int64_t j = 0; j < out; ++j)
      for (int64_t l = 0; l < r; ++l)
        w[static_cast<size_t>(i * out + j)] +=
            a[static_cast<size_t>(i * r + l)] * b[static_cast<size_t>(l * out + j)];
  const LowRankFactors f = FactorLowRank(w.data(), in, out, r);
  EXPECT_LT(RelativeError(w, f, in, out, r), 1e-6);
  EXPECT_LT(f.singular_values[r] / f.singular_values[0], 1e-6);  // nothing left below rank r
}

TEST(LowRankTest, RanksOutOfRangeAreRefused) {
  const std::vector<float> w = Random(8 * 4, 5);
  EXPECT_THROW(FactorLowRank(w.data(), 8, 4, 0), Error);
  EXPECT_THROW(FactorLowRank(w.data(), 8, 4, 5), Error);
}

}  // namespace
}  // namespace baton
