#include "core/hash.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

TEST(Fnv1a64Test, MatchesPublishedVectors) {
  Fnv1a64 empty;
  EXPECT_EQ(empty.hex(), "cbf29ce484222325");
  Fnv1a64 a;
  a.Update("a", 1);
  EXPECT_EQ(a.hex(), "af63dc4c8601ec8c");
  Fnv1a64 foobar;
  foobar.Update("foobar", 6);
  EXPECT_EQ(foobar.hex(), "85944171f73967e8");
}

TEST(Fnv1a64Test, SplitUpdatesEqualOneUpdate) {
  Fnv1a64 whole, parts;
  whole.Update("pipeline", 8);
  parts.Update("pipe", 4);
  parts.Update("line", 4);
  EXPECT_EQ(whole.digest(), parts.digest());
}

TEST(Crc32cTest, MatchesTheCheckValueAndSeesEveryByte) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  EXPECT_NE(Crc32c("123456780", 9), Crc32c("123456789", 9));
}

}  // namespace
}  // namespace baton
