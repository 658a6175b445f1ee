#include "core/cpu_affinity.h"

#include <gtest/gtest.h>

#include <thread>

namespace baton {
namespace {

TEST(PinnedCpus, LocalRankKTakesTheKthBlockOfAllowedCpus) {
  const std::vector<int> allowed = {0, 2, 3, 5, 6, 7};
  EXPECT_EQ(PinnedCpus(allowed, 0, 1), (std::vector<int>{0}));
  EXPECT_EQ(PinnedCpus(allowed, 1, 1), (std::vector<int>{2}));
  EXPECT_EQ(PinnedCpus(allowed, 1, 2), (std::vector<int>{3, 5}));
  EXPECT_EQ(PinnedCpus(allowed, 2, 2), (std::vector<int>{6, 7}));
}

TEST(PinnedCpus, NothingWhenTheBlockIsNotThere) {
  EXPECT_EQ(PinnedCpus({0, 1}, 2, 1), std::nullopt);
  EXPECT_EQ(PinnedCpus({0, 1, 2}, 1, 2), std::nullopt);
}

TEST(PinProcessToCpus, PinsRunningThreadsAndThoseStartedLater) {
  const std::vector<int> allowed = AllowedCpus();
  ASSERT_FALSE(allowed.empty());
  PinProcessToCpus({allowed.back()});
  std::vector<int> seen;
  std::thread([&] { seen = AllowedCpus(); }).join();
  EXPECT_EQ(seen, std::vector<int>{allowed.back()});
  EXPECT_EQ(AllowedCpus(), std::vector<int>{allowed.back()});
  PinProcessToCpus(allowed);  // as it was, for the tests after this one
  EXPECT_EQ(AllowedCpus(), allowed);
}

}  // namespace
}  // namespace baton
