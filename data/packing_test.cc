// PackRows: documents end with their separator; positions restart after it; the separator's
// target (the next document's first token) is not counted.
#include "data/packing.h"

#include <gtest/gtest.h>

#include <vector>

namespace baton {
namespace {

constexpr int32_t kSep = 9;
constexpr int32_t kIgnored = -1;

TEST(PackRowsTest, SeparatorEndsItsDocumentAndItsTargetIsIgnored) {
  // Two rows of 6: "a b SEP c SEP d" and "SEP SEP a b c d".
  const std::vector<int32_t> tokens = {1, 2, kSep, 3, kSep, 4, kSep, kSep, 1, 2, 3, 4};
  std::vector<int32_t> targets = {2, kSep, 3, kSep, 4, 5, kSep, 1, 2, 3, 4, 5};
  std::vector<int32_t> starts(tokens.size(), -7);
  EXPECT_EQ(PackRows(tokens.data(), 2, 6, kSep, kIgnored, starts.data(), targets.data()), 8);
  EXPECT_EQ(starts, (std::vector<int32_t>{0, 0, 0, 3, 3, 5, 0, 1, 2, 2, 2, 2}));
  EXPECT_EQ(targets, (std::vector<int32_t>{2, kSep, kIgnored, kSep, kIgnored, 5, kIgnored, kIgnored,
                                           2, 3, 4, 5}));
}

TEST(PackRowsTest, RowWithoutSeparatorIsOneDocument) {
  const std::vector<int32_t> tokens = {4, 5, 6, 7};
  std::vector<int32_t> targets = {5, 6, 7, 8};
  std::vector<int32_t> starts(4);
  EXPECT_EQ(PackRows(tokens.data(), 1, 4, kSep, kIgnored, starts.data(), targets.data()), 4);
  EXPECT_EQ(starts, (std::vector<int32_t>{0, 0, 0, 0}));
  EXPECT_EQ(targets, (std::vector<int32_t>{5, 6, 7, 8}));
}

// Rows of nothing but separators leave no target counted: the count says so (the trainer makes
// it an error rather than a loss of 0).
TEST(PackRowsTest, RowsOfSeparatorsOnlyCountNoTarget) {
  const std::vector<int32_t> tokens(8, kSep);
  std::vector<int32_t> targets(8, kSep);
  std::vector<int32_t> starts(8);
  EXPECT_EQ(PackRows(tokens.data(), 2, 4, kSep, kIgnored, starts.data(), targets.data()), 0);
  EXPECT_EQ(targets, std::vector<int32_t>(8, kIgnored));
}

}  // namespace
}  // namespace baton
