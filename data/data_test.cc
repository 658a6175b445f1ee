// Tests for token datasets and deterministic batch sampling (the rule in docs/data.md).
#include "data/data.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/random.h"
#include "core/temp_dir.h"
#include "data/tokenizer.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class DataTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& bytes) {
    const fs::path path = dir_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << bytes;
    return path.string();
  }
  // `tokens` as uint16 (or uint32: Token) after `header`.
  template <typename Token = uint16_t>
  std::string WriteTokens(const std::string& name, const std::vector<Token>& tokens,
                          const std::vector<int32_t>& header = {}) {
    std::string bytes(header.size() * 4 + tokens.size() * sizeof(Token), '\0');
    // memcpy from an empty vector's data() (null) is undefined, even for 0 bytes (UBSan).
    if (!header.empty()) std::memcpy(bytes.data(), header.data(), header.size() * 4);
    if (!tokens.empty()) {
      std::memcpy(bytes.data() + header.size() * 4, tokens.data(), tokens.size() * sizeof(Token));
    }
    return Write(name, bytes);
  }

  TempDir temp_{"baton-data-test"};
  fs::path dir_{temp_.path()};
};

// Token i is i % 251, so any window identifies its start.
TokenDataset Ramp(int64_t n) {
  std::vector<uint32_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = static_cast<uint32_t>(i % 251);
  return TokenDataset::FromTokens(std::move(tokens), "ramp", 256);
}

// Every token of `data`, as ids.
std::vector<uint32_t> AllTokens(const TokenDataset& data) {
  std::vector<uint32_t> ids;
  for (int64_t i = 0; i < data.size(); ++i) ids.push_back(data[i]);
  return ids;
}

std::string ErrorOf(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST_F(DataTest, SameSeedAndStepGiveTheSameBatch) {
  const TokenDataset data = Ramp(10000);
  std::vector<int32_t> a(4 * 16), b(4 * 16), targets(4 * 16);
  FillBatch(data, 1337, 5, 0, 4, 16, a.data(), targets.data());
  FillBatch(data, 1337, 5, 0, 4, 16, b.data(), targets.data());
  EXPECT_EQ(a, b);
  FillBatch(data, 1338, 5, 0, 4, 16, b.data(), targets.data());
  EXPECT_NE(a, b);
  FillBatch(data, 1337, 6, 0, 4, 16, b.data(), targets.data());
  EXPECT_NE(a, b);
}

TEST_F(DataTest, MicroBatchesAreRowsOfTheFullBatch) {
  const TokenDataset data = Ramp(5000);
  constexpr int kBatch = 8, kMicro = 2, kSeq = 10;
  std::vector<int32_t> full(kBatch * kSeq), full_targets(kBatch * kSeq);
  FillBatch(data, 7, 3, 0, kBatch, kSeq, full.data(), full_targets.data());
  for (int k = 0; k < kBatch / kMicro; ++k) {
    std::vector<int32_t> micro(kMicro * kSeq), micro_targets(kMicro * kSeq);
    FillBatch(data, 7, 3, k * kMicro, kMicro, kSeq, micro.data(), micro_targets.data());
    const auto offset = static_cast<ptrdiff_t>(k * kMicro * kSeq);
    EXPECT_TRUE(std::equal(micro.begin(), micro.end(), full.begin() + offset)) << k;
    EXPECT_TRUE(
        std::equal(micro_targets.begin(), micro_targets.end(), full_targets.begin() + offset));
  }
}

TEST_F(DataTest, TargetsAreTheTokensShiftedByOne) {
  const TokenDataset data = Ramp(3000);
  constexpr int kRows = 6, kSeq = 32;
  std::vector<int32_t> tokens(kRows * kSeq), targets(kRows * kSeq);
  FillBatch(data, 99, 0, 0, kRows, kSeq, tokens.data(), targets.data());
  for (int row = 0; row < kRows; ++row) {
    const int64_t start = SampleStart(99, 0, row, data.size(), kSeq);
    for (int t = 0; t < kSeq; ++t) {
      EXPECT_EQ(tokens[row * kSeq + t], data[start + t]);
      EXPECT_EQ(targets[row * kSeq + t], data[start + t + 1]);
    }
  }
}

TEST_F(DataTest, WindowStartFollowsTheDocumentedRule) {
  for (int64_t step : {0, 1, 1000}) {
    for (int64_t i : {0, 1, 31}) {
      EXPECT_EQ(SampleStart(1337, step, i, 1000000, 128),
                static_cast<int64_t>(Rng::ForStream(1337, {0x64617461, static_cast<uint64_t>(step),
                                                           static_cast<uint64_t>(i)})
                                         .NextBelow(1000000 - 128)));
    }
  }
}

TEST_F(DataTest, WindowStartsMatchTheReferenceValuesInDocs) {
  // docs/data.md lists these, computed by its Python reference implementation.
  const int64_t expected[2][4] = {{446356, 54210, 183338, 25572}, {636056, 782104, 103315, 391235}};
  for (int step = 0; step < 2; ++step) {
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(SampleStart(1337, step, i, 1000000, 128), expected[step][i]);
  }
  EXPECT_EQ(SampleStart(7, 12345, 3, 338025, 1024), 73640);
  EXPECT_EQ(SampleStart(0, 0, 0, 129, 128), 0);  // exactly one sample fits
}

TEST_F(DataTest, TextIsOneTokenPerByteIncludingHighBytes) {
  const std::string path = Write("t.txt", std::string("Hi\xff\x80", 4));
  const TokenDataset data = TokenDataset::Open(path, TokenFormat::kAuto, 256, 3);
  EXPECT_EQ(data.format(), TokenFormat::kText);
  ASSERT_EQ(data.size(), 4);
  EXPECT_EQ(data[0], 'H');
  EXPECT_EQ(data[2], 255);
  EXPECT_EQ(data[3], 128);
}

// std::filesystem threw its own exception for a link loop below the folder. (Found by
// tests/data_fuzz_test.)
TEST_F(DataTest, LinksThatResolveToNoFileAreSkippedLikeDanglingOnes) {
  Write("a.txt", "1");
  fs::create_symlink("loop", dir_ / "loop");
  fs::create_symlink(dir_ / "nowhere", dir_ / "dangling");
  const auto files = ListTextFiles(dir_.string());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0], dir_ / "a.txt");
}

