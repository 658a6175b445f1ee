// Llama 3's scheme: the pre-tokenizer's pieces and the tokenizer's ids equal Hugging Face
// `tokenizers`' on the fixture (tests/fixtures/llama3, made by
// tests/fixtures/make_llama3_fixture.py), text cut at Llama3PieceBoundaryAfter gives the pieces of
// the whole, long text encodes as its whole pre-tokenization, any bytes round-trip, ids above
// 65535, and the tokenizer.json checks that refuse anything but Llama 3's pre-tokenizer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/temp_dir.h"
#include "data/pretokenize.h"
#include "data/tokenizer.h"
#include "data/tokenizer_test_util.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using tokenizer_test::ErrorOf;
using tokenizer_test::ReadText;
using Ids = std::vector<uint32_t>;
using Pieces = std::vector<std::string>;

const std::string kFixture = BATON_SOURCE_DIR "/tests/fixtures/llama3";

nlohmann::json Reference() { return nlohmann::json::parse(ReadText(kFixture + "/reference.json")); }

Pieces Split(std::string_view text) {
  Pieces pieces;
  for (std::string_view piece : PreTokenizeLlama3(text)) pieces.emplace_back(piece);
  return pieces;
}

// Every fixture text, concatenated: all the regex's alternatives, next to one another.
std::string AllCaseTexts() {
  const nlohmann::json reference = Reference();
  std::string text;
  for (const nlohmann::json& c : reference["cases"]) text += c["text"].get<std::string>();
  return text;
}

// Whether `text` cut at every boundary Llama3PieceBoundaryAfter finds from each offset
// pre-tokenizes as the whole does; returns the number of distinct cuts checked.
int ExpectCutsKeepThePieces(const std::string& text, const std::string& name) {
  const Pieces whole = Split(text);
  size_t last_cut = 0;
  int cuts = 0;
  for (size_t from = 0; from < text.size(); ++from) {
    const size_t cut = Llama3PieceBoundaryAfter(text, from);
    EXPECT_GE(cut, from);
    EXPECT_LE(cut, text.size());
    if (cut == text.size() || cut == last_cut) continue;
    last_cut = cut;
    EXPECT_EQ(text[cut - 1], '\n');
    Pieces parts = Split(std::string_view(text).substr(0, cut));
    const Pieces rest = Split(std::string_view(text).substr(cut));
    parts.insert(parts.end(), rest.begin(), rest.end());
    EXPECT_EQ(parts, whole) << name << " cut at " << cut;
    ++cuts;
  }
  return cuts;
}

TEST(Llama3PreTokenizeTest, PiecesEqualTokenizersOnTheFixtureTexts) {
  const nlohmann::json reference = Reference();
  ASSERT_GE(reference["cases"].size(), 25u);
  for (const nlohmann::json& c : reference["cases"]) {
    EXPECT_EQ(Split(c["text"].get<std::string>()), c["pieces"].get<Pieces>()) << c["name"];
  }
}

TEST(Llama3PreTokenizeTest, ContractionsAreCaseInsensitive) {
  EXPECT_THAT(Split("DON'T we'Re"), ElementsAre("DON", "'T", " we", "'Re"));
  EXPECT_THAT(Split("it'\u017f"), ElementsAre("it", "'\u017f"));  // long s folds to s
  EXPECT_THAT(Split("'x"), ElementsAre("'x"));                    // not one: ' leads letters
  EXPECT_THAT(Split(" 's"), ElementsAre(" '", "s"));              // only at a match's start
}

TEST(Llama3PreTokenizeTest, LettersTakeOneCharacterBeforeThemButNoNewline) {
  EXPECT_THAT(Split("a\tb (c $d"), ElementsAre("a", "\tb", " (", "c", " $", "d"));
  EXPECT_THAT(Split("(c"), ElementsAre("(c"));
  EXPECT_THAT(Split("x\ny"), ElementsAre("x", "\n", "y"));
  EXPECT_THAT(Split("?!word"), ElementsAre("?!", "word"));
}

TEST(Llama3PreTokenizeTest, NumbersComeThreeDigitsAtATime) {
  EXPECT_THAT(Split("1234567"), ElementsAre("123", "456", "7"));
  EXPECT_THAT(Split("a 12"), ElementsAre("a", " ", "12"));
  EXPECT_THAT(Split("x1234y"), ElementsAre("x", "123", "4", "y"));
}

TEST(Llama3PreTokenizeTest, PunctuationRunsKeepTheNewlinesAfterThem) {
  EXPECT_THAT(Split("end.\r\n\r\nNext"), ElementsAre("end", ".\r\n\r\n", "Next"));
  EXPECT_THAT(Split("a ??\n b"), ElementsAre("a", " ??\n", " b"));
}

