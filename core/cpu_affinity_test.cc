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

TEST(PinThisThread, PinsTheCallerAndTheThreadsItStartsButNotOthers) {
  const std::vector<int> allowed = AllowedCpus();
  ASSERT_FALSE(allowed.empty());
  std::vector<int> pinned, child, other;
  std::thread([&] {
    PinThisThread({allowed.back()});
    pinned = AllowedCpus();
    std::thread([&] { child = AllowedCpus(); }).join();
  }).join();
  std::thread([&] { other = AllowedCpus(); }).join();
  EXPECT_EQ(pinned, std::vector<int>{allowed.back()});
  EXPECT_EQ(child, std::vector<int>{allowed.back()});
  EXPECT_EQ(other, allowed);  // started by the unpinned test thread
}

}  // namespace
}  // namespace baton