TEST_F(DataTest, FolderIsReadRecursivelyInSortedPathOrder) {
  Write("b", "3");
  Write("a/z", "2");
  Write("a.txt", "1");  // '.' sorts before '/', so "a.txt" precedes "a/z"
  Write("A", "0");      // upper case sorts first (byte order)
  fs::create_symlink(dir_ / "b", dir_ / "c-link-to-b");  // the same file: read once
  const TokenDataset data = TokenDataset::Open(dir_.string(), TokenFormat::kText, 256, 1);
  std::string text;
  for (int64_t i = 0; i < data.size(); ++i) text.push_back(static_cast<char>(data[i]));
  EXPECT_EQ(text, "0123");
  const auto files = ListTextFiles(dir_.string());
  ASSERT_EQ(files.size(), 4u);
  EXPECT_EQ(files[2], dir_ / "a" / "z");
}

TEST_F(DataTest, ShortFileIsAnErrorNamingFileAndBothLengths) {
  const std::string path = Write("short.txt", "0123456789");
  EXPECT_THAT(ErrorOf([&] { TokenDataset::Open(path, TokenFormat::kText, 256, 10); }),
              HasSubstr(path + ": 10 tokens is shorter than one sample: seq_len + 1 = 11 tokens"));
  EXPECT_NO_THROW(TokenDataset::Open(path, TokenFormat::kText, 256, 9));
}

TEST_F(DataTest, TokenAtOrAboveVocabIsAnErrorNamingTheFile) {
  const std::string path = WriteTokens("big.bin", {1, 2, 300, 4, 5});
  EXPECT_THAT(ErrorOf([&] { TokenDataset::Open(path, TokenFormat::kAuto, 256, 2); }),
              HasSubstr(path + ": token 300 at position 2 is >= vocab_size 256"));
  EXPECT_EQ(TokenDataset::Open(path, TokenFormat::kAuto, 301, 2).size(), 5);
}

