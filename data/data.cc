// Token datasets (text, nanoGPT .bin, llm.c .bin), text -> .bin conversion, and batch sampling.
#include "data/data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
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

// llm.c's data files: 256 int32 header words (magic, version, token count, unused), then tokens:
// uint16 in GPT-2's layout, uint32 in Llama 3's (llm.c's dev/data/data_common.py).
constexpr int32_t kLlmcMagic = 20240520;
constexpr int32_t kLlmcVersion = 1;
constexpr int32_t kLlmcLlama3Magic = 20240801;
constexpr int32_t kLlmcLlama3Version = 7;
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);
// Ids of a tokenizer with more than this many are stored as uint32.
constexpr int64_t kUint16Vocab = 65536;

std::string SystemError() { return std::strerror(errno); }

// Appends the bytes of `file` to `tokens`, one token per byte.
template <typename Token>
void AppendFileBytes(const std::filesystem::path& file, std::vector<Token>& tokens) {
  const MappedFile bytes = MappedFile::Open(file.string());  // never blocks on a FIFO
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());  // 128..255 too
  tokens.insert(tokens.end(), data, data + bytes.size());
}

// ReadTextTokens into `tokens`; Token is uint16_t only when the tokenizer's ids fit it.
template <typename Token>
void AppendTextTokens(const std::string& path, const Tokenizer* tokenizer,
                      std::vector<Token>& tokens) {
  const std::vector<std::filesystem::path> files = ListTextFiles(path);
  if (tokenizer == nullptr) {
    for (const std::filesystem::path& file : files) AppendFileBytes(file, tokens);
    return;
  }
  const std::optional<uint32_t> separator = tokenizer->DocumentSeparator();
  for (size_t i = 0; i < files.size(); ++i) {
    if (i > 0 && separator.has_value()) tokens.push_back(static_cast<Token>(*separator));
    for (const uint32_t id : tokenizer->Encode(ReadFileToString(files[i].string()))) {
      tokens.push_back(static_cast<Token>(id));  // < vocab_size(), which Token holds
    }
  }
}

bool NeedsUint32(const Tokenizer* tokenizer) {
  return tokenizer != nullptr && tokenizer->vocab_size() > kUint16Vocab;
}

// Every token must be a valid index into the embedding table.
template <typename Token>
void CheckTokens(const Token* tokens, int64_t size, int64_t vocab_size, const std::string& source) {
  if (vocab_size < 1 || vocab_size > kMaxTokenId + 1) {
    BATON_FAIL("{}: vocab_size {} is outside [1, {}] (batches carry ids as int32)", source,
               vocab_size, kMaxTokenId + 1);
  }
  if (vocab_size > int64_t{std::numeric_limits<Token>::max()}) return;
  const auto limit = static_cast<Token>(vocab_size);
  const Token* bad = std::find_if(tokens, tokens + size, [&](Token t) { return t >= limit; });
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
  const int fd = OpenRegularFile(path);  // never blocks on a FIFO
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    ::close(fd);
    BATON_FAIL("{}: cannot stat: {}", path, SystemError());
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

// Where the tokens of a mapped .bin file start, how many there are, and their width.
struct BinLayout {
  size_t offset;
  int64_t count;
  int token_bytes;
};

BinLayout LocateBinTokens(const Mapping& mapping, const std::string& path) {
  int32_t header[3] = {0, 0, 0};
  if (mapping.bytes >= sizeof(int32_t)) {  // a short file's words past its end stay 0
    std::memcpy(header, mapping.address, std::min(sizeof(header), mapping.bytes));
  }
  const bool llmc = header[0] == kLlmcMagic || header[0] == kLlmcLlama3Magic;
  if (llmc && mapping.bytes < kLlmcHeaderBytes) {  // not tokens: a header cut short
    BATON_FAIL(
        "{}: starts with llm.c's {}header magic {} but is {} bytes, shorter than the {}-byte "
        "header: the file is truncated",
        path, header[0] == kLlmcLlama3Magic ? "Llama 3 " : "", header[0], mapping.bytes,
        kLlmcHeaderBytes);
  }
  int token_bytes = 2;
  if (header[0] == kLlmcMagic) {
    if (header[1] != kLlmcVersion) {
      BATON_FAIL("{}: llm.c header version {} is not supported (only {}: uint16 tokens)", path,
                 header[1], kLlmcVersion);
    }
  } else if (header[0] == kLlmcLlama3Magic) {
    if (header[1] != kLlmcLlama3Version) {
      BATON_FAIL(
          "{}: llm.c Llama 3 header (magic {}) version {} is not supported (only {}: uint32 "
          "tokens)",
          path, kLlmcLlama3Magic, header[1], kLlmcLlama3Version);
    }
    token_bytes = 4;
  } else {  // nanoGPT: nothing but uint16 tokens
    if (mapping.bytes % 2 != 0) {
      BATON_FAIL("{}: {} bytes is not a whole number of uint16 tokens", path, mapping.bytes);
    }
    return {0, static_cast<int64_t>(mapping.bytes / 2), 2};
  }
  const size_t payload = mapping.bytes - kLlmcHeaderBytes;
  if (header[2] < 0 || payload != static_cast<size_t>(header[2]) * token_bytes) {
    BATON_FAIL("{}: llm.c header says {} tokens but the file holds {} bytes after the header", path,
               header[2], payload);
  }
  return {kLlmcHeaderBytes, header[2], token_bytes};
}

}  // namespace

