// How parameters are cut across tensor ranks (model/tensor_parallel.h).
#include "model/tensor_parallel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/error.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

TEST(TensorSplitTest, PartsAreEqualWhenTheyDivideAndNearEqualOtherwise) {
  EXPECT_EQ(PartOf(12, 0, 4), (std::pair<int64_t, int64_t>{0, 3}));
  EXPECT_EQ(PartOf(12, 3, 4), (std::pair<int64_t, int64_t>{9, 12}));
  // 11 over 3: 3, 4, 4 rows, covering [0, 11) without gaps.
  EXPECT_EQ(PartOf(11, 0, 3), (std::pair<int64_t, int64_t>{0, 3}));
  EXPECT_EQ(PartOf(11, 1, 3), (std::pair<int64_t, int64_t>{3, 7}));
  EXPECT_EQ(PartOf(11, 2, 3), (std::pair<int64_t, int64_t>{7, 11}));
  EXPECT_THAT([] { PartOf(2, 0, 3); }, ::testing::Throws<Error>());
}

TEST(TensorSplitTest, EachSectionIsCutAndThePartsLaidEndToEnd) {
  // c_attn's columns (C=4, 2 KV heads of 1): queries 4, keys 2, values 2; part 1 of 2 holds
  // query columns 2-3, key column 5, value column 7.
  const TensorSplit split{1, {4, 2, 2}, 1, 2};
  EXPECT_EQ(PartRanges(split), (std::vector<std::pair<int64_t, int64_t>>{{2, 2}, {5, 1}, {7, 1}}));
  EXPECT_EQ(PartShape({3, 8}, split), (Shape{3, 4}));
  EXPECT_EQ(PartShape({3, 8}, TensorSplit{}), (Shape{3, 8}));
  EXPECT_THAT(
      [&] {
        PartShape({3, 9}, split);
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("add up to 8, not 9")));
}

TEST(TensorSplitTest, ExtractAndInsertAreInversesOverAllParts) {
  const Shape full = {3, 8};
  std::vector<float> values(24);
  std::iota(values.begin(), values.end(), 0.0f);
  for (const TensorSplit& base : {TensorSplit{1, {4, 2, 2}}, TensorSplit{0, {3}}}) {
    for (int parts : {1, 2}) {
      std::vector<float> whole(24, -1.0f);
      for (int t = 0; t < parts; ++t) {
        TensorSplit split = base;
        split.part = t;
        split.parts = parts;
        std::vector<float> part(static_cast<size_t>(NumElements(PartShape(full, split))));
        ExtractPart(values.data(), full, sizeof(float), split, part.data());
        if (split.cut() && split.dim == 1 && t == 1) {  // row 0: columns 2, 3, 5, 7
          EXPECT_EQ(std::vector<float>(part.begin(), part.begin() + 4),
                    (std::vector<float>{2, 3, 5, 7}));
        }
        InsertPart(part.data(), full, sizeof(float), split, whole.data());
      }
      EXPECT_EQ(whole, values);
    }
  }
}

}  // namespace
}  // namespace baton