TEST_F(DataTest, TextNeedsAByteSizedVocab) {
  const std::string path = Write("t.txt", "hello");
  EXPECT_THAT(ErrorOf([&] { TokenDataset::Open(path, TokenFormat::kText, 100, 2); }),
              HasSubstr("byte-level text needs vocab_size >= 256, got 100"));
}

TEST_F(DataTest, NanoGptBinIsMemoryMappedRawTokens) {
  const std::string path = WriteTokens("train.bin", {10, 20, 30, 50000});
  const TokenDataset data = TokenDataset::Open(path, TokenFormat::kAuto, 50257, 3);
  EXPECT_TRUE(data.memory_mapped());
  EXPECT_EQ(data.format(), TokenFormat::kBin);
  ASSERT_EQ(data.size(), 4);
  EXPECT_EQ(data[3], 50000);
  const std::string odd = Write("odd.bin", "abc");
  EXPECT_THAT(ErrorOf([&] { TokenDataset::Open(odd, TokenFormat::kBin, 65536, 1); }),
              HasSubstr("3 bytes is not a whole number of uint16 tokens"));
}

TEST_F(DataTest, LlmcHeaderIsDetectedByItsMagic) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = 3;
  const std::string path = WriteTokens("llmc.bin", {7, 8, 9}, header);
  const TokenDataset data = TokenDataset::Open(path, TokenFormat::kBin, 50257, 2);
  ASSERT_EQ(data.size(), 3);
  EXPECT_EQ(data[0], 7);
  EXPECT_EQ(data[2], 9);

  header[2] = 4;  // claims more tokens than the file holds
  const std::string lying = WriteTokens("lying.bin", {7, 8, 9}, header);
  EXPECT_THAT(ErrorOf([&] { TokenDataset::Open(lying, TokenFormat::kBin, 50257, 2); }),
              HasSubstr("llm.c header says 4 tokens"));
  header[1] = 2;
  const std::string v2 = WriteTokens("v2.bin", {7, 8, 9, 10}, header);
  EXPECT_THAT(ErrorOf([&] { TokenDataset::Open(v2, TokenFormat::kBin, 50257, 2); }),
              HasSubstr("llm.c header version 2 is not supported"));
}

TEST_F(DataTest, PrepareTextDataRoundTripsTheBytes) {
  const std::string text = "The quick brown fox\n\xe2\x82\xac jumps.\n";
  Write("in/one.txt", text);
  Write("in/two.txt", "!");
  const std::string output = (dir_ / "out.bin").string();
  EXPECT_EQ(PrepareTextData((dir_ / "in").string(), output), static_cast<int64_t>(text.size() + 1));
  const TokenDataset data = TokenDataset::Open(output, TokenFormat::kAuto, 256, 4);
  std::string round_trip;
  for (int64_t i = 0; i < data.size(); ++i) round_trip.push_back(static_cast<char>(data[i]));
  EXPECT_EQ(round_trip, text + "!");
  for (const auto& entry : fs::directory_iterator(dir_)) {  // no temporary file left behind
    EXPECT_THAT(entry.path().filename().string(), ::testing::Not(HasSubstr(".tmp")));
  }
}

TEST_F(DataTest, MissingSourcesAreErrors) {
  EXPECT_THAT(
      ErrorOf([&] { TokenDataset::Open((dir_ / "nope").string(), TokenFormat::kText, 256, 1); }),
      HasSubstr("nope: no such file or folder"));
  EXPECT_THAT(ErrorOf([&] {
                TokenDataset::Open((dir_ / "nope.bin").string(), TokenFormat::kAuto, 256, 1);
              }),
              HasSubstr("nope.bin: cannot open"));
  fs::create_directories(dir_ / "empty");
  EXPECT_THAT(ErrorOf([&] { ListTextFiles((dir_ / "empty").string()); }),
              HasSubstr("the folder holds no files"));
}