// Tokens in memory (text, FromTokens) or a .bin file's read-only mapping.
struct TokenDataset::Storage {
  std::vector<uint16_t> owned16;
  std::vector<uint32_t> owned32;
  Mapping mapping;
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (mapping.address != nullptr) ::munmap(mapping.address, mapping.bytes);
  }
};

TokenDataset TokenDataset::Open(const std::string& path, TokenFormat format, int64_t vocab_size,
                                int64_t seq_len, const Tokenizer* tokenizer) {
  BATON_CHECK(seq_len >= 1, "seq_len must be positive, got {}", seq_len);
  TokenDataset dataset;
  dataset.source_ = path;
  dataset.format_ = ResolveTokenFormat(path, format);
  auto storage = std::make_shared<Storage>();
  if (dataset.format_ == TokenFormat::kText) {
    if (tokenizer == nullptr && vocab_size < 256) {
      BATON_FAIL("{}: byte-level text needs vocab_size >= 256, got {}", path, vocab_size);
    }
    if (NeedsUint32(tokenizer)) {
      AppendTextTokens(path, tokenizer, storage->owned32);
      dataset.tokens_ = storage->owned32.data();
      dataset.token_bytes_ = 4;
      dataset.size_ = static_cast<int64_t>(storage->owned32.size());
    } else {
      AppendTextTokens(path, tokenizer, storage->owned16);
      dataset.tokens_ = storage->owned16.data();
      dataset.size_ = static_cast<int64_t>(storage->owned16.size());
    }
  } else {
    storage->mapping = MapFile(path);
    const BinLayout layout = LocateBinTokens(storage->mapping, path);
    dataset.tokens_ = static_cast<const char*>(storage->mapping.address) + layout.offset;
    dataset.token_bytes_ = layout.token_bytes;
    dataset.size_ = layout.count;
  }
  dataset.storage_ = std::move(storage);
  dataset.CheckTokens(vocab_size);
  if (dataset.size_ < seq_len + 1) {
    BATON_FAIL("{}: {} tokens is shorter than one sample: seq_len + 1 = {} tokens", path,
               dataset.size_, seq_len + 1);
  }
  return dataset;
}

TokenDataset TokenDataset::FromTokens(std::vector<uint32_t> tokens, std::string name,
                                      int64_t vocab_size) {
  TokenDataset dataset;
  dataset.source_ = std::move(name);
  dataset.format_ = TokenFormat::kBin;
  auto storage = std::make_shared<Storage>();
  storage->owned32 = std::move(tokens);
  dataset.tokens_ = storage->owned32.data();
  dataset.token_bytes_ = 4;
  dataset.size_ = static_cast<int64_t>(storage->owned32.size());
  dataset.storage_ = std::move(storage);
  dataset.CheckTokens(vocab_size);
  return dataset;
}

void TokenDataset::CheckTokens(int64_t vocab_size) const {
  if (token_bytes_ == 2) {
    baton::CheckTokens(static_cast<const uint16_t*>(tokens_), size_, vocab_size, source_);
  } else {
    baton::CheckTokens(static_cast<const uint32_t*>(tokens_), size_, vocab_size, source_);
  }
}

