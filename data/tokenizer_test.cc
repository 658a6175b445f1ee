// The byte-level BPE tokenizer: ids equal Hugging Face `tokenizers`' on the fixture
// (tests/fixtures/bpe, made by tests/fixtures/make_bpe_fixture.py) in both file forms, GPT-2's
// byte map and merge order, round trips, and errors that name the file.
#include "data/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/temp_dir.h"
#include "data/pretokenize.h"
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

const std::string kFixture = BATON_SOURCE_DIR "/tests/fixtures/bpe";

nlohmann::json Reference() { return nlohmann::json::parse(ReadText(kFixture + "/reference.json")); }

class TokenizerTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& bytes) {
    const fs::path path = dir_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << bytes;
    return path.string();
  }

  // Every fixture case encodes to the ids `tokenizers` gave and decodes back to its text.
  static void ExpectReferenceIds(const Tokenizer& tokenizer) {
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

  TempDir temp_{"baton-tokenizer-test"};
  fs::path dir_{temp_.path()};
};

TEST_F(TokenizerTest, TokenizerJsonGivesTheReferenceIds) {
  ExpectReferenceIds(Tokenizer::Load(kFixture + "/tokenizer.json"));
}

TEST_F(TokenizerTest, VocabJsonAndMergesTxtGiveTheReferenceIds) {
  const Tokenizer tokenizer = Tokenizer::Load(kFixture + "/vocab.json");
  ExpectReferenceIds(tokenizer);
  ASSERT_EQ(tokenizer.files().size(), 2u);
  EXPECT_EQ(tokenizer.files()[1].path, kFixture + "/merges.txt");
}

TEST_F(TokenizerTest, MergesWrittenAsStringsGiveTheSameIds) {
  // Older tokenizers versions wrote each merge as "a b"; the fixture has ["a", "b"].
  nlohmann::json root = nlohmann::json::parse(ReadText(kFixture + "/tokenizer.json"));
  ASSERT_TRUE(root["model"]["merges"][0].is_array());
  for (nlohmann::json& merge : root["model"]["merges"]) {
    merge = merge[0].get<std::string>() + " " + merge[1].get<std::string>();
  }
  ExpectReferenceIds(Tokenizer::Load(Write("tokenizer.json", root.dump())));
}

TEST_F(TokenizerTest, FolderPrefersTokenizerJsonThenVocabAndMerges) {
  EXPECT_EQ(Tokenizer::Load(kFixture).files()[0].hf_name, "tokenizer.json");
  Write("pair/vocab.json", ReadText(kFixture + "/vocab.json"));
  Write("pair/merges.txt", ReadText(kFixture + "/merges.txt"));
  const Tokenizer pair = Tokenizer::Load((dir_ / "pair").string());
  ASSERT_EQ(pair.files().size(), 2u);
  EXPECT_EQ(pair.files()[0].hf_name, "vocab.json");
  EXPECT_EQ(pair.files()[1].hf_name, "merges.txt");
  // tokenizer.model.save(dir, "mine") names them mine-vocab.json and mine-merges.txt.
  Write("prefixed/mine-vocab.json", ReadText(kFixture + "/vocab.json"));
  Write("prefixed/mine-merges.txt", ReadText(kFixture + "/merges.txt"));
  ExpectReferenceIds(Tokenizer::Load((dir_ / "prefixed/mine-vocab.json").string()));
}

TEST_F(TokenizerTest, EndOfTextIsATokenButNotEncodedFromText) {
  const Tokenizer tokenizer = Tokenizer::Load(kFixture + "/tokenizer.json");
  const auto eot = tokenizer.TokenId(kEndOfText);
  ASSERT_TRUE(eot.has_value());
  EXPECT_EQ(*eot, Reference()["end_of_text_id"].get<uint32_t>());
  EXPECT_EQ(tokenizer.Decode(Ids{*eot}), kEndOfText);
  const std::string text = "one<|endoftext|>two";
  const Ids ids = tokenizer.Encode(text);
  EXPECT_THAT(ids, ::testing::Not(::testing::Contains(*eot)));
  EXPECT_EQ(tokenizer.Decode(ids), text);
  EXPECT_FALSE(tokenizer.TokenId("<|not a token|>").has_value());
}

