// Fuzzing the token-data readers (data/data.h, docs/data.md): text files and folders (byte-level
// and through a BPE tokenizer), nanoGPT and llm.c .bin files, truncated, flipped, with odd lengths,
// headers with wrong magic, version or token count, tokens out of the vocabulary, and paths that
// are FIFOs, devices, folders or missing. Every case opens the data as training does (and counts
// it as the planner does, and reads batches from it) and ends in a dataset or a baton::Error naming
// the file. Tokenizers (data.tokenizer) are data files too: theirs are mutated and loaded alike.
#include <sys/stat.h>

#include <cstring>

#include "core/temp_dir.h"
#include "data/data.h"
#include "data/tokenizer.h"
#include "tests/fuzz_util.h"

namespace baton {
namespace {

using fuzz::CaseId;
using fuzz::Mutator;

constexpr uint64_t kSeed = 0x5eed0002;
constexpr int32_t kLlmcMagic = 20240520;

std::string Tokens(Mutator& m, size_t count, uint16_t below) {
  std::string bytes(count * 2, '\0');
  for (size_t i = 0; i < count; ++i) {
    const auto token = static_cast<uint16_t>(m.Below(below));
    std::memcpy(bytes.data() + 2 * i, &token, 2);
  }
  return bytes;
}

std::string LlmcHeader(int32_t magic, int32_t version, int32_t count) {
  std::string header(1024, '\0');
  const int32_t words[3] = {magic, version, count};
  std::memcpy(header.data(), words, sizeof(words));
  return header;
}

void SetWord(std::string& bytes, size_t word, int32_t value) {
  if (bytes.size() >= 4 * word + 4) std::memcpy(bytes.data() + 4 * word, &value, 4);
}

// English with multi-byte UTF-8, some invalid bytes and a NUL: what byte-level text and the
// tokenizer meet.
std::string Text(Mutator& m) {
  std::string text;
  for (size_t i = 0, n = 20 + m.Below(200); i < n; ++i) {
    text += m.Pick(std::vector<std::string>{
        "the ", "quick ", "brown ", "fox ", "naïve ", "日本 ", "\n", "  ", "'s ", "123 ",
        "<|endoftext|>", std::string("\xff\xfe", 2), std::string(1, '\0'), "\xf0\x9f\x98\x80 "});
  }
  return text;
}

// Writes one data file, folder or special file at `path` (or nothing: a missing path).
void WriteCase(Mutator& m, const std::string& path) {
  switch (m.Below(6)) {
    case 0:
    case 1: {  // text, possibly mutated
      std::string text = Text(m);
      for (size_t i = 0, n = m.Below(4); i < n; ++i) m.MutateBytes(text);
      fuzz::WriteBytes(path, text);
      return;
    }
    case 2: {  // nanoGPT: raw tokens, possibly out of the vocabulary, odd lengths
      std::string bytes = Tokens(m, 100 + m.Below(400), m.Chance(0.8) ? 256 : 65535);
      for (size_t i = 0, n = m.Below(3); i < n; ++i) m.MutateBytes(bytes);
      fuzz::WriteBytes(path, bytes);
      return;
    }
    case 3: {  // llm.c: header words at their edges, the count right, off or absurd
      const int32_t count = static_cast<int32_t>(50 + m.Below(400));
      std::string bytes =
          LlmcHeader(kLlmcMagic, 1, count) + Tokens(m, static_cast<size_t>(count), 256);
      const std::vector<int32_t> edges = {0,         -1,        1,         2,          count - 1,
                                          count + 1, INT32_MAX, INT32_MIN, kLlmcMagic, 512};
      if (m.Chance(0.5)) SetWord(bytes, m.Below(3), m.Pick(edges));
      if (m.Chance(0.3)) bytes.resize(m.Below(bytes.size() + 1));
      if (m.Chance(0.3)) bytes.resize(m.Pick(std::vector<size_t>{0, 1, 3, 1023, 1024, 1025, 1026}));
      if (m.Chance(0.3)) m.MutateBytes(bytes);
      fuzz::WriteBytes(path, bytes);
      return;
    }
    case 4: {  // a folder: nested files, empty folders, FIFOs and dangling links beside the text
      std::filesystem::create_directories(path + "/b/c");
      std::filesystem::create_directories(path + "/empty");
      if (m.Chance(0.7)) fuzz::WriteBytes(path + "/b/c/x.txt", Text(m));
      if (m.Chance(0.7)) fuzz::WriteBytes(path + "/a.txt", Text(m));
      if (m.Chance(0.3)) ::mkfifo((path + "/b/fifo").c_str(), 0600);
      if (m.Chance(0.3)) std::filesystem::create_symlink(path + "/nowhere", path + "/dangling");
      if (m.Chance(0.3)) std::filesystem::create_directory_symlink(path, path + "/b/loop");
      if (m.Chance(0.3)) std::filesystem::create_symlink(path + "/a.txt", path + "/b/same.txt");
      if (m.Chance(0.2)) std::filesystem::create_symlink("self", path + "/b/self");  // ELOOP
      return;
    }
    default:  // not a regular file: FIFO, device, empty file, link to a FIFO or itself, missing
      switch (m.Below(6)) {
        case 0:
          ::mkfifo(path.c_str(), 0600);
          return;
        case 1:
          std::filesystem::create_symlink("/dev/null", path);
          return;
        case 2:
          fuzz::WriteBytes(path, "");
          return;
        case 3:
          ::mkfifo((path + ".fifo").c_str(), 0600);
          std::filesystem::create_symlink(path + ".fifo", path);
          return;
        case 4:
          std::filesystem::create_symlink(path, path);
          return;
        default:
          return;  // missing
      }
  }
}

// What training does with a dataset once open (docs/data.md): sampled batches, evaluation windows
// of a held-out tail. Checks that the planner's count agrees with what Open read.
void UseDataset(const TokenDataset& dataset, const std::string& path, TokenFormat format,
                const Tokenizer* tokenizer, int64_t seq_len) {
  if (ResolveTokenFormat(path, format) == TokenFormat::kBin || tokenizer == nullptr) {
    EXPECT_EQ(CountTokens(path, format), dataset.size()) << path;
  }
  const int sequences = 3;
  std::vector<int32_t> tokens(static_cast<size_t>(sequences * seq_len)), targets(tokens.size());
  FillBatch(dataset, 1337, 5, 0, sequences, static_cast<int>(seq_len), tokens.data(),
            targets.data());
  const TrainEvalSplit split = SplitTail(dataset.size(), 0.25);
  const TokenDataset eval = dataset.Slice(split.train_tokens, dataset.size(), path + " (eval)");
  const int64_t windows = NumEvalWindows(eval.size(), seq_len);
  const int take = static_cast<int>(std::min<int64_t>(windows, sequences));
  FillEvalWindows(eval, 0, take, static_cast<int>(seq_len), tokens.data(), targets.data());
}

// A tokenizer's files (tokenizer.json, or vocab.json + merges.txt) copied from the fixture with one
// of them mutated; returns the path to load.
std::string WriteTokenizer(Mutator& m, const std::string& dir) {
  const std::string fixture = std::string(BATON_SOURCE_DIR) + "/tests/fixtures/bpe/";
  const bool hf = m.Chance(0.5);
  const std::vector<std::string> names = hf ? std::vector<std::string>{"tokenizer.json"}
                                            : std::vector<std::string>{"vocab.json", "merges.txt"};
  for (const std::string& name : names) {
    fuzz::WriteBytes(dir + "/" + name, fuzz::ReadBytes(fixture + name));
  }
  const std::string mutated = dir + "/" + m.Pick(names);
  std::string bytes = fuzz::ReadBytes(mutated);
  nlohmann::json json = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (!json.is_discarded() && m.Chance(0.7)) {
    for (size_t i = 0, n = 1 + m.Below(3); i < n; ++i) fuzz::MutateJson(m, json);
    bytes = json.dump();
  } else {
    for (size_t i = 0, n = 1 + m.Below(4); i < n; ++i) m.MutateBytes(bytes);
  }
  fuzz::WriteBytes(mutated, bytes);
  return m.Chance(0.3) ? dir : dir + "/" + names.front();
}

TEST(DataFuzzTest, MutatedTokenizersLoadOrFailNamingTheFile) {
  test_util::TempDir dir;
  fuzz::AddressSpaceCap cap(fuzz::kAddressSpaceCap);
  int loaded = 0, refused = 0;
  for (const int index : fuzz::Cases()) {
    const CaseId id{"tokenizer", kSeed + 1, index};
    Mutator m(fuzz::CaseSeed(kSeed + 1, index));
    const std::string case_dir = dir / ("case-" + std::to_string(index));
    std::filesystem::create_directories(case_dir);
    const std::string path = WriteTokenizer(m, case_dir);
    const std::string text = Text(m);
    const fuzz::Outcome outcome = fuzz::RunCase(id, [&] {
      const Tokenizer tokenizer = Tokenizer::Load(path);
      // The contract of any tokenizer that loads (data/tokenizer.h).
      EXPECT_EQ(tokenizer.Decode(tokenizer.Encode(text)), text);
    });
    if (outcome.ok) {
      ++loaded;
    } else {
      ++refused;
      fuzz::ExpectErrorNames(id, outcome.error, case_dir, "the tokenizer's file");
    }
    std::filesystem::remove_all(case_dir);
  }
  std::printf("tokenizer fuzz: %d loaded, %d refused\n", loaded, refused);
  if (fuzz::Cases().size() >= 100) {
    EXPECT_GE(loaded, 10);
  }
}

TEST(DataFuzzTest, MutatedDataFilesLoadOrFailNamingTheFile) {
  test_util::TempDir dir;
  const Tokenizer tokenizer =
      Tokenizer::Load(std::string(BATON_SOURCE_DIR) + "/tests/fixtures/bpe/tokenizer.json");
  fuzz::AddressSpaceCap cap(fuzz::kAddressSpaceCap);
  int loaded = 0, refused = 0;
  for (const int index : fuzz::Cases()) {
    const CaseId id{"data", kSeed, index};
    Mutator m(fuzz::CaseSeed(kSeed, index));
    const std::string case_dir = dir / ("case-" + std::to_string(index));
    std::filesystem::create_directories(case_dir);
    const std::string path =
        case_dir + "/data" + m.Pick(std::vector<std::string>{".bin", ".txt", "", ".bin.txt"});
    WriteCase(m, path);
    const TokenFormat format =
        m.Pick(std::vector<TokenFormat>{TokenFormat::kAuto, TokenFormat::kText, TokenFormat::kBin});
    const Tokenizer* encoder = m.Chance(0.25) ? &tokenizer : nullptr;
    const int64_t vocab_size = m.Pick(std::vector<int64_t>{256, 256, 65536, 2, 300, 0, 70000});
    const int64_t seq_len = m.Pick(std::vector<int64_t>{1, 8, 64, 64, 1 << 20});

    const fuzz::Outcome counted = fuzz::RunCase(id, [&] { CountTokens(path, format); });
    if (!counted.ok) fuzz::ExpectErrorNames(id, counted.error, path, "the data file");
    const fuzz::Outcome outcome = fuzz::RunCase(id, [&] {
      const TokenDataset dataset = TokenDataset::Open(path, format, vocab_size, seq_len, encoder);
      UseDataset(dataset, path, format, encoder, seq_len);
    });
    if (outcome.ok) {
      ++loaded;
    } else {
      ++refused;
      fuzz::ExpectErrorNames(id, outcome.error, path, "the data file");
    }
    std::filesystem::remove_all(case_dir);
  }
  std::printf("data fuzz: %d loaded, %d refused\n", loaded, refused);
  if (fuzz::Cases().size() >= 100) {
    EXPECT_GE(loaded, 10);
  }
}

}  // namespace
}  // namespace baton
