// `baton data prepare` end to end with a Llama 3 tokenizer.json (tests/fixtures/llama3): the
// .bin it writes is llm.c's Llama 3 layout (a 256 x int32 header with magic 20240801, version 7
// and the token count, then uint32 ids), and the ids in it are those Tokenizer::Encode gives,
// with <|end_of_text|> between files (docs/data.md).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "tests/baton_process.h"

namespace baton::testing {
namespace {

namespace fs = std::filesystem;

TEST(DataPrepareTest, Llama3TokenizerWritesUint32IdsThatReadBackAsEncoded) {
  const std::string root = TempDir("llama3-prepare");
  const std::string fixture = SourceDir() + "/tests/fixtures/llama3/tokenizer.json";
  const Tokenizer tokenizer = Tokenizer::Load(fixture);
  const nlohmann::json reference = ReadJson(SourceDir() + "/tests/fixtures/llama3/reference.json");
  // Two files: every fixture text in the first, the same in reverse order in the second.
  std::string first, second;
  for (const nlohmann::json& c : reference["cases"]) {
    first += c["text"].get<std::string>();
    second = c["text"].get<std::string>() + second;
  }
  fs::create_directories(root + "/corpus");
  std::ofstream(root + "/corpus/1.txt", std::ios::binary) << first;
  std::ofstream(root + "/corpus/2.txt", std::ios::binary) << second;

  const CommandResult prepared =
      RunBaton({"data", "prepare", root + "/corpus", root + "/corpus.bin", "--tokenizer", fixture});
  ASSERT_EQ(prepared.exit_code, 0) << prepared.output;
  EXPECT_NE(prepared.output.find("vocab size 128256"), std::string::npos) << prepared.output;

  std::vector<uint32_t> expected = tokenizer.Encode(first);
  expected.push_back(*tokenizer.TokenId("<|end_of_text|>"));  // 128001: needs more than uint16
  for (const uint32_t id : tokenizer.Encode(second)) expected.push_back(id);
  std::smatch wrote;
  ASSERT_TRUE(std::regex_search(prepared.output, wrote, std::regex("wrote ([0-9]+) tokens")))
      << prepared.output;
  EXPECT_EQ(std::stoull(wrote[1].str()), expected.size());

  const std::string bytes = ReadFile(root + "/corpus.bin");
  ASSERT_EQ(bytes.size(), 1024 + 4 * expected.size());
  int32_t header[256];
  std::memcpy(header, bytes.data(), sizeof(header));
  EXPECT_EQ(header[0], 20240801);
  EXPECT_EQ(header[1], 7);
  EXPECT_EQ(header[2], static_cast<int32_t>(expected.size()));
  std::vector<uint32_t> ids(expected.size());
  std::memcpy(ids.data(), bytes.data() + 1024, 4 * ids.size());
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(tokenizer.Decode(ids), first + "<|end_of_text|>" + second);
}

}  // namespace
}  // namespace baton::testing