TEST(Llama3PreTokenizeTest, WhitespaceWithANewlineEndsAtItsLastNewline) {
  EXPECT_THAT(Split("a  \n\n  b"), ElementsAre("a", "  \n\n", " ", " b"));
  EXPECT_THAT(Split("\n\nX"), ElementsAre("\n\n", "X"));  // GPT-2's gives "\n", "\n", "X"
  EXPECT_THAT(Split("a   b"), ElementsAre("a", "  ", " b"));
  EXPECT_THAT(Split("end  "), ElementsAre("end", "  "));
}

TEST(Llama3PreTokenizeTest, MalformedUtf8BytesArePunctuationAndKept) {
  EXPECT_THAT(Split("a\xff\xfe b\xe4\xb8"), ElementsAre("a", "\xff\xfe", " b", "\xe4\xb8"));
  EXPECT_THAT(Split("\xffword\x80\n"), ElementsAre("\xffword", "\x80\n"));
}

TEST(Llama3PreTokenizeTest, TextCutAtABoundaryGivesTheSamePieces) {
  const nlohmann::json reference = Reference();
  int cuts = 0;
  for (const nlohmann::json& c : reference["cases"]) {
    cuts += ExpectCutsKeepThePieces(c["text"].get<std::string>(), c["name"]);
  }
  EXPECT_GE(cuts, 15);
  // The texts run together: cuts between the cases' endings and beginnings too.
  EXPECT_GE(ExpectCutsKeepThePieces(AllCaseTexts(), "all cases"), 20);
  EXPECT_EQ(Llama3PieceBoundaryAfter("a\nb\nc", 0), 2u);
  EXPECT_EQ(Llama3PieceBoundaryAfter("a\nb\nc", 3), 4u);
  EXPECT_EQ(Llama3PieceBoundaryAfter("a\n\nb", 0), 3u);      // GPT-2's finds none here
  EXPECT_EQ(Llama3PieceBoundaryAfter("a \nb", 0), 3u);       // nor here
  EXPECT_EQ(Llama3PieceBoundaryAfter("a.\r\nb", 0), 4u);     // after a punctuation run's newlines
  EXPECT_EQ(Llama3PieceBoundaryAfter("a\n b", 0), 4u);       // none: a space follows
  EXPECT_EQ(Llama3PieceBoundaryAfter("a\n\u3000b", 0), 6u);  // none: U+3000 is a space
  EXPECT_EQ(Llama3PieceBoundaryAfter("a\n", 0), 2u);         // the end
}

TEST(Llama3PreTokenizeTest, RandomTextCutAtABoundaryGivesTheSamePieces) {
  // Texts drawn from the characters every alternative turns on, so cuts fall next to all of
  // them: newlines after spaces, punctuation, digits, letters, malformed bytes, other spaces.
  const std::vector<std::string> alphabet = {"\n",
                                             "\n",
                                             "\r",
                                             " ",
                                             " ",
                                             "\t",
                                             "a",
                                             "Z",
                                             "'",
                                             "s",
                                             "T",
                                             "re",
                                             "1",
                                             "2",
                                             ".",
                                             "?",
                                             "\xc3\xa9",
                                             "\xe3\x80\x80",
                                             "\xf0\x9f\x99\x82",
                                             "\xff",
                                             "\xc2\x85",
                                             "\xc2\xa0"};
  std::mt19937 rng(20240801);
  int cuts = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    for (int i = 0, n = 1 + static_cast<int>(rng() % 40); i < n; ++i) {
      text += alphabet[rng() % alphabet.size()];
    }
    cuts += ExpectCutsKeepThePieces(text, "trial " + std::to_string(trial));
  }
  EXPECT_GT(cuts, 300);
}

class Llama3TokenizerTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& bytes) {
    const fs::path path = dir_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << bytes;
    return path.string();
  }
  static nlohmann::json Fixture() {
    return nlohmann::json::parse(ReadText(kFixture + "/tokenizer.json"));
  }
  std::string LoadError(const std::string& name, const nlohmann::json& root) {
    return ErrorOf([&] { Tokenizer::Load(Write(name, root.dump())); });
  }

  TempDir temp_{"baton-llama3-tokenizer-test"};
  fs::path dir_{temp_.path()};
};

