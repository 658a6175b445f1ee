#include "core/units.h"

#include <gtest/gtest.h>

#include <chrono>

#include "core/error.h"

namespace baton {
namespace {

TEST(ByteSizeTest, ParsesBinaryDecimalAndPlainSizes) {
  EXPECT_EQ(ParseByteSize("24GiB"), int64_t{24} << 30);
  EXPECT_EQ(ParseByteSize("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(ParseByteSize("1.5GB"), 1500000000);
  EXPECT_EQ(ParseByteSize("4096"), 4096);
  EXPECT_EQ(ParseByteSize("64 KiB"), 65536);
  EXPECT_EQ(ParseByteSize("10B"), 10);
  for (const char* bad : {"", "GiB", "12 parsecs", "1.2.3MB", "-5MiB"}) {
    EXPECT_THROW(ParseByteSize(bad), Error) << bad;
  }
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(100), "100 B");
  EXPECT_EQ(FormatBytes(int64_t{24} << 30), "24.00 GiB");
}

TEST(ByteSizeTest, CompactBytesHasNoSpace) {
  EXPECT_EQ(CompactBytes(int64_t{3} << 19), "1.5MiB");
  EXPECT_EQ(CompactBytes(int64_t{3} << 30), "3.00GiB");
}

TEST(SecondsTest, OfAnyDuration) {
  EXPECT_EQ(Seconds(std::chrono::milliseconds(1500)), 1.5);
  EXPECT_EQ(Seconds(std::chrono::microseconds(250)), 0.00025);
}

}  // namespace
}  // namespace baton
