// `baton data prepare` end to end with a Llama 3 tokenizer.json (tests/fixtures/llama3) and a
// SentencePiece tokenizer.model (tests/fixtures/sentencepiece, which also trains, generates and
// exports). Llama 3's .bin is llm.c's Llama 3 layout (a 256 x int32 header with magic 20240801,
// version 7 and the token count, then uint32 ids), and the ids in it are those Tokenizer::Encode
// gives, with <|end_of_text|> between files (docs/data.md).
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

// A SentencePiece tokenizer.model (tests/fixtures/sentencepiece, 500 pieces) through every command:
// `data prepare` writes uint16 ids (nanoGPT's layout) equal to Encode's with </s> between the
// files; a Llama trains on them with data.tokenizer, generates from a prompt, and exports the
// model with the tokenizer.model beside it for LlamaTokenizer.
TEST(DataPrepareTest, ASentencePieceModelPreparesTrainsGeneratesAndExports) {
  const std::string root = TempDir("sentencepiece-prepare");
  const std::string model = SourceDir() + "/tests/fixtures/sentencepiece/tokenizer.model";
  const Tokenizer tokenizer = Tokenizer::Load(model);
  const std::string corpus = ReadFile(SourceDir() + "/tests/fixtures/sentencepiece/corpus.txt");
  const size_t middle = corpus.find('\n', corpus.size() / 2) + 1;
  const std::string first = corpus.substr(0, middle), second = corpus.substr(middle);
  fs::create_directories(root + "/corpus");
  std::ofstream(root + "/corpus/1.txt", std::ios::binary) << first;
  std::ofstream(root + "/corpus/2.txt", std::ios::binary) << second;
  const std::string bin = root + "/corpus.bin";
  const CommandResult prepared =
      RunBaton({"data", "prepare", root + "/corpus", bin, "--tokenizer", model});
  ASSERT_EQ(prepared.exit_code, 0) << prepared.output;
  std::vector<uint32_t> expected = tokenizer.Encode(first);
  expected.push_back(2);  // </s>
  for (const uint32_t id : tokenizer.Encode(second)) expected.push_back(id);
  const std::string bytes = ReadFile(bin);
  ASSERT_EQ(bytes.size(), 2 * expected.size());  // nanoGPT's layout: uint16, no header
  std::vector<uint16_t> stored(expected.size());
  std::memcpy(stored.data(), bytes.data(), 2 * stored.size());
  EXPECT_EQ(std::vector<uint32_t>(stored.begin(), stored.end()), expected);

  const std::string run = root + "/run";
  const CommandResult trained =
      RunBaton({"run",   "configs/llama-tiny.yaml", "--set", "data.path=" + bin,
                "--set", "data.format=auto",        "--set", "data.tokenizer=" + model,
                "--set", "model.vocab_size=512",    "--set", "model.num_layers=2",
                "--set", "model.context=64",        "--set", "train.steps=2",
                "--set", "parallel.stages=1",       "--set", "output.dir=" + run});
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const CommandResult generated =
      RunBaton({"generate", run, "--prompt", "The license", "--tokens", "6", "--temperature", "0"});
  ASSERT_EQ(generated.exit_code, 0) << generated.output;
  EXPECT_NE(
      generated.output.find("prompt: " + std::to_string(tokenizer.Encode("The license").size()) +
                            " tokens (" + model + ", 500 tokens)"),
      std::string::npos)
      << generated.output;
  EXPECT_NE(generated.output.find("The license"), std::string::npos) << generated.output;

  const CommandResult exported = RunBaton({"export", run, root + "/hf"});
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_EQ(ReadFile(root + "/hf/tokenizer.model"), ReadFile(model));
  const nlohmann::json config = ReadJson(root + "/hf/tokenizer_config.json");
  EXPECT_EQ(config.at("tokenizer_class"), "LlamaTokenizer");
  EXPECT_EQ(config.at("eos_token"), "</s>");
  EXPECT_EQ(config.at("add_bos_token"), false);
  EXPECT_EQ(ReadJson(root + "/hf/config.json").at("eos_token_id"), 2);
}

}  // namespace
}  // namespace baton::testing
