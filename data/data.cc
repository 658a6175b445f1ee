// Token datasets (text, nanoGPT .bin, llm.c .bin), text -> .bin conversion, and batch sampling.
#include "data/data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <utility>

#include "core/error.h"
#include "core/files.h"
#include "core/random.h"
#include "data/tokenizer.h"

namespace baton {
namespace {

// .bin files are little-endian and are used in place (memory-mapped), so the host must be too.
static_assert(std::endian::native == std::endian::little, "Baton reads .bin tokens in place");

// llm.c's data files: 256 int32 header words (magic, version, token count, unused), then tokens.
constexpr int32_t kLlmcMagic = 20240520;
constexpr int32_t kLlmcVersion = 1;
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

TokenFormat Resolve(const std::string& path, TokenFormat format) {
  if (format != TokenFormat::kAuto) return format;
  return std::filesystem::path(path).extension() == ".bin" ? TokenFormat::kBin : TokenFormat::kText;
}

std::string SystemError() { return std::strerror(errno); }

// Appends the bytes of `file` to `tokens`, one token per byte.
void AppendFileBytes(const std::filesystem::path& file, std::vector<uint16_t>& tokens) {
  std::ifstream in(file, std::ios::binary);
  if (!in) BATON_FAIL("{}: cannot open: {}", file.string(), SystemError());
  std::vector<unsigned char> buffer(1 << 20);  // unsigned: bytes 128..255 are tokens 128..255
  while (in) {
    in.read(reinterpret_cast<char*>(buffer.data()), static_cast<std::streamsize>(buffer.size()));
    tokens.insert(tokens.end(), buffer.begin(), buffer.begin() + in.gcount());
  }
  if (in.bad()) BATON_FAIL("{}: read error", file.string());
}

// Every token must be a valid index into the embedding table.
void CheckTokens(const uint16_t* tokens, int64_t size, int64_t vocab_size,
                 const std::string& source) {
  if (vocab_size < 1 || vocab_size > 65536) {
    BATON_FAIL("{}: vocab_size {} is outside [1, 65536] (tokens are uint16)", source, vocab_size);
  }
  if (vocab_size == 65536) return;
  const auto limit = static_cast<uint16_t>(vocab_size);
  const uint16_t* bad = std::find_if(tokens, tokens + size, [&](uint16_t t) { return t >= limit; });
  if (bad != tokens + size) {
    BATON_FAIL("{}: token {} at position {} is >= vocab_size {}", source, *bad, bad - tokens,
               vocab_size);
  }
}

struct Mapping {
  void* address = nullptr;
  size_t bytes = 0;
};

Mapping MapFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) BATON_FAIL("{}: cannot open: {}", path, SystemError());
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    BATON_FAIL("{}: not a regular file", path);
  }
  Mapping mapping;
  mapping.bytes = static_cast<size_t>(info.st_size);
  if (mapping.bytes > 0) {
    mapping.address = ::mmap(nullptr, mapping.bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping.address == MAP_FAILED) {
      const std::string reason = SystemError();
      ::close(fd);
      BATON_FAIL("{}: mmap failed: {}", path, reason);
    }
  }
  ::close(fd);  // the mapping stays valid
  return mapping;
}

// Where the tokens of a mapped .bin file start, and how many there are.
std::pair<size_t, int64_t> LocateBinTokens(const Mapping& mapping, const std::string& path) {
  int32_t header[3] = {0, 0, 0};
  if (mapping.bytes >= kLlmcHeaderBytes) std::memcpy(header, mapping.address, sizeof(header));
  if (header[0] != kLlmcMagic) {  // nanoGPT: nothing but tokens
    if (mapping.bytes % 2 != 0) {
      BATON_FAIL("{}: {} bytes is not a whole number of uint16 tokens", path, mapping.bytes);
    }
    return {0, static_cast<int64_t>(mapping.bytes / 2)};
  }
  if (header[1] != kLlmcVersion) {
    BATON_FAIL("{}: llm.c header version {} is not supported (only {}: uint16 tokens)", path,
               header[1], kLlmcVersion);
  }
  const size_t payload = mapping.bytes - kLlmcHeaderBytes;
  if (header[2] < 0 || payload != static_cast<size_t>(header[2]) * 2) {
    BATON_FAIL("{}: llm.c header says {} tokens but the file holds {} bytes after the header", path,
               header[2], payload);
  }
  return {kLlmcHeaderBytes, header[2]};
}

}  // namespace

