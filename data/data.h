// Training data: a token stream in host memory, and the deterministic rule that picks each
// sequence of each step from it (docs/data.md states the rule so that other code can reproduce it).
//
// Sources: text (a file, or a folder of files read recursively in sorted order; one token per
// byte, or the ids of a BPE tokenizer, tokenizer.h), nanoGPT `.bin` files (raw little-endian uint16
// tokens), and llm.c `.bin` files (a 256 x int32 header, then the tokens: magic 20240520 version 1
// for uint16 tokens, GPT-2's; magic 20240801 version 7 for uint32 tokens, Llama 3's). Ids are
// uint32 to whoever reads them, whatever the width they are stored in.
//
// The dataset is host data, not tensor memory, so it is not booked in the MemoryLedger: the ledger
// accounts for what a stage's device must hold (params, grads, optimizer, activations, buffers),
// which the planner predicts and budgets; the token stream is read-only input that only the first
// and last stages touch a few kilobytes of per step. `.bin` files are memory-mapped, so they cost
// page cache (shared by every process on the node) rather than private memory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace baton {

class Tokenizer;

enum class TokenFormat { kAuto, kText, kBin };

// An immutable token stream. Copies and slices share the tokens (an owned buffer or a memory
// mapping, released with the last of them); safe to read from many threads at once. The tokens
// are stored as uint16 or uint32 (a .bin file's layout, or for text whether the tokenizer's ids
// fit 16 bits) and read as uint32.
class TokenDataset {
 public:
  // Opens `path` as `format` (kAuto: a path ending in ".bin" is kBin, anything else kText).
  // Text is encoded with `tokenizer` when one is given (ReadTextTokens), else byte-level.
  // Checks, naming the file in any error: the source exists and is readable; byte-level text
  // needs vocab_size >= 256; every token is < vocab_size; there are at least seq_len + 1 tokens
  // (one sample and its shifted targets).
  static TokenDataset Open(const std::string& path, TokenFormat format, int64_t vocab_size,
                           int64_t seq_len, const Tokenizer* tokenizer = nullptr);
  // A dataset over tokens already in memory (tests, synthetic data); checks tokens < vocab_size.
  static TokenDataset FromTokens(std::vector<uint32_t> tokens, std::string name,
                                 int64_t vocab_size);

  // Tokens [begin, end) of this stream, sharing them, under the name `name` (used in errors).
  TokenDataset Slice(int64_t begin, int64_t end, std::string name) const;

  int64_t size() const { return size_; }  // number of tokens
  uint32_t operator[](int64_t i) const {
    return token_bytes_ == 2 ? static_cast<const uint16_t*>(tokens_)[i]
                             : static_cast<const uint32_t*>(tokens_)[i];
  }
  // Tokens [begin, begin + count) into `out` as int32 (ids are < 2^31: Open checks them against
  // a vocab_size of at most 2^31). The range must be within the stream.
  void CopyTokens(int64_t begin, int64_t count, int32_t* out) const;
  int token_bytes() const { return token_bytes_; }  // as stored: 2 (uint16) or 4 (uint32)
  const std::string& source() const { return source_; }
  TokenFormat format() const { return format_; }  // kText or kBin, never kAuto
  bool memory_mapped() const;

 private:
  struct Storage;  // an owned buffer or a read-only mapping
  TokenDataset() = default;
  void CheckTokens(int64_t vocab_size) const;  // every token < vocab_size, naming source_

  std::string source_;
  TokenFormat format_ = TokenFormat::kText;
  std::shared_ptr<const Storage> storage_;
  const void* tokens_ = nullptr;  // uint16_t or uint32_t, as token_bytes_ says
  int token_bytes_ = 2;
  int64_t size_ = 0;
};

// The format `path` is read as: `format`, or for kAuto a path ending in ".bin" is kBin, else kText.
TokenFormat ResolveTokenFormat(const std::string& path, TokenFormat format);