void TokenDataset::CopyTokens(int64_t begin, int64_t count, int32_t* out) const {
  BATON_CHECK(begin >= 0 && count >= 0 && begin + count <= size_, "{}: tokens [{}, {}) of {}",
              source_, begin, begin + count, size_);
  if (token_bytes_ == 2) {
    const uint16_t* tokens = static_cast<const uint16_t*>(tokens_) + begin;
    std::copy(tokens, tokens + count, out);
  } else {
    const uint32_t* tokens = static_cast<const uint32_t*>(tokens_) + begin;
    std::transform(tokens, tokens + count, out, [](uint32_t t) { return static_cast<int32_t>(t); });
  }
}

TokenDataset TokenDataset::Slice(int64_t begin, int64_t end, std::string name) const {
  BATON_CHECK(0 <= begin && begin <= end && end <= size_, "{}: slice [{}, {}) of {} tokens",
              source_, begin, end, size_);
  TokenDataset slice = *this;
  slice.source_ = std::move(name);
  slice.tokens_ = static_cast<const char*>(tokens_) + begin * token_bytes_;
  slice.size_ = end - begin;
  return slice;
}

bool TokenDataset::memory_mapped() const {
  return storage_ != nullptr && storage_->mapping.address != nullptr;
}

TokenFormat ResolveTokenFormat(const std::string& path, TokenFormat format) {
  if (format != TokenFormat::kAuto) return format;
  return std::filesystem::path(path).extension() == ".bin" ? TokenFormat::kBin : TokenFormat::kText;
}

int64_t CountTokens(const std::string& path, TokenFormat format) {
  if (ResolveTokenFormat(path, format) == TokenFormat::kText) {
    int64_t bytes = 0;
    for (const std::filesystem::path& file : ListTextFiles(path)) {
      std::error_code error;
      const uintmax_t size = std::filesystem::file_size(file, error);
      if (error) BATON_FAIL("{}: cannot read its size: {}", file.string(), error.message());
      bytes += static_cast<int64_t>(size);
    }
    return bytes;
  }
  Mapping mapping = MapFile(path);
  const int64_t count = LocateBinTokens(mapping, path).count;
  if (mapping.address != nullptr) ::munmap(mapping.address, mapping.bytes);
  return count;
}

std::vector<std::filesystem::path> ListTextFiles(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path root(path);
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) BATON_FAIL("{}: no such file or folder", path);
  if (S_ISREG(info.st_mode)) return {root};
  if (!S_ISDIR(info.st_mode)) {
    BATON_FAIL("{}: is {}, not a regular file or folder", path, FileKind(info.st_mode));
  }
  std::vector<std::pair<std::string, fs::path>> found;  // (relative path, path)
  std::error_code error;
  for (fs::recursive_directory_iterator it(root, error), end; !error && it != end;
       it.increment(error)) {
    // Links to files count; a link that resolves to no regular file (dangling, a loop) is
    // skipped like a FIFO or a folder.
    std::error_code status_error;
    if (!it->is_regular_file(status_error)) continue;
    found.emplace_back(it->path().lexically_relative(root).generic_string(), it->path());
  }
  if (error) BATON_FAIL("{}: cannot list the folder: {}", path, error.message());
  std::sort(found.begin(), found.end());  // byte order of the relative paths
  std::vector<fs::path> files;
  std::set<fs::path> seen;  // canonical targets already listed
  for (const auto& [relative, file] : found) {
    const fs::path target = fs::canonical(file, error);
    if (error) BATON_FAIL("{}: cannot resolve: {}", file.string(), error.message());
    if (seen.insert(target).second) files.push_back(file);
  }
  if (files.empty()) BATON_FAIL("{}: the folder holds no files", path);
  return files;
}

std::vector<uint32_t> ReadTextTokens(const std::string& path, const Tokenizer* tokenizer) {
  std::vector<uint32_t> tokens;
  AppendTextTokens(path, tokenizer, tokens);
  return tokens;
}

namespace {

// Writes `tokens` to `output_path` in `header`'s layout (none: nanoGPT's), atomically.
template <typename Token>
int64_t WriteTokenFile(const std::vector<Token>& tokens, const std::vector<int32_t>& header,
                       const std::string& input_path, const std::string& output_path) {
  if (tokens.empty()) BATON_FAIL("{}: no text to convert (0 tokens)", input_path);
  AtomicFileWriter writer(output_path);  // temp + fsync + rename: never a partial file
  if (!header.empty()) writer.Write(header.data(), header.size() * sizeof(int32_t));
  writer.Write(tokens.data(), tokens.size() * sizeof(Token));
  writer.Commit();
  return static_cast<int64_t>(tokens.size());
}

}  // namespace