TokenDataset TokenDataset::Open(const std::string& path, TokenFormat format, int64_t vocab_size,
                                int64_t seq_len, const Tokenizer* tokenizer) {
  BATON_CHECK(seq_len >= 1, "seq_len must be positive, got {}", seq_len);
  TokenDataset dataset;
  dataset.source_ = path;
  dataset.format_ = Resolve(path, format);
  if (dataset.format_ == TokenFormat::kText) {
    if (tokenizer == nullptr && vocab_size < 256) {
      BATON_FAIL("{}: byte-level text needs vocab_size >= 256, got {}", path, vocab_size);
    }
    dataset.owned_ = ReadTextTokens(path, tokenizer);
    dataset.tokens_ = dataset.owned_.data();
    dataset.size_ = static_cast<int64_t>(dataset.owned_.size());
  } else {
    const Mapping mapping = MapFile(path);
    dataset.mapping_ = mapping.address;
    dataset.mapping_bytes_ = mapping.bytes;
    const auto [offset, count] = LocateBinTokens(mapping, path);
    dataset.tokens_ =
        reinterpret_cast<const uint16_t*>(static_cast<const char*>(mapping.address) + offset);
    dataset.size_ = count;
  }
  CheckTokens(dataset.tokens_, dataset.size_, vocab_size, path);
  if (dataset.size_ < seq_len + 1) {
    BATON_FAIL("{}: {} tokens is shorter than one sample: seq_len + 1 = {} tokens", path,
               dataset.size_, seq_len + 1);
  }
  return dataset;
}

TokenDataset TokenDataset::FromTokens(std::vector<uint16_t> tokens, std::string name,
                                      int64_t vocab_size) {
  TokenDataset dataset;
  dataset.source_ = std::move(name);
  dataset.format_ = TokenFormat::kBin;
  dataset.owned_ = std::move(tokens);
  dataset.tokens_ = dataset.owned_.data();
  dataset.size_ = static_cast<int64_t>(dataset.owned_.size());
  CheckTokens(dataset.tokens_, dataset.size_, vocab_size, dataset.source_);
  return dataset;
}

TokenDataset::TokenDataset(TokenDataset&& other) noexcept { *this = std::move(other); }

TokenDataset& TokenDataset::operator=(TokenDataset&& other) noexcept {
  if (this == &other) return *this;
  Release();
  source_ = std::move(other.source_);
  format_ = other.format_;
  // Moving a vector keeps its buffer, so tokens_ stays valid for owned data.
  owned_ = std::move(other.owned_);
  mapping_ = std::exchange(other.mapping_, nullptr);
  mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
  tokens_ = std::exchange(other.tokens_, nullptr);
  size_ = std::exchange(other.size_, 0);
  return *this;
}

TokenDataset::~TokenDataset() { Release(); }

void TokenDataset::Release() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
  mapping_ = nullptr;
  mapping_bytes_ = 0;
  owned_.clear();
  tokens_ = nullptr;
  size_ = 0;
}

