// baton generate's draw (launcher/sampling.h): greedy, top-k, the nucleus, determinism.
#include "launcher/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/error.h"

namespace baton {
namespace {

// Logits whose softmax at temperature 1 is {0.5, 0.3, 0.15, 0.05}, listed out of order: token
// 2 is the likeliest, then 0, 3, 1.
std::vector<float> Logits() {
  return {static_cast<float>(std::log(0.3)), static_cast<float>(std::log(0.05)),
          static_cast<float>(std::log(0.5)), static_cast<float>(std::log(0.15))};
}

// How often each token is drawn in `n` draws from seed 7.
std::map<int, int> Draws(const SamplingOptions& options, int n = 4000) {
  SplitMix64 rng(7);
  std::map<int, int> counts;
  for (int i = 0; i < n; ++i) ++counts[SampleToken(Logits(), options, rng)];
  return counts;
}

TEST(SamplingTest, TemperatureZeroAndTopOneAreTheArgmaxTiesByLowestId) {
  SplitMix64 rng(1);
  EXPECT_EQ(SampleToken(Logits(), {.temperature = 0, .top_k = 40, .top_p = 1}, rng), 2);
  EXPECT_EQ(SampleToken({1, 3, 3, 2}, {.temperature = 0, .top_k = 0, .top_p = 1}, rng), 1);
  EXPECT_EQ(Draws({.temperature = 1, .top_k = 1, .top_p = 1}), (std::map<int, int>{{2, 4000}}));
}

TEST(SamplingTest, TheNucleusKeepsTheFewestLikeliestReachingP) {
  // 0.5 + 0.3 = 0.8 reaches 0.79: tokens 2 and 0 only, in proportion 0.5 : 0.3.
  const std::map<int, int> two = Draws({.temperature = 1, .top_k = 0, .top_p = 0.79});
  ASSERT_EQ(two.size(), 2u);
  EXPECT_NEAR(two.at(2) / 4000.0, 0.5 / 0.8, 0.03);
  // 0.81 needs the third (0.15).
  const std::map<int, int> three = Draws({.temperature = 1, .top_k = 0, .top_p = 0.81});
  ASSERT_EQ(three.size(), 3u);
  EXPECT_NEAR(three.at(3) / 4000.0, 0.15 / 0.95, 0.03);
  // A p below the likeliest's share keeps that one alone; 1 keeps every token.
  EXPECT_EQ(Draws({.temperature = 1, .top_k = 0, .top_p = 0.1}), (std::map<int, int>{{2, 4000}}));
  EXPECT_EQ(Draws({.temperature = 1, .top_k = 0, .top_p = 1}).size(), 4u);
  // top_k first: of the two likeliest, 0.79 of their mass needs both; 0.6 the first alone.
  EXPECT_EQ(Draws({.temperature = 1, .top_k = 2, .top_p = 0.79}).size(), 2u);
  EXPECT_EQ(Draws({.temperature = 1, .top_k = 2, .top_p = 0.6}).size(), 1u);
}

TEST(SamplingTest, TheSameSeedDrawsTheSameTokens) {
  const SamplingOptions options{.temperature = 0.8, .top_k = 3, .top_p = 0.9};
  EXPECT_EQ(Draws(options, 200), Draws(options, 200));
  SplitMix64 a(3), b(3);
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(SampleToken(Logits(), options, a), SampleToken(Logits(), options, b)) << i;
  }
}

TEST(SamplingTest, OptionsOutOfRangeNameTheirFlag) {
  EXPECT_NO_THROW(CheckSamplingOptions({}));
  for (const double p : {0.0, -0.5, 1.5, std::nan("")}) {
    try {
      CheckSamplingOptions({.temperature = 1, .top_k = 0, .top_p = p});
      ADD_FAILURE() << "top_p " << p << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--top-p"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(CheckSamplingOptions({.temperature = -1, .top_k = 0, .top_p = 1}), Error);
  EXPECT_THROW(CheckSamplingOptions({.temperature = 1, .top_k = -1, .top_p = 1}), Error);
}

}  // namespace
}  // namespace baton
