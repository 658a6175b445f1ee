// JSON field reads: every wrong type, range or syntax names the file and the key path (or line),
// and no error quotes the file's raw bytes.
#include "core/json_fields.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "core/error.h"
#include "core/files.h"
#include "core/temp_dir.h"

namespace baton {
namespace {

using test_util::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

std::string ErrorOf(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

const nlohmann::json kDoc = nlohmann::json::parse(R"({
  "name": "llama", "count": 4, "big": 4294967298, "huge": 18446744073709551615,
  "ratio": 1e-300, "flag": true, "gone": null, "text": "yes",
  "nested": {"rope_type": 5, "list": [1, "two"]}, "weights": {"a.b": 3}
})");

TEST(JsonFieldsTest, ReadsEachTypeAndTreatsNullAsAbsent) {
  const JsonField doc(kDoc, "c.json");
  EXPECT_EQ(doc["name"].String(), "llama");
  EXPECT_EQ(doc["count"].Int(1, 10), 4);
  EXPECT_EQ(doc["ratio"].Number(), 1e-300);
  EXPECT_EQ(doc["count"].Number(), 4.0);
  EXPECT_TRUE(doc["flag"].Bool());
  EXPECT_EQ(doc["nested"]["list"][0].Int(0, 9), 1);
  EXPECT_FALSE(doc["gone"].present());
  EXPECT_EQ(doc["gone"].OptionalBool(), std::nullopt);
  EXPECT_EQ(doc["absent"].OptionalString(), std::nullopt);
  EXPECT_EQ(doc["absent"]["deeper"].OptionalInt(0, 1), std::nullopt);
  EXPECT_EQ(doc["nested"]["list"][7].OptionalInt(0, 1), std::nullopt);
  EXPECT_EQ(doc["text"].OptionalString(), "yes");
}

TEST(JsonFieldsTest, AWrongTypeNamesTheFileTheKeyPathAndWhatItGot) {
  const JsonField doc(kDoc, "c.json");
  EXPECT_EQ(ErrorOf([&] { doc["nested"]["rope_type"].String(); }),
            "c.json: nested.rope_type: expected a string, got number 5");
  EXPECT_EQ(ErrorOf([&] { doc["text"].OptionalBool(); }),
            "c.json: text: expected a boolean, got string \"yes\"");
  EXPECT_EQ(ErrorOf([&] { doc["gone"].String(); }), "c.json: gone: expected a string, got null");
  EXPECT_EQ(ErrorOf([&] { doc["absent"].Int(0, 1); }),
            "c.json: absent: missing; expected an integer");
  EXPECT_EQ(ErrorOf([&] { doc["nested"]["list"][1].Int(0, 9); }),
            "c.json: nested.list[1]: expected an integer, got string \"two\"");
  EXPECT_EQ(ErrorOf([&] { doc["ratio"].Int(0, 9); }),
            "c.json: ratio: expected an integer, got number 1e-300");
  EXPECT_EQ(ErrorOf([&] { doc["text"]["x"].OptionalString(); }),
            "c.json: text: expected an object, got string \"yes\"");
  EXPECT_EQ(ErrorOf([&] { doc["weights"]["a.b"].String(); }),
            "c.json: weights[\"a.b\"]: expected a string, got number 3");
  EXPECT_EQ(ErrorOf([&] { doc["name"].Object(); }),
            "c.json: name: expected an object, got string \"llama\"");
  EXPECT_EQ(ErrorOf([&] { doc["count"].Array(); }),
            "c.json: count: expected an array, got number 4");
}

// Narrowing a config value to the model's int must not wrap: 2^32 + 2 is not 2 layers.
TEST(JsonFieldsTest, IntegersOutsideTheRangeAreRefusedBeforeNarrowing) {
  const JsonField doc(kDoc, "c.json");
  EXPECT_EQ(ErrorOf([&] { doc["big"].Int(1, 2147483647); }),
            "c.json: big: 4294967298 is out of range [1, 2147483647]");
  EXPECT_EQ(ErrorOf([&] { doc["huge"].OptionalInt(0, INT64_MAX); }),
            "c.json: huge: 18446744073709551615 is out of range [0, 9223372036854775807]");
  EXPECT_EQ(ErrorOf([&] { doc["count"].Int(5, 9); }), "c.json: count: 4 is out of range [5, 9]");
}

TEST(JsonFieldsTest, ASyntaxErrorGivesTheLineAndColumnNotTheBytes) {
  TempDir dir;
  const std::string path = dir / "bad.json";
  WriteFileAtomically(path, "{\n  \"a\": 1,\n  root:x:0:0\n}");
  const std::string error = ErrorOf([&] { ParseJsonFile(path); });
  EXPECT_EQ(error, path + ": not valid JSON (syntax error at line 3, column 3)");
  EXPECT_THAT(error, Not(HasSubstr("root")));
  EXPECT_EQ(ErrorOf([&] { ParseJson(" \n", "e.json"); }), "e.json: empty, not JSON");
  EXPECT_THAT(ErrorOf([&] { ParseJson("[1e999]", "o.json"); }),
              HasSubstr("o.json: not valid JSON for Baton: a number overflows a double"));
  EXPECT_THAT(ErrorOf([&] { ParseJson("[1e999]", "o.json"); }), Not(HasSubstr("1e999")));
}

}  // namespace
}  // namespace baton