// How many tokens `path` holds as `format` (as Open would read them), from file sizes and
// headers alone: what the planner needs to count evaluation batches without reading the data.
int64_t CountTokens(const std::string& path, TokenFormat format);

// The files that byte-level text at `path` reads, in order: `path` itself if it is a file; for a
// folder, every regular file below it (symlinks followed, each target once), sorted by the bytes
// of its path relative to `path` (with '/' separators).
std::vector<std::filesystem::path> ListTextFiles(const std::string& path);

// The tokens of the text at `path` (a file or folder, as above). Byte-level (no tokenizer): one
// token per byte, the files concatenated with nothing between them. With a tokenizer: each file
// encoded on its own (no piece spans two files), with the tokenizer's DocumentSeparator()
// ("<|endoftext|>", else Llama 3's "<|end_of_text|>") between consecutive files when its
// vocabulary has one, nothing otherwise. No <|begin_of_text|> is added (docs/data.md).
std::vector<uint32_t> ReadTextTokens(const std::string& path, const Tokenizer* tokenizer);

// Converts text (a file or folder, as ReadTextTokens reads it) into a .bin file at
// `output_path`: a nanoGPT .bin of uint16 tokens when ids fit (byte-level, or a tokenizer with
// vocab_size <= 65536), else llm.c's Llama 3 layout (header magic 20240801, version 7, then
// uint32 tokens). Written to a temporary file in the same folder and renamed into place, so a
// reader never sees half a file. Returns the number of tokens written.
int64_t PrepareTextData(const std::string& input_path, const std::string& output_path,
                        const Tokenizer* tokenizer = nullptr);

// The stream id of data sampling, "data" in ASCII: Rng::ForStream(seed, {kDataStream, step, i}).
inline constexpr uint64_t kDataStream = 0x64617461;

// The first token of sequence `sequence` (0-based within the step) of step `step` (0-based):
// Rng::ForStream(seed, {kDataStream, step, sequence}).NextBelow(num_tokens - seq_len).
int64_t SampleStart(uint64_t seed, int64_t step, int64_t sequence, int64_t num_tokens,
                    int64_t seq_len);

// Fills sequences first_sequence .. first_sequence + num_sequences - 1 of step `step`, row-major
// (num_sequences, seq_len): tokens = data[start, start + seq_len), targets = data[start + 1,
// start + seq_len + 1). Micro-batch k of size b is first_sequence = k * b, num_sequences = b.
void FillBatch(const TokenDataset& dataset, uint64_t seed, int64_t step, int first_sequence,
               int num_sequences, int seq_len, int32_t* tokens_out, int32_t* targets_out);

// Held-out data taken from the tail of the training stream (data.eval_fraction): the last
// floor(N * fraction) tokens are for evaluation, the rest for training, so no training window
// (whose last target is at most token N_train - 1) sees an evaluation token.
struct TrainEvalSplit {
  int64_t train_tokens = 0;  // the stream's first tokens
  int64_t eval_tokens = 0;   // the rest
};
TrainEvalSplit SplitTail(int64_t num_tokens, double eval_fraction);

// Evaluation windows (docs/data.md): window w of a stream of N tokens is tokens [w*L, w*L + L)
// with targets [w*L + 1, w*L + L + 1): consecutive, never overlapping, no randomness; there are
// (N - 1) / L of them. Eval batch k of B sequences is windows k*B .. k*B + B - 1, and its
// micro-batch j of b is windows k*B + j*b .. k*B + j*b + b - 1.
int64_t NumEvalWindows(int64_t num_tokens, int64_t seq_len);

// Fills windows first_window .. first_window + num_windows - 1, row-major (num_windows, seq_len);
// an error naming the dataset when the last of them is beyond NumEvalWindows.
void FillEvalWindows(const TokenDataset& dataset, int64_t first_window, int num_windows,
                     int seq_len, int32_t* tokens_out, int32_t* targets_out);

}  // namespace baton