TEST_F(TokenizerTest, AnyBytesRoundTrip) {
  const Tokenizer tokenizer = Tokenizer::Load(kFixture + "/tokenizer.json");
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte.push_back(static_cast<char>(b));
  for (const std::string& text : {every_byte, std::string("bad \xff\xfe utf-8 \xe4\xb8"),
                                  std::string("\0\0 nul", 7), std::string()}) {
    EXPECT_EQ(tokenizer.Decode(tokenizer.Encode(text)), text);
  }
  EXPECT_TRUE(tokenizer.Encode("").empty());
}

TEST_F(TokenizerTest, LongTextEncodesAsItsWholePreTokenization) {
  // Several megabytes, so Encode pre-tokenizes it in parts; the ids must be those of the pieces
  // of the whole text, encoded one by one.
  const Tokenizer tokenizer = Tokenizer::Load(kFixture + "/tokenizer.json");
  const nlohmann::json reference = Reference();
  std::string varied;
  for (const nlohmann::json& c : reference["cases"]) varied += c["text"].get<std::string>();
  ASSERT_GT(varied.size(), 3000u);
  std::string text;
  while (text.size() < (3u << 20)) text += varied;
  Ids expected;
  for (const std::string_view piece : PreTokenize(text)) {
    const Ids ids = tokenizer.Encode(piece);
    expected.insert(expected.end(), ids.begin(), ids.end());
  }
  const Ids ids = tokenizer.Encode(text);
  EXPECT_EQ(ids.size(), expected.size());
  EXPECT_TRUE(ids == expected);  // (not EXPECT_EQ: a million ids would flood the log)
  EXPECT_EQ(tokenizer.Decode(ids), text);
}

// A miniature GPT-2: its 256 byte tokens in GPT-2's order, its first seven merges (ids 256..262)
// and <|endoftext|> at 50256. The ids asserted are GPT-2's own.
TEST_F(TokenizerTest, MiniatureGpt2GivesGpt2Ids) {
  std::vector<int> order;  // GPT-2's byte order: printable bytes first, then the rest
  for (int b = 0; b < 256; ++b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) order.push_back(b);
  }
  for (int b = 0; b < 256; ++b) {
    if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) order.push_back(b);
  }
  nlohmann::json vocab = nlohmann::json::object();
  int next_unprintable = 256;
  for (size_t id = 0; id < order.size(); ++id) {
    const int b = order[id];
    const bool printable = id < 188;
    std::string text;
    const char32_t c =
        printable ? static_cast<char32_t>(b) : static_cast<char32_t>(next_unprintable++);
    if (c < 0x80) {
      text.push_back(static_cast<char>(c));
    } else {  // two-byte UTF-8 covers everything below U+0800
      text.push_back(static_cast<char>(0xC0 | (c >> 6)));
      text.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
    vocab[text] = id;
  }
  const char* merges[] = {"Ġ t", "Ġ a", "h e", "i n", "r e", "o n", "Ġt he"};
  std::string merges_txt = "#version: 0.2\n";
  for (int i = 0; i < 7; ++i) {
    std::string merged = merges[i];
    merged.erase(merged.find(' '), 1);
    vocab[merged] = 256 + i;
    merges_txt += std::string(merges[i]) + "\n";
  }
  vocab["<|endoftext|>"] = 50256;
  Write("gpt2/merges.txt", merges_txt);
  const Tokenizer gpt2 = Tokenizer::Load(Write("gpt2/vocab.json", vocab.dump()));

  EXPECT_EQ(gpt2.vocab_size(), 50257);
  EXPECT_EQ(gpt2.TokenId(kEndOfText), 50256u);
  EXPECT_THAT(gpt2.Encode("!"), ElementsAre(0u));
  EXPECT_THAT(gpt2.Encode("\n"), ElementsAre(198u));
  EXPECT_THAT(gpt2.Encode(" "), ElementsAre(220u));
  EXPECT_THAT(gpt2.Encode(" the"), ElementsAre(262u));
  EXPECT_THAT(gpt2.Encode("the"), ElementsAre(83u, 258u));    // 't', "he": "Ġt" needs the space
  EXPECT_THAT(gpt2.Encode("\n\n"), ElementsAre(198u, 198u));  // no "ĊĊ" merge here
  EXPECT_THAT(gpt2.Encode("in the"), ElementsAre(259u, 262u));
  EXPECT_EQ(gpt2.Decode(Ids{262, 220, 50256}), " the <|endoftext|>");
  EXPECT_THAT(ErrorOf([&] { gpt2.Decode(Ids{300}); }),
              AllOf(HasSubstr("vocab.json"), HasSubstr("id 300 is not in the vocabulary")));
}