std::vector<std::filesystem::path> ListTextFiles(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path root(path);
  if (fs::is_regular_file(root, error)) return {root};
  if (!fs::is_directory(root, error)) BATON_FAIL("{}: no such file or folder", path);
  std::vector<std::pair<std::string, fs::path>> found;  // (relative path, path)
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file()) continue;  // follows symlinks to files
    found.emplace_back(entry.path().lexically_relative(root).generic_string(), entry.path());
  }
  std::sort(found.begin(), found.end());  // byte order of the relative paths
  std::vector<fs::path> files;
  std::set<fs::path> seen;  // canonical targets already listed
  for (const auto& [relative, file] : found) {
    if (seen.insert(fs::canonical(file)).second) files.push_back(file);
  }
  if (files.empty()) BATON_FAIL("{}: the folder holds no files", path);
  return files;
}

std::vector<uint16_t> ReadTextTokens(const std::string& path, const Tokenizer* tokenizer) {
  std::vector<uint16_t> tokens;
  const std::vector<std::filesystem::path> files = ListTextFiles(path);
  if (tokenizer == nullptr) {
    for (const std::filesystem::path& file : files) AppendFileBytes(file, tokens);
    return tokens;
  }
  const std::optional<uint32_t> separator = tokenizer->TokenId(kEndOfText);
  for (size_t i = 0; i < files.size(); ++i) {
    if (i > 0 && separator.has_value()) tokens.push_back(static_cast<uint16_t>(*separator));
    // Ids are < 65536: Tokenizer::Load refuses larger ones.
    for (const uint32_t id : tokenizer->Encode(ReadFileToString(files[i].string()))) {
      tokens.push_back(static_cast<uint16_t>(id));
    }
  }
  return tokens;
}

int64_t PrepareTextData(const std::string& input_path, const std::string& output_path,
                        const Tokenizer* tokenizer) {
  const std::vector<uint16_t> tokens = ReadTextTokens(input_path, tokenizer);
  if (tokens.empty()) BATON_FAIL("{}: no text to convert (0 tokens)", input_path);
  AtomicFileWriter writer(output_path);  // temp + fsync + rename: never a partial file
  writer.Write(tokens.data(), tokens.size() * sizeof(uint16_t));
  writer.Commit();
  return static_cast<int64_t>(tokens.size());
}

int64_t SampleStart(uint64_t seed, int64_t step, int64_t sequence, int64_t num_tokens,
                    int64_t seq_len) {
  BATON_CHECK(step >= 0 && sequence >= 0, "step {} and sequence {} must be >= 0", step, sequence);
  BATON_CHECK(seq_len >= 1 && num_tokens >= seq_len + 1,
              "{} tokens cannot hold a sample of seq_len {} + 1", num_tokens, seq_len);
  Rng rng = Rng::ForStream(
      seed, {kDataStream, static_cast<uint64_t>(step), static_cast<uint64_t>(sequence)});
  return static_cast<int64_t>(rng.NextBelow(static_cast<uint64_t>(num_tokens - seq_len)));
}

void FillBatch(const TokenDataset& dataset, uint64_t seed, int64_t step, int first_sequence,
               int num_sequences, int seq_len, int32_t* tokens_out, int32_t* targets_out) {
  BATON_CHECK(first_sequence >= 0 && num_sequences >= 0, "bad sequence range {} + {}",
              first_sequence, num_sequences);
  if (dataset.size() < static_cast<int64_t>(seq_len) + 1) {
    BATON_FAIL("{}: {} tokens is shorter than one sample: seq_len + 1 = {} tokens",
               dataset.source(), dataset.size(), static_cast<int64_t>(seq_len) + 1);
  }
  const uint16_t* data = dataset.tokens();
  for (int row = 0; row < num_sequences; ++row) {
    const int64_t start = SampleStart(seed, step, first_sequence + row, dataset.size(), seq_len);
    int32_t* tokens_row = tokens_out + static_cast<int64_t>(row) * seq_len;
    int32_t* targets_row = targets_out + static_cast<int64_t>(row) * seq_len;
    for (int t = 0; t < seq_len; ++t) {
      tokens_row[t] = data[start + t];
      targets_row[t] = data[start + t + 1];
    }
  }
}

}  // namespace baton