int64_t PrepareTextData(const std::string& input_path, const std::string& output_path,
                        const Tokenizer* tokenizer) {
  if (!NeedsUint32(tokenizer)) {  // nanoGPT: raw uint16 tokens
    std::vector<uint16_t> tokens;
    AppendTextTokens(input_path, tokenizer, tokens);
    return WriteTokenFile(tokens, {}, input_path, output_path);
  }
  // llm.c's Llama 3 layout: the header counts tokens in an int32.
  const std::vector<uint32_t> tokens = ReadTextTokens(input_path, tokenizer);
  if (tokens.size() > size_t{std::numeric_limits<int32_t>::max()}) {
    BATON_FAIL("{}: {} tokens are more than an llm.c header can count (2^31 - 1)", input_path,
               tokens.size());
  }
  std::vector<int32_t> header(kLlmcHeaderBytes / sizeof(int32_t), 0);
  header[0] = kLlmcLlama3Magic;
  header[1] = kLlmcLlama3Version;
  header[2] = static_cast<int32_t>(tokens.size());
  return WriteTokenFile(tokens, header, input_path, output_path);
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

namespace {
// Row `row` of a (rows, seq_len) batch: tokens data[start, start + seq_len), targets one later.
void CopyWindow(const TokenDataset& dataset, int64_t start, int seq_len, int row,
                int32_t* tokens_out, int32_t* targets_out) {
  const int64_t offset = static_cast<int64_t>(row) * seq_len;
  dataset.CopyTokens(start, seq_len, tokens_out + offset);
  dataset.CopyTokens(start + 1, seq_len, targets_out + offset);
}
}  // namespace

void FillBatch(const TokenDataset& dataset, uint64_t seed, int64_t step, int first_sequence,
               int num_sequences, int seq_len, int32_t* tokens_out, int32_t* targets_out) {
  BATON_CHECK(first_sequence >= 0 && num_sequences >= 0, "bad sequence range {} + {}",
              first_sequence, num_sequences);
  if (dataset.size() < static_cast<int64_t>(seq_len) + 1) {
    BATON_FAIL("{}: {} tokens is shorter than one sample: seq_len + 1 = {} tokens",
               dataset.source(), dataset.size(), static_cast<int64_t>(seq_len) + 1);
  }
  for (int row = 0; row < num_sequences; ++row) {
    const int64_t start = SampleStart(seed, step, first_sequence + row, dataset.size(), seq_len);
    CopyWindow(dataset, start, seq_len, row, tokens_out, targets_out);
  }
}

TrainEvalSplit SplitTail(int64_t num_tokens, double eval_fraction) {
  BATON_CHECK(num_tokens >= 0 && eval_fraction >= 0.0 && eval_fraction < 1.0,
              "cannot split {} tokens at fraction {}", num_tokens, eval_fraction);
  TrainEvalSplit split;
  split.eval_tokens =
      static_cast<int64_t>(std::floor(static_cast<double>(num_tokens) * eval_fraction));
  split.train_tokens = num_tokens - split.eval_tokens;
  return split;
}

int64_t NumEvalWindows(int64_t num_tokens, int64_t seq_len) {
  BATON_CHECK(seq_len >= 1, "seq_len must be positive, got {}", seq_len);
  return num_tokens < 1 ? 0 : (num_tokens - 1) / seq_len;
}

void FillEvalWindows(const TokenDataset& dataset, int64_t first_window, int num_windows,
                     int seq_len, int32_t* tokens_out, int32_t* targets_out) {
  const int64_t available = NumEvalWindows(dataset.size(), seq_len);
  BATON_CHECK(first_window >= 0 && num_windows >= 0, "bad window range {} + {}", first_window,
              num_windows);
  if (first_window + num_windows > available) {
    BATON_FAIL("{}: evaluation window {} is past the last of its {} windows of {} tokens",
               dataset.source(), first_window + num_windows - 1, available, seq_len);
  }
  for (int row = 0; row < num_windows; ++row) {
    CopyWindow(dataset, (first_window + row) * static_cast<int64_t>(seq_len), seq_len, row,
               tokens_out, targets_out);
  }
}

}  // namespace baton