TEST_F(TokenizerTest, CopiedFilesLoadUnderTheirHuggingFaceNames) {
  CopyTokenizerFiles(Tokenizer::Load(kFixture + "/tokenizer.json"), (dir_ / "hf").string());
  EXPECT_EQ(ReadText(dir_ / "hf/tokenizer.json"), ReadText(kFixture + "/tokenizer.json"));
  Write("src/my-vocab.json", ReadText(kFixture + "/vocab.json"));
  Write("src/my-merges.txt", ReadText(kFixture + "/merges.txt"));
  CopyTokenizerFiles(Tokenizer::Load((dir_ / "src/my-vocab.json").string()),
                     (dir_ / "pair").string());
  EXPECT_EQ(ReadText(dir_ / "pair/vocab.json"), ReadText(kFixture + "/vocab.json"));
  EXPECT_EQ(ReadText(dir_ / "pair/merges.txt"), ReadText(kFixture + "/merges.txt"));
}

TEST_F(TokenizerTest, ErrorsNameTheFile) {
  const std::string missing = (dir_ / "nope/tokenizer.json").string();
  EXPECT_THAT(ErrorOf([&] { Tokenizer::Load(missing); }),
              AllOf(HasSubstr(missing), HasSubstr("no such file")));

  const std::string broken = Write("broken.json", "{\"model\": [1, 2");
  EXPECT_THAT(ErrorOf([&] { Tokenizer::Load(broken); }),
              AllOf(HasSubstr(broken), HasSubstr("not valid JSON (syntax error at line 1")));

  const std::string wordpiece =
      Write("wordpiece.json", R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})");
  EXPECT_THAT(ErrorOf([&] { Tokenizer::Load(wordpiece); }),
              AllOf(HasSubstr(wordpiece), HasSubstr("model type 'WordPiece' is not supported")));

  nlohmann::json root = nlohmann::json::parse(ReadText(kFixture + "/tokenizer.json"));
  root["pre_tokenizer"] = {{"type", "Whitespace"}};
  const std::string whitespace = Write("whitespace.json", root.dump());
  EXPECT_THAT(ErrorOf([&] { Tokenizer::Load(whitespace); }),
              AllOf(HasSubstr(whitespace), HasSubstr("pre_tokenizer Whitespace")));

  root = nlohmann::json::parse(ReadText(kFixture + "/tokenizer.json"));
  root["normalizer"] = {{"type", "NFC"}};
  EXPECT_THAT(ErrorOf([&] { Tokenizer::Load(Write("nfc.json", root.dump())); }),
              HasSubstr("normalizer NFC is not supported"));

  root = nlohmann::json::parse(ReadText(kFixture + "/tokenizer.json"));
  root["model"]["merges"][3] = 17;
  EXPECT_THAT(ErrorOf([&] { Tokenizer::Load(Write("merge17.json", root.dump())); }),
              HasSubstr("model.merges[3] is 17"));

  root = nlohmann::json::parse(ReadText(kFixture + "/tokenizer.json"));
  root["model"]["vocab"]["huge"] = 9223372036854775808ull;  // 2^63: printed as given
  EXPECT_THAT(ErrorOf([&] { Tokenizer::Load(Write("huge.json", root.dump())); }),
              HasSubstr("'huge' has id 9223372036854775808, more than the largest token id "
                        "2147483647"));

  root = nlohmann::json::parse(ReadText(kFixture + "/tokenizer.json"));
  root["model"].erase("merges");
  EXPECT_THAT(ErrorOf([&] { Tokenizer::Load(Write("nomerges.json", root.dump())); }),
              AllOf(HasSubstr("nomerges.json"), HasSubstr("model.merges is missing")));

  root = nlohmann::json::parse(ReadText(kFixture + "/tokenizer.json"));
  root.erase("model");
  EXPECT_THAT(ErrorOf([&] { Tokenizer::Load(Write("nomodel.json", root.dump())); }),
              AllOf(HasSubstr("nomodel.json"), HasSubstr("tokenizer.json"),
                    HasSubstr("without its \"model\"")));

  const std::string fifo = (dir_ / "fifo.json").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(ErrorOf([&] { Tokenizer::Load(fifo); }),
              AllOf(HasSubstr(fifo), HasSubstr("not a regular file (a FIFO)")));
  const std::string zero = (dir_ / "zero.json").string();
  fs::create_symlink("/dev/zero", zero);
  EXPECT_THAT(ErrorOf([&] { Tokenizer::Load(zero); }),
              AllOf(HasSubstr(zero), HasSubstr("not a regular file (a device)")));

  root = nlohmann::json::parse(ReadText(kFixture + "/tokenizer.json"));
  root["model"]["vocab"]["negative"] = -1;
  EXPECT_THAT(ErrorOf([&] { Tokenizer::Load(Write("negative.json", root.dump())); }),
              AllOf(HasSubstr("negative.json"), HasSubstr("'negative' has id -1"),
                    HasSubstr("[0, 2147483647]")));
}

