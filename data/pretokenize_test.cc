// GPT-2's pre-tokenizer and the Unicode classes under it: GPT-2's known splits, Hugging Face's
// splits of the fixture texts (tests/fixtures/bpe/reference.json), and safe cut points.
#include "data/pretokenize.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "data/unicode.h"

namespace baton {
namespace {

using ::testing::ElementsAre;
using Pieces = std::vector<std::string>;

Pieces Split(std::string_view text) {
  Pieces pieces;
  for (std::string_view piece : PreTokenize(text)) pieces.emplace_back(piece);
  return pieces;
}

nlohmann::json Reference() {
  std::ifstream in(BATON_SOURCE_DIR "/tests/fixtures/bpe/reference.json");
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

TEST(PreTokenizeTest, WordsKeepTheirLeadingSpace) {
  EXPECT_THAT(Split("Hello world"), ElementsAre("Hello", " world"));
  EXPECT_THAT(Split(" leading"), ElementsAre(" leading"));
  EXPECT_THAT(Split("trailing "), ElementsAre("trailing", " "));
}

TEST(PreTokenizeTest, BlankLineBeforeAWordIsTwoNewlinesAsInGpt2) {
  // GPT-2 encodes "Hello\n\nWorld" as Hello, \n, \n, World (198 198), but a final "\n\n" whole.
  EXPECT_THAT(Split("Hello\n\nWorld"), ElementsAre("Hello", "\n", "\n", "World"));
  EXPECT_THAT(Split("the end\n\n"), ElementsAre("the", " end", "\n\n"));
}

TEST(PreTokenizeTest, WhitespaceRunLeavesItsLastSpaceToTheNextWord) {
  EXPECT_THAT(Split("a   b"), ElementsAre("a", "  ", " b"));
  EXPECT_THAT(Split("a \tb"), ElementsAre("a", " ", "\t", "b"));
  EXPECT_THAT(Split("a\t\t"), ElementsAre("a", "\t\t"));
  EXPECT_THAT(Split("   "), ElementsAre("   "));
}

TEST(PreTokenizeTest, ContractionsAreLowerCaseOnly) {
  EXPECT_THAT(Split("don't we'll they've I'd"),
              ElementsAre("don", "'t", " we", "'ll", " they", "'ve", " I", "'d"));
  EXPECT_THAT(Split("IT'S"), ElementsAre("IT", "'", "S"));
  EXPECT_THAT(Split("?'s"), ElementsAre("?'", "s"));
}

TEST(PreTokenizeTest, LettersNumbersAndPunctuationAreSeparateRuns) {
  EXPECT_THAT(Split("abc123def 456 x?!y"),
              ElementsAre("abc", "123", "def", " 456", " x", "?!", "y"));
  EXPECT_THAT(Split("café naïve"), ElementsAre("café", " naïve"));
  EXPECT_THAT(Split("Привет, мир"), ElementsAre("Привет", ",", " мир"));
  EXPECT_THAT(Split("東京は３３３メートル"), ElementsAre("東京は", "３３３", "メートル"));
  EXPECT_THAT(Split("x² 🙂🙂"), ElementsAre("x", "²", " 🙂🙂"));
}

TEST(PreTokenizeTest, MalformedUtf8BytesArePunctuationAndKept) {
  EXPECT_THAT(Split("a\xff\xfe b\xe4\xb8"), ElementsAre("a", "\xff\xfe", " b", "\xe4\xb8"));
}

TEST(PreTokenizeTest, PiecesEqualHuggingFaceByteLevelOnTheFixtureTexts) {
  const nlohmann::json reference = Reference();
  ASSERT_GE(reference["cases"].size(), 10u);
  for (const nlohmann::json& c : reference["cases"]) {
    EXPECT_EQ(Split(c["text"].get<std::string>()), c["pieces"].get<Pieces>()) << c["name"];
  }
}

TEST(PreTokenizeTest, TextCutAtABoundaryGivesTheSamePieces) {
  const nlohmann::json reference = Reference();
  int cuts = 0;
  for (const nlohmann::json& c : reference["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const Pieces whole = Split(text);
    for (size_t from = 0; from < text.size(); ++from) {
      const size_t cut = PieceBoundaryAfter(text, from);
      ASSERT_GE(cut, from);
      ASSERT_LE(cut, text.size());
      if (cut == text.size()) continue;
      EXPECT_EQ(text[cut - 1], '\n');
      Pieces parts = Split(std::string_view(text).substr(0, cut));
      const Pieces rest = Split(std::string_view(text).substr(cut));
      parts.insert(parts.end(), rest.begin(), rest.end());
      EXPECT_EQ(parts, whole) << c["name"] << " cut at " << cut;
      ++cuts;
    }
  }
  EXPECT_GT(cuts, 100);
  EXPECT_EQ(PieceBoundaryAfter("a\nb\nc", 0), 2u);
  EXPECT_EQ(PieceBoundaryAfter("a\nb\nc", 3), 4u);
  EXPECT_EQ(PieceBoundaryAfter("a\n\nb", 0), 4u);  // none: "\n\n" is cut differently at the end
  EXPECT_EQ(PieceBoundaryAfter("a\n b", 0), 4u);   // none: a space follows
  EXPECT_EQ(PieceBoundaryAfter("a \nb", 0), 4u);   // none: a space precedes
  EXPECT_EQ(PieceBoundaryAfter("a\n", 0), 2u);     // the end
}

TEST(UnicodeTest, ClassesOfScriptsInTheTable) {
  for (char32_t letter : {U'a', U'Z', U'é', U'ß', U'ж', U'Ω', U'ά', U'中', U'あ', U'ー', U'한',
                          U'Ａ', U'ﬁ', U'א', U'ب', U'ก'}) {
    EXPECT_TRUE(IsLetter(letter)) << static_cast<uint32_t>(letter);
    EXPECT_FALSE(IsNumber(letter)) << static_cast<uint32_t>(letter);
  }
  for (char32_t number : {U'0', U'9', U'²', U'½', U'٣', U'１', U'Ⅻ', U'①', U'〇'}) {
    EXPECT_TRUE(IsNumber(number)) << static_cast<uint32_t>(number);
    EXPECT_FALSE(IsLetter(number)) << static_cast<uint32_t>(number);
  }
  for (char32_t other :
       {U'!', U'\'', U'×', U'÷', U'€', U'→', U'。', U'🙂', U'\u0301', U'\u200b'}) {
    EXPECT_FALSE(IsLetter(other) || IsNumber(other) || IsWhitespace(other))
        << static_cast<uint32_t>(other);
  }
  for (char32_t space :
       {U' ', U'\t', U'\n', U'\r', U'\v', U'\f', U'\u0085', U'\u00a0', U'\u2003', U'\u3000'}) {
    EXPECT_TRUE(IsWhitespace(space)) << static_cast<uint32_t>(space);
  }
}

TEST(UnicodeTest, Utf8RoundTripsAndMalformedBytesComeOneAtATime) {
  for (char32_t c : {U'a', U'é', U'中', U'🙂', char32_t{0x10FFFF}}) {
    std::string bytes;
    AppendUtf8(c, bytes);
    const Utf8CodePoint cp = DecodeUtf8(bytes, 0);
    EXPECT_EQ(cp.value, c);
    EXPECT_EQ(cp.length, static_cast<int>(bytes.size()));
  }
  // A stray continuation byte, an overlong '/', a surrogate, a truncated sequence, 0xFF.
  for (std::string_view bad : {"\x80", "\xc0\xaf", "\xed\xa0\x80", "\xe4\xb8", "\xff"}) {
    const Utf8CodePoint cp = DecodeUtf8(bad, 0);
    EXPECT_EQ(cp.value, kInvalidCodePoint) << bad;
    EXPECT_EQ(cp.length, 1) << bad;
  }
}

}  // namespace
}  // namespace baton
