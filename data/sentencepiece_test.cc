// A SentencePiece tokenizer.model through Tokenizer (data/sentencepiece.h) against the
// `sentencepiece` Python package on tests/fixtures/sentencepiece (make_sentencepiece_fixture.py:
// a 500-piece BPE model with Llama 2's settings, byte fallback, trained on licenses; 66 cases of
// held-out text, whitespace, digits, non-ASCII and characters the corpus never had): the same ids
// and the same decoded text, byte for byte, and the ids of the whole training corpus. Also the
// folder form, the special pieces and the errors.
#include "data/sentencepiece.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/temp_dir.h"
#include "data/tokenizer.h"
#include "data/tokenizer_test_util.h"

namespace baton {
namespace {

using ::testing::HasSubstr;
using tokenizer_test::ErrorOf;
using tokenizer_test::ReadText;

const std::string kFixture = std::string(BATON_SOURCE_DIR) + "/tests/fixtures/sentencepiece";

nlohmann::json Reference() { return nlohmann::json::parse(ReadText(kFixture + "/reference.json")); }

TEST(SentencePieceTest, IdsAndDecodedTextEqualThePythonPackagesOnEveryCase) {
  const nlohmann::json reference = Reference();
  const Tokenizer tokenizer = Tokenizer::Load(kFixture + "/tokenizer.model");
  ASSERT_TRUE(tokenizer.sentencepiece());
  EXPECT_EQ(tokenizer.vocab_size(), reference["vocab_size"].get<int64_t>());
  int cases = 0, byte_fallback = 0;
  for (const nlohmann::json& c : reference["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<uint32_t> expected = c["ids"].get<std::vector<uint32_t>>();
    const std::vector<uint32_t> ids = tokenizer.Encode(text);
    EXPECT_EQ(ids, expected) << "text: " << text;
    EXPECT_EQ(tokenizer.Decode(ids), c["decoded"].get<std::string>()) << "text: " << text;
    for (const uint32_t id : ids) byte_fallback += id >= 3 && id < 3 + 256;  // <0x00>..<0xFF>
    ++cases;
  }
  EXPECT_GE(cases, 60);
  EXPECT_GT(byte_fallback, 0);  // the cases reach the byte pieces
}

// The fixture's whole training corpus (59 KB, about 28,800 ids) as one text, as `baton data
// prepare` encodes a file: the package's ids, and back to the text.
TEST(SentencePieceTest, TheWholeCorpusEncodesToThePackagesIds) {
  const std::string corpus = ReadText(kFixture + "/corpus.txt");
  const std::vector<uint32_t> expected =
      nlohmann::json::parse(ReadText(kFixture + "/corpus_ids.json")).get<std::vector<uint32_t>>();
  const Tokenizer tokenizer = Tokenizer::Load(kFixture + "/tokenizer.model");
  const std::vector<uint32_t> ids = tokenizer.Encode(corpus);
  ASSERT_GT(expected.size(), 20000u);
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(tokenizer.Decode(ids), corpus);
}

TEST(SentencePieceTest, AFolderWithoutTokenizerJsonReadsItsTokenizerModel) {
  const Tokenizer folder = Tokenizer::Load(kFixture);
  ASSERT_TRUE(folder.sentencepiece());
  ASSERT_EQ(folder.files().size(), 1u);
  EXPECT_EQ(folder.files().front().hf_name, "tokenizer.model");
  EXPECT_EQ(folder.Encode("The license"),
            Tokenizer::Load(kFixture + "/tokenizer.model").Encode("The license"));
}

TEST(SentencePieceTest, SpecialPiecesAndTheDocumentSeparator) {
  const Tokenizer tokenizer = Tokenizer::Load(kFixture + "/tokenizer.model");
  EXPECT_EQ(tokenizer.TokenId("<unk>"), 0u);
  EXPECT_EQ(tokenizer.TokenId("<s>"), 1u);
  EXPECT_EQ(tokenizer.TokenId("</s>"), 2u);
  EXPECT_EQ(tokenizer.TokenId("no such piece"), std::nullopt);
  EXPECT_EQ(tokenizer.DocumentSeparator(), 2u);  // "</s>": no <|endoftext|> in the model
  // Ordinary text: a literal "</s>" is encoded as characters, never as the control piece.
  for (const uint32_t id : tokenizer.Encode("a </s> b")) EXPECT_NE(id, 2u);
}

TEST(SentencePieceTest, BadFilesAndIdsAreErrorsNamingTheFile) {
  TempDir dir;
  const std::string json = dir / "tokenizer.model";
  std::ofstream(json) << "{\"model\": {}}";
  EXPECT_THAT(ErrorOf([&] { Tokenizer::Load(json); }),
              HasSubstr(json + ": not a SentencePiece model"));
  EXPECT_THAT(ErrorOf([&] { Tokenizer::Load(dir / "missing.model"); }),
              HasSubstr("missing.model: no such file or folder"));
  const Tokenizer tokenizer = Tokenizer::Load(kFixture + "/tokenizer.model");
  const std::vector<uint32_t> past = {5, 500};
  EXPECT_THAT(ErrorOf([&] { tokenizer.Decode(past); }),
              HasSubstr("tokenizer.model: id 500 is not in the vocabulary (500 ids)"));
}

// A ModelProto written by hand (the wire format: tag = field << 3 | type, varints, lengths).
std::string Varint(uint64_t v) {
  std::string out;
  do {
    out.push_back(static_cast<char>((v & 0x7f) | (v > 0x7f ? 0x80 : 0)));
    v >>= 7;
  } while (v != 0);
  return out;
}
std::string Field(int field, const std::string& bytes) {
  return Varint(static_cast<uint64_t>(field) << 3 | 2) + Varint(bytes.size()) + bytes;
}
std::string Piece(const std::string& text, int type) {
  return Field(1, text) + Varint(3 << 3) + Varint(static_cast<uint64_t>(type));
}

TEST(SentencePieceTest, ModelsItCannotRunAreRefusedNamingTheFileAndWhy) {
  TempDir dir;
  const std::string pieces = Field(1, Piece("<unk>", 2)) + Field(1, Piece("a", 1));
  const std::string bpe = Field(2, Varint(3 << 3) + Varint(2));  // trainer_spec.model_type BPE
  const std::string identity = Field(3, Field(1, "identity"));
  const auto error_of = [&](const std::string& bytes) {
    const std::string path = dir / "tokenizer.model";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    return ErrorOf([&] { Tokenizer::Load(path); });
  };
  // The library's defaults: a unigram model with NFKC normalization.
  EXPECT_THAT(error_of(pieces), HasSubstr("a SentencePiece unigram model; Baton runs BPE models"));
  EXPECT_THAT(error_of(pieces + bpe), HasSubstr("normalizer \"nmt_nfkc\""));
  EXPECT_THAT(error_of(pieces + bpe + identity + Field(1, Piece("<x>", 4))),
              HasSubstr("user-defined piece '<x>'"));
  EXPECT_THAT(error_of((pieces + bpe + identity).substr(0, 9)),
              HasSubstr("the message ends early"));
  const Tokenizer tiny = [&] {
    std::ofstream(dir / "tokenizer.model", std::ios::binary | std::ios::trunc)
        << pieces + bpe + identity;
    return Tokenizer::Load(dir / "tokenizer.model");
  }();
  // No byte fallback: "b" is unknown, and a run of unknowns is one <unk>.
  EXPECT_EQ(tiny.Encode("abba"), (std::vector<uint32_t>{0, 1, 0, 1}));
  EXPECT_EQ(tiny.Decode(std::vector<uint32_t>{1, 0}), "a \xe2\x81\x87 ");
}

}  // namespace
}  // namespace baton