// A value of the wrong type is named by the file and its key path, never by nlohmann's message
// ("[json.exception.type_error.302] type must be boolean, but is string").
TEST_F(TokenizerTest, AValueOfTheWrongTypeNamesTheFileAndTheKeyPath) {
  const auto error = [&](const std::string& name,
                         const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json root = nlohmann::json::parse(ReadText(kFixture + "/tokenizer.json"));
    edit(root);
    const std::string path = Write(name, root.dump());
    const std::string message = ErrorOf([&] { Tokenizer::Load(path); });
    EXPECT_THAT(message, HasSubstr(path)) << name;
    EXPECT_THAT(message, ::testing::Not(HasSubstr("json.exception"))) << name;
    return message;
  };
  EXPECT_THAT(error("merges-flag.json", [](auto& r) { r["model"]["ignore_merges"] = "yes"; }),
              HasSubstr("merges-flag.json: model.ignore_merges: expected a boolean, got string "
                        "\"yes\""));
  EXPECT_THAT(error("prefix.json", [](auto& r) { r["pre_tokenizer"]["add_prefix_space"] = 1; }),
              HasSubstr("prefix.json: pre_tokenizer.add_prefix_space: expected a boolean, got "
                        "number 1"));
  EXPECT_THAT(error("type.json", [](auto& r) { r["model"]["type"] = 5; }),
              HasSubstr("type.json: model.type: expected a string, got number 5"));
  EXPECT_THAT(error("dropout.json", [](auto& r) { r["model"]["dropout"] = "0.1"; }),
              HasSubstr("dropout.json: model.dropout: expected a number"));
  EXPECT_THAT(error("content.json", [](auto& r) { r["added_tokens"][0]["content"] = 5; }),
              HasSubstr("content.json: added_tokens[0].content: expected a string, got number 5"));
  EXPECT_THAT(error("added-id.json", [](auto& r) { r["added_tokens"][0]["id"] = "0"; }),
              HasSubstr("added-id.json: added_tokens[0].id: token '<|endoftext|>' has id string "
                        "\"0\", not an integer"));
  EXPECT_THAT(error("vocab-id.json", [](auto& r) { r["model"]["vocab"]["the"] = 1.5; }),
              HasSubstr("vocab-id.json: model.vocab.the: token 'the' has id number 1.5"));
  EXPECT_THAT(error("added.json", [](auto& r) { r["added_tokens"] = "none"; }),
              HasSubstr("added.json: added_tokens: expected an array, got string"));
  // A normalizer that is not an object was nlohmann's "cannot use value() with string".
  EXPECT_THAT(error("normalizer.json", [](auto& r) { r["normalizer"] = "NFC"; }),
              HasSubstr("normalizer string \"NFC\" is not supported"));
  EXPECT_THAT(error("pre-type.json", [](auto& r) { r["pre_tokenizer"]["type"] = 7; }),
              HasSubstr("pre-type.json: pre_tokenizer.type: expected a string, got number 7"));
}

