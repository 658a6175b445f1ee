// A byte-level BPE tokenizer in GPT-2's scheme, read from Hugging Face's tokenizer.json or from
// GPT-2's vocab.json + merges.txt (docs/data.md, "Tokenizers").
//
// Encode(text):
//   1. PreTokenize (pretokenize.h) cuts the text into pieces; merges never cross a cut.
//   2. Each byte of a piece becomes the token of its character in GPT-2's byte-to-unicode map
//      (printable bytes map to themselves, the rest to U+0100 and up: space is "Ġ", '\n' "Ċ").
//   3. BPE: while some adjacent pair of tokens is a merge, take the pair with the lowest rank
//      (its line in the merge list) and merge every occurrence of it, left to right.
//   4. The ids of the resulting tokens. Pieces are cached, so repeated words cost a lookup.
// Long text is pre-tokenized a megabyte at a time, cut only where a piece starts anyway
// (PieceBoundaryAfter), so the ids are the same and the working memory stays small.
// Decode(ids) maps each token's characters back to bytes (an added token such as <|endoftext|>
// gives its text); Decode(Encode(text)) == text for any bytes, valid UTF-8 or not.
//
// Text is encoded as ordinary text: a literal "<|endoftext|>" in it is encoded character by
// character, never as the special token (as tiktoken's encode_ordinary and nanoGPT do).
//
// Errors are baton::Error naming the file: missing, malformed JSON, not BPE, a pre-tokenizer or
// normalizer other than GPT-2's, an id >= 65536 (tokens are stored as uint16), a merge or byte
// whose token is not in the vocabulary.
//
// Thread safety: Encode, Decode and the accessors may run on many threads at once (the piece
// cache has a lock). Move-only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace baton {

// GPT-2's document separator, the token `baton data prepare` puts between files.
inline constexpr std::string_view kEndOfText = "<|endoftext|>";

// A file a tokenizer was read from, and the name Hugging Face looks for it under in a model
// folder (tokenizer.json, vocab.json or merges.txt).
struct TokenizerFile {
  std::string path;
  std::string hf_name;
};

class Tokenizer {
 public:
  // `path` is a tokenizer.json; a vocab.json (or PREFIX-vocab.json) with merges.txt (or
  // PREFIX-merges.txt) beside it; or a folder holding tokenizer.json, else vocab.json +
  // merges.txt. A .json file is a tokenizer.json when it has a "model" object.
  static Tokenizer Load(const std::string& path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;
  ~Tokenizer();

  std::vector<uint32_t> Encode(std::string_view text) const;
  // Throws for an id that is not in the vocabulary.
  std::string Decode(std::span<const uint32_t> ids) const;

  // The highest id + 1 (ids may have gaps); <= 65536. A model needs vocab_size >= this.
  int64_t vocab_size() const { return static_cast<int64_t>(token_bytes_.size()); }
  // The id of a vocabulary entry or added token by its text ("<|endoftext|>"), if there is one.
  std::optional<uint32_t> TokenId(std::string_view token) const;
  // The files it was read from, in the order Load read them.
  const std::vector<TokenizerFile>& files() const { return files_; }
  // Whether Encode puts a space before text that does not start with one (a tokenizer.json's
  // ByteLevel add_prefix_space; never for vocab.json + merges.txt, as in GPT-2).
  bool add_prefix_space() const { return add_prefix_space_; }

 private:
  struct Merge {
    uint32_t rank;
    uint32_t id;  // of the merged token
  };
  struct Cache;

  Tokenizer();
  // Builds the tables once vocab_, merges (by rank) and added tokens are in. `source` names
  // the file in errors.
  void Build(const std::vector<std::pair<std::string, std::string>>& merges,
             const std::string& merges_source);
  void AddToken(const std::string& token, int64_t id, const std::string& source);
  void EncodePiece(std::string_view piece, std::vector<uint32_t>& ids) const;

  std::string name_;  // for errors: the path given to Load
  std::vector<TokenizerFile> files_;
  std::unordered_map<std::string, uint32_t> vocab_;      // token text (byte-mapped) -> id
  std::unordered_map<std::string, uint32_t> added_;      // added token content -> id
  std::vector<std::optional<std::string>> token_bytes_;  // id -> the bytes it decodes to
  uint32_t byte_ids_[256] = {};                          // byte -> id of its one-byte token
  bool byte_known_[256] = {};
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;  // a piece that is itself a token skips BPE (newer tokenizers)
  std::unique_ptr<Cache> cache_;
};

// Copies the tokenizer's files into `dir` under their Hugging Face names, each atomically.
void CopyTokenizerFiles(const Tokenizer& tokenizer, const std::string& dir);

}  // namespace baton
