#include "planner/partitioner.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

double MaxPart(const std::vector<double>& costs, const std::vector<LayerRange>& ranges) {
  double worst = 0;
  for (const LayerRange& r : ranges) {
    double sum = 0;
    for (int i = r.first; i <= r.last; ++i) sum += costs[static_cast<size_t>(i)];
    worst = std::max(worst, sum);
  }
  return worst;
}

TEST(PartitionLayersTest, RangesAreContiguousNonEmptyAndCoverEveryLayer) {
  const std::vector<double> costs = {3, 1, 4, 1, 5, 9, 2, 6};
  for (int parts = 1; parts <= 8; ++parts) {
    const auto ranges = PartitionLayers(costs, parts);
    ASSERT_EQ(static_cast<int>(ranges.size()), parts);
    EXPECT_EQ(ranges.front().first, 0);
    EXPECT_EQ(ranges.back().last, 7);
    for (size_t i = 0; i < ranges.size(); ++i) {
      EXPECT_LE(ranges[i].first, ranges[i].last);
      if (i > 0) {
        EXPECT_EQ(ranges[i].first, ranges[i - 1].last + 1);
      }
    }
  }
}

TEST(PartitionLayersTest, MinimisesTheLargestPartAgainstBruteForce) {
  const std::vector<double> costs = {3, 1, 4, 1, 5, 9, 2, 6, 5};
  const int n = static_cast<int>(costs.size());
  // Every way to cut 9 layers into 3 parts.
  double best = 1e9;
  for (int a = 1; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      best = std::min(best, MaxPart(costs, {{0, a - 1}, {a, b - 1}, {b, n - 1}}));
    }
  }
  EXPECT_EQ(MaxPart(costs, PartitionLayers(costs, 3)), best);
}

TEST(PartitionLayersTest, HeavyEndsGetFewerLayers) {
  // An embedding and a head that each cost as much as three blocks.
  const std::vector<double> costs = {3, 1, 1, 1, 1, 1, 1, 3};
  const auto ranges = PartitionLayers(costs, 4);
  EXPECT_EQ(ranges.front(), (LayerRange{0, 0}));
  EXPECT_EQ(ranges.back(), (LayerRange{7, 7}));
}

TEST(PartitionLayersTest, ShareGroupsStayWholeWhenBalanceAllows) {
  // embedding, 4 blocks in groups {1,2} {3,4}, head.
  const std::vector<double> costs = {0.1, 1, 1, 1, 1, 1};
  const std::vector<std::vector<int>> groups = {{1, 2}, {3, 4}};
  // The best cut without groups is [0-2][3-5]: 2.1 vs 3, kept whole too.
  EXPECT_EQ(PartitionKeepingGroups(costs, 2, groups), (std::vector<LayerRange>{{0, 2}, {3, 5}}));
  // Three parts: the best cut [0-1][2-3][4-5] (max 2) splits both groups; the best whole one,
  // [0-2][3-4][5] (max 2.1), is within the 25% tolerance.
  EXPECT_EQ(PartitionKeepingGroups(costs, 3, groups),
            (std::vector<LayerRange>{{0, 2}, {3, 4}, {5, 5}}));
  // One group of all four blocks on two stages: whole costs 4.1 against 3: the best cut wins.
  EXPECT_EQ(PartitionKeepingGroups(costs, 2, {{1, 2, 3, 4}}), PartitionLayers(costs, 2));
  EXPECT_EQ(PartitionKeepingGroups(costs, 2, {}), PartitionLayers(costs, 2));
}

TEST(PartitionLayersTest, MoreStagesThanLayersIsAClearError) {
  try {
    PartitionLayers({1, 1, 1}, 4);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("cannot cut a 3-layer graph into 4"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace baton