TEST_F(DataTest, EvalWindowsAreConsecutiveNonOverlappingAndEndBeforeTheLastToken) {
  const TokenDataset data = Ramp(41);  // (41 - 1) / 8 = 5 windows of 8
  EXPECT_EQ(NumEvalWindows(data.size(), 8), 5);
  EXPECT_EQ(NumEvalWindows(40, 8), 4);  // the 5th window's last target would be token 40
  std::vector<int32_t> tokens(5 * 8), targets(5 * 8);
  FillEvalWindows(data, 0, 5, 8, tokens.data(), targets.data());
  for (int i = 0; i < 40; ++i) {
    EXPECT_EQ(tokens[static_cast<size_t>(i)], i);
    EXPECT_EQ(targets[static_cast<size_t>(i)], i + 1);
  }
  std::vector<int32_t> tail(2 * 8), tail_targets(2 * 8);  // windows 3 and 4 alone: the same rows
  FillEvalWindows(data, 3, 2, 8, tail.data(), tail_targets.data());
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), tokens.begin() + 24));
  EXPECT_THAT(ErrorOf([&] { FillEvalWindows(data, 4, 2, 8, tail.data(), tail_targets.data()); }),
              HasSubstr("ramp: evaluation window 5 is past the last of its 5 windows of 8 tokens"));
}

TEST_F(DataTest, EvalFractionTakesTheTailAndTrainingWindowsNeverReachIt) {
  const TrainEvalSplit split = SplitTail(1000, 0.1);
  EXPECT_EQ(split.eval_tokens, 100);
  EXPECT_EQ(split.train_tokens, 900);
  EXPECT_EQ(SplitTail(1000, 0.0).eval_tokens, 0);
  EXPECT_EQ(SplitTail(999, 0.5).eval_tokens, 499);  // floor
  const TokenDataset data = Ramp(1000);
  const TokenDataset train = data.Slice(0, split.train_tokens, "train part");
  const TokenDataset eval = data.Slice(split.train_tokens, data.size(), "eval part");
  EXPECT_EQ(eval[0], data[900]);
  EXPECT_EQ(eval.size(), 100);
  constexpr int kSeq = 16;
  std::vector<int32_t> tokens(64 * kSeq), targets(64 * kSeq);
  for (int64_t step = 0; step < 50; ++step) {
    FillBatch(train, 3, step, 0, 64, kSeq, tokens.data(), targets.data());
    for (int64_t i = 0; i < 64; ++i) {
      EXPECT_LT(SampleStart(3, step, i, train.size(), kSeq) + kSeq, 900);  // last target < 900
    }
  }
  EXPECT_THAT(ErrorOf([&] { data.Slice(10, 1001, "x"); }), HasSubstr("slice [10, 1001)"));
}

TEST_F(DataTest, SlicesOfAMappedFileOutliveTheDatasetTheyCameFrom) {
  const std::string path = WriteTokens("slice.bin", {1, 2, 3, 4, 5, 6});
  TokenDataset tail = TokenDataset::FromTokens({0}, "placeholder", 8);
  {
    const TokenDataset data = TokenDataset::Open(path, TokenFormat::kBin, 8, 2);
    tail = data.Slice(4, 6, "tail");
  }
  EXPECT_TRUE(tail.memory_mapped());
  ASSERT_EQ(tail.size(), 2);
  EXPECT_EQ(tail[0], 5);
  EXPECT_EQ(tail[1], 6);
  EXPECT_EQ(tail.source(), "tail");
}

TEST_F(DataTest, CountTokensReadsSizesNotData) {
  Write("count/a.txt", "hello");
  Write("count/b/c.txt", "world!");
  EXPECT_EQ(CountTokens((dir_ / "count").string(), TokenFormat::kText), 11);
  EXPECT_EQ(CountTokens(WriteTokens("n.bin", {1, 2, 3}), TokenFormat::kAuto), 3);
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = 2;
  EXPECT_EQ(CountTokens(WriteTokens("l.bin", {7, 8}, header), TokenFormat::kBin), 2);
}