TEST_F(TokenizerTest, IdsAbove65535AreAllowed) {
  // Token files hold uint32 ids then (docs/data.md); only ids past int32 are refused.
  nlohmann::json root = nlohmann::json::parse(ReadText(kFixture + "/tokenizer.json"));
  root["model"]["vocab"]["<big>"] = 70000;
  const Tokenizer tokenizer = Tokenizer::Load(Write("big.json", root.dump()));
  EXPECT_EQ(tokenizer.vocab_size(), 70001);
  EXPECT_EQ(tokenizer.TokenId("<big>"), 70000u);
  EXPECT_EQ(tokenizer.Decode(Ids{70000}), "<big>");
}

TEST_F(TokenizerTest, VocabAndMergesErrorsNameTheFileAndLine) {
  const std::string alone = Write("alone/vocab.json", R"({"a": 0, "b": 1})");
  EXPECT_THAT(ErrorOf([&] { Tokenizer::Load(alone); }),
              AllOf(HasSubstr((dir_ / "alone/merges.txt").string()), HasSubstr("no such file")));

  Write("bad/merges.txt", "#version: 0.2\na b\nab\n");
  const std::string bad = Write("bad/vocab.json", R"({"a": 0, "b": 1, "ab": 2})");
  EXPECT_THAT(ErrorOf([&] { Tokenizer::Load(bad); }),
              AllOf(HasSubstr("merges.txt:3"), HasSubstr("two tokens separated by one space")));

  Write("unknown/merges.txt", "a b\na c\n");
  const std::string unknown = Write("unknown/vocab.json", R"({"a": 0, "b": 1, "ab": 2})");
  EXPECT_THAT(ErrorOf([&] { Tokenizer::Load(unknown); }),
              AllOf(HasSubstr("unknown/merges.txt"), HasSubstr("merge 1 ('a c')"),
                    HasSubstr("'c' is not in the vocabulary")));

  Write("nobytes/merges.txt", "a b\n");
  const Tokenizer small =
      Tokenizer::Load(Write("nobytes/vocab.json", R"({"a": 0, "b": 1, "ab": 2})"));
  EXPECT_THAT(small.Encode("abab"), ElementsAre(2u, 2u));
  EXPECT_THAT(
      ErrorOf([&] { small.Encode("abc"); }),
      AllOf(HasSubstr("nobytes/vocab.json"), HasSubstr("unknown token"), HasSubstr("byte 0x63")));

  const std::string empty_folder = (dir_ / "empty").string();
  fs::create_directories(empty_folder);
  EXPECT_THAT(
      ErrorOf([&] { Tokenizer::Load(empty_folder); }),
      AllOf(HasSubstr(empty_folder),
            HasSubstr("neither tokenizer.json, nor vocab.json + merges.txt, nor tokenizer.model")));
}

}  // namespace
}  // namespace baton
