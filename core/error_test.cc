// Errors keep their cause in valid UTF-8 whatever bytes it held.
#include "core/error.h"

#include <gtest/gtest.h>

#include <string>

namespace baton {
namespace {

TEST(ErrorTest, ValidUtf8KeepsValidTextAndSpellsOutEveryBadByte) {
  EXPECT_EQ(ValidUtf8("plain ascii"), "plain ascii");
  EXPECT_EQ(ValidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");  // 2-, 3- and 4-byte forms
  EXPECT_EQ(ValidUtf8("data\xff.bin"), "data\\xff.bin");
  EXPECT_EQ(ValidUtf8("\xc3"), "\\xc3");                             // truncated sequence
  EXPECT_EQ(ValidUtf8("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(ValidUtf8("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a UTF-16 surrogate
  EXPECT_EQ(ValidUtf8("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // beyond U+10FFFF
  EXPECT_EQ(ValidUtf8(std::string("a\0b", 3)), std::string("a\0b", 3));
}

TEST(ErrorTest, ThrownMessagesAreValidUtf8AndKeepTheCause) {
  try {
    BATON_FAIL("{}: cannot open", "/tmp/\xff\xfe");
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(ValidUtf8(what), what);
    EXPECT_NE(what.find("/tmp/\\xff\\xfe: cannot open"), std::string::npos) << what;
  }
}

// Code that builds its own message (the config reader quoting a YAML line) throws Error directly.
TEST(ErrorTest, ErrorsThrownDirectlyAreValidUtf8Too) {
  const Error error(std::string("x.yaml:3: train.st\xe0ps: unknown key"));
  EXPECT_STREQ(error.what(), "x.yaml:3: train.st\\xe0ps: unknown key");
}

}  // namespace
}  // namespace baton