TEST_F(DataTest, FifoAsDataIsRefusedAtOnceNamingWhatItIs) {
  const std::string fifo = (dir_ / "data.fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(ErrorOf([&] { TokenDataset::Open(fifo, TokenFormat::kText, 256, 1); }),
              HasSubstr("data.fifo: is a FIFO, not a regular file or folder"));
  EXPECT_THAT(ErrorOf([&] { TokenDataset::Open(fifo, TokenFormat::kBin, 256, 1); }),
              HasSubstr("data.fifo: is a FIFO, not a regular file"));
  EXPECT_THAT(ErrorOf([&] { CountTokens(fifo, TokenFormat::kBin); }), HasSubstr("is a FIFO"));
}

// With a tokenizer each file is encoded on its own and <|endoftext|> stands between files.
TEST_F(DataTest, TokenizedTextIsEachFileEncodedWithEndOfTextBetween) {
  const Tokenizer tokenizer =
      Tokenizer::Load(BATON_SOURCE_DIR "/tests/fixtures/bpe/tokenizer.json");
  const std::string first = "It's a small world, after all.\n\n";  // ends in whitespace
  const std::string second = "Second file: caf\xc3\xa9 12,345.\n";
  Write("in/a.txt", first);
  Write("in/b/c.txt", second);
  std::vector<uint32_t> expected = tokenizer.Encode(first);
  expected.push_back(tokenizer.TokenId(kEndOfText).value());
  for (const uint32_t id : tokenizer.Encode(second)) expected.push_back(id);
  EXPECT_EQ(ReadTextTokens((dir_ / "in").string(), &tokenizer), expected);

  const std::string output = (dir_ / "out.bin").string();
  EXPECT_EQ(PrepareTextData((dir_ / "in").string(), output, &tokenizer),
            static_cast<int64_t>(expected.size()));
  EXPECT_EQ(fs::file_size(output), 2 * expected.size());  // nanoGPT's raw uint16, no header
  const TokenDataset bin = TokenDataset::Open(output, TokenFormat::kAuto, 640, 4);
  EXPECT_EQ(bin.token_bytes(), 2);
  EXPECT_EQ(AllTokens(bin), expected);
  // Training on the text itself reads the same tokens.
  const TokenDataset text =
      TokenDataset::Open((dir_ / "in").string(), TokenFormat::kText, 640, 4, &tokenizer);
  EXPECT_EQ(text.token_bytes(), 2);
  EXPECT_EQ(AllTokens(text), expected);
}

// Llama 3's ids run to 128255: prepare writes llm.c's Llama 3 layout (magic 20240801, version 7,
// uint32 tokens), with <|end_of_text|> between files and no <|begin_of_text|>.
TEST_F(DataTest, LargeVocabularyTextIsPreparedAsUint32WithTheLlama3Header) {
  const Tokenizer tokenizer =
      Tokenizer::Load(BATON_SOURCE_DIR "/tests/fixtures/llama3/tokenizer.json");
  ASSERT_EQ(tokenizer.vocab_size(), 128256);
  const std::string first = "DON'T stop: 1234567 tokens.\r\n\r\n";
  const std::string second = "Second file\t\u00e9t\u00e9 \xf0\x9f\x99\x82.\n";
  Write("in/a.txt", first);
  Write("in/b.txt", second);
  std::vector<uint32_t> expected = tokenizer.Encode(first);
  expected.push_back(128001);  // <|end_of_text|>
  for (const uint32_t id : tokenizer.Encode(second)) expected.push_back(id);
  EXPECT_EQ(ReadTextTokens((dir_ / "in").string(), &tokenizer), expected);
  EXPECT_NE(expected.front(), 128000u);  // no <|begin_of_text|>

  const std::string output = (dir_ / "llama.bin").string();
  EXPECT_EQ(PrepareTextData((dir_ / "in").string(), output, &tokenizer),
            static_cast<int64_t>(expected.size()));
  ASSERT_EQ(fs::file_size(output), 1024 + 4 * expected.size());
  std::ifstream in(output, std::ios::binary);
  int32_t header[3] = {};
  in.read(reinterpret_cast<char*>(header), sizeof(header));
  EXPECT_THAT(header, ElementsAre(20240801, 7, static_cast<int32_t>(expected.size())));

  const TokenDataset bin = TokenDataset::Open(output, TokenFormat::kAuto, 128256, 4);
  EXPECT_TRUE(bin.memory_mapped());
  EXPECT_EQ(bin.token_bytes(), 4);
  EXPECT_EQ(AllTokens(bin), expected);
  EXPECT_EQ(CountTokens(output, TokenFormat::kBin), static_cast<int64_t>(expected.size()));
  const TokenDataset text =
      TokenDataset::Open((dir_ / "in").string(), TokenFormat::kText, 128256, 4, &tokenizer);
  EXPECT_EQ(text.token_bytes(), 4);
  EXPECT_EQ(AllTokens(text), expected);
  // The separator is the largest id here: a model with fewer rows is refused.
  EXPECT_THAT(ErrorOf([&] { TokenDataset::Open(output, TokenFormat::kBin, 128000, 4); }),
              HasSubstr("llama.bin: token 128001 at position"));
}