TEST_F(Llama3TokenizerTest, IdsEqualTokenizersOnTheFixtureTexts) {
  const Tokenizer tokenizer = Tokenizer::Load(kFixture + "/tokenizer.json");
  EXPECT_EQ(tokenizer.pre_tokenizer(), PreTokenizerScheme::kLlama3);
  EXPECT_FALSE(tokenizer.add_prefix_space());
  const nlohmann::json reference = Reference();
  EXPECT_EQ(tokenizer.vocab_size(), reference["vocab_size"].get<int64_t>());
  size_t checked = 0;
  for (const nlohmann::json& c : reference["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const Ids ids = tokenizer.Encode(text);
    EXPECT_EQ(ids, c["ids"].get<Ids>()) << c["name"];
    EXPECT_EQ(tokenizer.Decode(ids), text) << c["name"];
    checked += ids.size();
  }
  EXPECT_GT(checked, 1000u);
}

TEST_F(Llama3TokenizerTest, SpecialTokensHaveLlama3IdsAndAreNotEncodedFromText) {
  const Tokenizer tokenizer = Tokenizer::Load(kFixture + "/tokenizer.json");
  EXPECT_EQ(tokenizer.vocab_size(), 128256);
  EXPECT_EQ(tokenizer.TokenId("<|begin_of_text|>"), 128000u);
  EXPECT_EQ(tokenizer.TokenId(kLlama3EndOfText), 128001u);
  EXPECT_EQ(tokenizer.TokenId("<|eot_id|>"), 128009u);
  EXPECT_EQ(tokenizer.TokenId("<|reserved_special_token_250|>"), 128255u);
  EXPECT_FALSE(tokenizer.TokenId(kEndOfText).has_value());
  EXPECT_EQ(tokenizer.DocumentSeparator(), 128001u);  // no <|endoftext|>: Llama 3's
  EXPECT_EQ(tokenizer.Decode(Ids{128000, 128255}),
            "<|begin_of_text|><|reserved_special_token_250|>");
  for (const uint32_t id : tokenizer.Encode("<|begin_of_text|>x<|end_of_text|>")) {
    EXPECT_LT(id, 128000u);
  }
  // Between the trained ids and 128000 there are none.
  EXPECT_THAT(ErrorOf([&] { tokenizer.Decode(Ids{5000}); }),
              AllOf(HasSubstr("llama3/tokenizer.json"),
                    HasSubstr("id 5000 is not in the vocabulary (128256 ids)")));
}

TEST_F(Llama3TokenizerTest, SpecialTokensOutsideTheModelVocabularyReadTheSame) {
  // Llama 3's own file lists them only under added_tokens; the fixture has them in both.
  nlohmann::json root = Fixture();
  for (const nlohmann::json& added : root["added_tokens"]) {
    ASSERT_EQ(root["model"]["vocab"].erase(added["content"].get<std::string>()), 1u);
  }
  const Tokenizer tokenizer = Tokenizer::Load(Write("tokenizer.json", root.dump()));
  EXPECT_EQ(tokenizer.vocab_size(), 128256);
  EXPECT_EQ(tokenizer.TokenId("<|eot_id|>"), 128009u);
  EXPECT_EQ(tokenizer.Decode(Ids{128001}), "<|end_of_text|>");
  const nlohmann::json c = Reference()["cases"][0];
  EXPECT_EQ(tokenizer.Encode(c["text"].get<std::string>()), c["ids"].get<Ids>());
}

TEST_F(Llama3TokenizerTest, IgnoreMergesTakesAPieceThatIsATokenWhole) {
  // The fixture's " tokenization" is a token no merge makes (make_llama3_fixture.py).
  const Tokenizer whole = Tokenizer::Load(kFixture + "/tokenizer.json");
  const std::optional<uint32_t> id = whole.TokenId("\xc4\xa0tokenization");  // "Ġtokenization"
  ASSERT_TRUE(id.has_value());
  EXPECT_THAT(whole.Encode(" tokenization"), ElementsAre(*id));
  nlohmann::json root = Fixture();
  root["model"]["ignore_merges"] = false;
  const Tokenizer merged = Tokenizer::Load(Write("merges.json", root.dump()));
  const Ids ids = merged.Encode(" tokenization");
  EXPECT_GT(ids.size(), 1u);
  EXPECT_EQ(merged.Decode(ids), " tokenization");
}

TEST_F(Llama3TokenizerTest, LongTextEncodesAsItsWholePreTokenization) {
  // Several megabytes, so Encode pre-tokenizes it in parts cut at Llama3PieceBoundaryAfter.
  const Tokenizer tokenizer = Tokenizer::Load(kFixture + "/tokenizer.json");
  const std::string varied = AllCaseTexts();
  ASSERT_GT(varied.size(), 1500u);
  std::string text;
  while (text.size() < (3u << 20)) text += varied;
  Ids expected;
  for (const std::string_view piece : PreTokenizeLlama3(text)) {
    const Ids ids = tokenizer.Encode(piece);
    expected.insert(expected.end(), ids.begin(), ids.end());
  }
  const Ids ids = tokenizer.Encode(text);
  EXPECT_EQ(ids.size(), expected.size());
  EXPECT_TRUE(ids == expected);  // (not EXPECT_EQ: a million ids would flood the log)
  EXPECT_TRUE(tokenizer.Decode(ids) == text);
}

TEST_F(Llama3TokenizerTest, AnyBytesRoundTrip) {
  const Tokenizer tokenizer = Tokenizer::Load(kFixture + "/tokenizer.json");
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte.push_back(static_cast<char>(b));
  for (const std::string& text :
       {every_byte, std::string("bad \xff\xfe utf-8 \xe4\xb8"), std::string("\xc0\xaf\n\x80X"),
        std::string("\0\0 nul\r\n", 8), std::string()}) {
    EXPECT_EQ(tokenizer.Decode(tokenizer.Encode(text)), text);
  }
  EXPECT_TRUE(tokenizer.Encode("").empty());
}

TEST_F(Llama3TokenizerTest, OtherSplitsAreRefusedNamingTheFile) {
  nlohmann::json root = Fixture();
  nlohmann::json& steps = root["pre_tokenizer"]["pretokenizers"];
  const std::string pattern = steps[0]["pattern"]["Regex"].get<std::string>();
  ASSERT_EQ(pattern, kLlama3SplitPattern);

  steps[0]["pattern"]["Regex"] = pattern.substr(0, pattern.size() - 1);  // "\s" for "\s+"
  EXPECT_THAT(LoadError("regex.json", root),
              AllOf(HasSubstr("regex.json"), HasSubstr("pre_tokenizer Split pattern"),
                    HasSubstr("only Llama 3's regex")));
  steps[0]["pattern"] = {{"String", " "}};
  EXPECT_THAT(LoadError("string.json", root),
              AllOf(HasSubstr("string.json"), HasSubstr("Split pattern {\"String\":\" \"}")));

  root = Fixture();
  root["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  EXPECT_THAT(LoadError("removed.json", root),
              AllOf(HasSubstr("removed.json"), HasSubstr("Split behavior Removed")));
  root = Fixture();
  root["pre_tokenizer"]["pretokenizers"][0]["invert"] = true;
  EXPECT_THAT(LoadError("invert.json", root), HasSubstr("Split with invert true"));
  root = Fixture();
  root["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true;
  EXPECT_THAT(LoadError("regex2.json", root),
              HasSubstr("ByteLevel after a Split must have use_regex false"));
  root = Fixture();
  root["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true;
  EXPECT_THAT(LoadError("prefix.json", root), HasSubstr("add_prefix_space true"));
  root = Fixture();
  root["pre_tokenizer"]["pretokenizers"].push_back({{"type", "Digits"}});
  EXPECT_THAT(LoadError("three.json", root),
              AllOf(HasSubstr("three.json"),
                    HasSubstr("pre_tokenizer Sequence [Split, ByteLevel, Digits]")));
  root = Fixture();
  root["pre_tokenizer"] = root["pre_tokenizer"]["pretokenizers"][1];  // ByteLevel alone
  EXPECT_THAT(LoadError("alone.json", root), HasSubstr("use_regex false is not supported alone"));
}

// The Sequence's steps are read with their key paths: a wrong type names it.
TEST_F(Llama3TokenizerTest, AWrongTypeInTheSequenceNamesItsKeyPath) {
  nlohmann::json root = Fixture();
  root["pre_tokenizer"]["pretokenizers"][0]["behavior"] = 3;
  EXPECT_THAT(LoadError("behavior.json", root),
              HasSubstr("behavior.json: pre_tokenizer.pretokenizers[0].behavior: expected a "
                        "string, got number 3"));
  root = Fixture();
  root["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = "false";
  EXPECT_THAT(LoadError("use-regex.json", root),
              HasSubstr("use-regex.json: pre_tokenizer.pretokenizers[1].use_regex: expected a "
                        "boolean, got string \"false\""));
  root = Fixture();
  root["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = 5;
  EXPECT_THAT(LoadError("pattern.json", root),
              HasSubstr("pattern.json: pre_tokenizer.pretokenizers[0].pattern.Regex: expected a "
                        "string, got number 5"));
}

TEST_F(Llama3TokenizerTest, IdsUpToTwoToTheThirtyOneMinusOneLoad) {
  nlohmann::json root = Fixture();
  root["model"]["vocab"]["<far>"] = 2147483647;
  const Tokenizer far = Tokenizer::Load(Write("far.json", root.dump()));
  EXPECT_EQ(far.vocab_size(), 2147483648);
  EXPECT_EQ(far.Decode(Ids{2147483647}), "<far>");
  root["model"]["vocab"]["<far>"] = 2147483648;
  EXPECT_THAT(
      LoadError("farther.json", root),
      AllOf(HasSubstr("farther.json"), HasSubstr("'<far>' has id 2147483648"), HasSubstr("int32")));
}

}  // namespace
}  // namespace baton