TEST_F(DataTest, Llama3HeaderHoldsUint32Tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240801;
  header[1] = 7;
  header[2] = 4;
  const std::string path = WriteTokens<uint32_t>("llama.bin", {5, 70000, 128255, 65536}, header);
  const TokenDataset data = TokenDataset::Open(path, TokenFormat::kBin, 128256, 2);
  ASSERT_EQ(data.size(), 4);
  EXPECT_EQ(data[1], 70000u);
  EXPECT_EQ(data[2], 128255u);
  // Batches and slices read them as they are.
  const TokenDataset tail = data.Slice(1, 4, "tail");
  std::vector<int32_t> tokens(2), targets(2);
  FillEvalWindows(tail, 0, 1, 2, tokens.data(), targets.data());
  EXPECT_THAT(tokens, ElementsAre(70000, 128255));
  EXPECT_THAT(targets, ElementsAre(128255, 65536));
  EXPECT_THAT(ErrorOf([&] { TokenDataset::Open(path, TokenFormat::kBin, 128255, 2); }),
              HasSubstr("token 128255 at position 2 is >= vocab_size 128255"));
  EXPECT_THAT(ErrorOf([&] { TokenDataset::Open(path, TokenFormat::kBin, 2147483649, 2); }),
              HasSubstr("vocab_size 2147483649 is outside [1, 2147483648]"));

  header[2] = 5;  // claims more tokens than the file holds
  const std::string lying = WriteTokens<uint32_t>("lying.bin", {5, 6, 7, 8}, header);
  EXPECT_THAT(ErrorOf([&] { TokenDataset::Open(lying, TokenFormat::kBin, 128256, 2); }),
              HasSubstr("llm.c header says 5 tokens but the file holds 16 bytes after the header"));
  header[2] = 4;  // a truncated last token
  const std::string truncated =
      WriteTokens<uint16_t>("truncated.bin", {5, 0, 6, 0, 7, 0, 8}, header);
  EXPECT_THAT(ErrorOf([&] { CountTokens(truncated, TokenFormat::kBin); }),
              HasSubstr("llm.c header says 4 tokens but the file holds 14 bytes after the header"));
  header[1] = 1;  // GPT-2's version under Llama 3's magic
  const std::string v1 = WriteTokens<uint32_t>("v1.bin", {5, 6, 7, 8}, header);
  EXPECT_THAT(ErrorOf([&] { TokenDataset::Open(v1, TokenFormat::kBin, 128256, 2); }),
              HasSubstr("llm.c Llama 3 header (magic 20240801) version 1 is not supported (only "
                        "7: uint32 tokens)"));
}

// A file that starts with an llm.c magic but is shorter than the 1024-byte header is a truncated
// header, not uint16 tokens (which read the magic as token 55713 and blamed the vocabulary).
TEST_F(DataTest, AnLlmcMagicInAFileShorterThanTheHeaderIsATruncatedHeader) {
  for (const int32_t magic : {20240801, 20240520}) {
    const std::vector<int32_t> header = {magic, magic == 20240801 ? 7 : 1, 4};
    std::string bytes(1000, '\0');
    std::memcpy(bytes.data(), header.data(), header.size() * sizeof(int32_t));
    const std::string path = Write("cut-" + std::to_string(magic) + ".bin", bytes);
    for (const std::function<void()>& read : std::vector<std::function<void()>>{
             [&] { TokenDataset::Open(path, TokenFormat::kBin, 300, 4); },
             [&] { CountTokens(path, TokenFormat::kBin); }}) {
      const std::string error = ErrorOf(read);
      EXPECT_THAT(error, AllOf(HasSubstr(path), HasSubstr("header magic " + std::to_string(magic)),
                               HasSubstr("is 1000 bytes, shorter than the 1024-byte header"),
                               HasSubstr("truncated")));
      EXPECT_THAT(error, ::testing::Not(HasSubstr("vocab_size")));
    }
  }
  // The magic's bytes alone (4 bytes) are a truncated header too; 2 bytes are one nanoGPT token.
  const int32_t magic = 20240801;
  EXPECT_THAT(ErrorOf([&] {
                CountTokens(
                    Write("four.bin", std::string(reinterpret_cast<const char*>(&magic), 4)),
                    TokenFormat::kBin);
              }),
              HasSubstr("is 4 bytes, shorter than the 1024-byte header"));
  EXPECT_EQ(CountTokens(Write("two.bin", std::string(reinterpret_cast<const char*>(&magic), 2)),
                        TokenFormat::kBin),
            1);
}

// A uint32 id past a large vocabulary is named with its position (the check the trainer makes
// before it allocates the model: worker/trainer.cc).
TEST_F(DataTest, AnIdOfTwoToTheThirtyOneIsNamedAgainstAVocabularyOfTwoToTheTwentyFour) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240801;
  header[1] = 7;
  header[2] = 4;
  const std::string path = WriteTokens<uint32_t>("wide.bin", {5, 6, uint32_t{1} << 31, 7}, header);
  EXPECT_THAT(ErrorOf([&] { TokenDataset::Open(path, TokenFormat::kBin, int64_t{1} << 24, 2); }),
              HasSubstr("wide.bin: token 2147483648 at position 2 is >= vocab_size 16777216"));
}

TEST_F(DataTest, TokenizerWithoutEndOfTextJoinsFilesWithNothingBetween) {
  Write("tok/merges.txt", "a b\n");
  const Tokenizer tokenizer =
      Tokenizer::Load(Write("tok/vocab.json", R"({"a": 0, "b": 1, "ab": 2})"));
  Write("in/1.txt", "ab");
  Write("in/2.txt", "ba");
  EXPECT_THAT(ReadTextTokens((dir_ / "in").string(), &tokenizer), ElementsAre(2, 1, 0));
}

TEST_F(DataTest, TokenizedTextIdsMustFitTheModel) {
  const Tokenizer tokenizer =
      Tokenizer::Load(BATON_SOURCE_DIR "/tests/fixtures/bpe/tokenizer.json");
  const std::string path = Write("text.txt", "The quick brown fox jumps over the lazy dog.");
  EXPECT_THAT(ErrorOf([&] { TokenDataset::Open(path, TokenFormat::kText, 300, 4, &tokenizer); }),
              AllOf(HasSubstr("text.txt: token"), HasSubstr("is >= vocab_size 300")));
}

TEST_F(DataTest, CommonLicensesLoadAsText) {
  const std::string path = "/usr/share/common-licenses";
  if (!fs::is_directory(path)) GTEST_SKIP() << path << " is absent on this system";
  const TokenDataset data = TokenDataset::Open(path, TokenFormat::kAuto, 256, 128);
  EXPECT_GT(data.size(), 100000);
  std::vector<int32_t> tokens(4 * 128), targets(4 * 128);
  FillBatch(data, 1337, 0, 0, 4, 128, tokens.data(), targets.data());
  EXPECT_EQ(tokens[1], targets[0]);
}

}  // namespace
}  // namespace baton
