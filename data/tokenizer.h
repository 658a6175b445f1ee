// A byte-level BPE tokenizer in GPT-2's or Llama 3's scheme, read from Hugging Face's
// tokenizer.json or from GPT-2's vocab.json + merges.txt, or a SentencePiece tokenizer.model
// (Llama 2, Mistral: data/sentencepiece.h, which Encode and Decode then are) (docs/data.md,
// "Tokenizers").
//
// Encode(text):
//   1. The pre-tokenizer (pretokenize.h: GPT-2's, or Llama 3's for a tokenizer.json whose
//      pre_tokenizer is a Split on Llama 3's regex then a ByteLevel without its own regex) cuts
//      the text into pieces; merges never cross a cut.
//   2. Each byte of a piece becomes the token of its character in GPT-2's byte-to-unicode map
//      (printable bytes map to themselves, the rest to U+0100 and up: space is "Ġ", '\n' "Ċ").
//   3. BPE: while some adjacent pair of tokens is a merge, take the pair with the lowest rank
//      (its line in the merge list) and merge every occurrence of it, left to right.
//      With "ignore_merges" (Llama 3's) a piece that is itself a token is that token, merged
//      or not.
//   4. The ids of the resulting tokens. Pieces are cached, so repeated words cost a lookup.
// Long text is pre-tokenized a megabyte at a time, cut only where a piece starts anyway (the
// scheme's PieceBoundaryAfter), so the ids are the same and the working memory stays small.
// Decode(ids) maps each token's characters back to bytes (an added token such as <|endoftext|>
// gives its text); Decode(Encode(text)) == text for any bytes, valid UTF-8 or not.
//
// Text is encoded as ordinary text: a literal "<|endoftext|>" in it is encoded character by
// character, never as the special token (as tiktoken's encode_ordinary and nanoGPT do), and no
// post-processor runs (Llama 3's would put <|begin_of_text|> first).
//
// Errors are baton::Error naming the file: missing, malformed JSON, not BPE, a pre-tokenizer or
// normalizer other than GPT-2's or Llama 3's (a Split with another pattern among them), an id
// above 2^31 - 1 (batches carry ids as int32), a merge or byte whose token is not in the
// vocabulary; a value of the wrong type names its key path too (core/json_fields.h).
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

#include "data/pretokenize.h"

namespace baton {

class SentencePieceModel;

// GPT-2's document separator, the token `baton data prepare` puts between files.
inline constexpr std::string_view kEndOfText = "<|endoftext|>";
// Llama 3's, put between files when there is no kEndOfText.
inline constexpr std::string_view kLlama3EndOfText = "<|end_of_text|>";
// The largest token id: batches carry ids as int32.
inline constexpr int64_t kMaxTokenId = 2147483647;

// A file a tokenizer was read from, and the name Hugging Face looks for it under in a model
// folder (tokenizer.json, vocab.json or merges.txt).
struct TokenizerFile {
  std::string path;
  std::string hf_name;
};

class Tokenizer {
 public:
  // `path` is a tokenizer.json; a vocab.json (or PREFIX-vocab.json) with merges.txt (or
  // PREFIX-merges.txt) beside it; a SentencePiece model (a file named *.model); or a folder
  // holding tokenizer.json, else vocab.json + merges.txt, else tokenizer.model. A .json file is a
  // tokenizer.json when it has a "model" object.
  static Tokenizer Load(const std::string& path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;
  ~Tokenizer();

  std::vector<uint32_t> Encode(std::string_view text) const;
  // Throws for an id that is not in the vocabulary.
  std::string Decode(std::span<const uint32_t> ids) const;

  // The highest id + 1 (ids may have gaps; Llama 3's run to 128255); <= 2^31. A model needs
  // vocab_size >= this, and token files hold uint32 ids when it is over 65536.
  int64_t vocab_size() const { return vocab_size_; }
  // The id of a vocabulary entry or added token by its text ("<|endoftext|>"), if there is one.
  std::optional<uint32_t> TokenId(std::string_view token) const;
  // The token `baton data prepare` puts between documents: kEndOfText if the vocabulary has it,
  // else kLlama3EndOfText if it has that, else a SentencePiece model's end of sentence ("</s>"),
  // else none.
  std::optional<uint32_t> DocumentSeparator() const;
  PreTokenizerScheme pre_tokenizer() const { return pre_tokenizer_; }
  // The files it was read from, in the order Load read them.
  const std::vector<TokenizerFile>& files() const { return files_; }
  // Whether Encode puts a space before text that does not start with one (a tokenizer.json's
  // ByteLevel add_prefix_space; never for vocab.json + merges.txt, as in GPT-2; a SentencePiece
  // model's add_dummy_prefix is its own, inside it).
  bool add_prefix_space() const { return add_prefix_space_; }
  // Whether it is a SentencePiece model (tokenizer.model).
  bool sentencepiece() const { return sentencepiece_ != nullptr; }

 private:
  struct Merge {
    uint32_t rank;
    uint32_t id;  // of the merged token
  };
  struct Cache;

  Tokenizer();
  static Tokenizer LoadSentencePiece(const std::string& path);
  // Builds the tables once vocab_, merges (by rank) and added tokens are in. `source` names
  // the file in errors.
  void Build(const std::vector<std::pair<std::string, std::string>>& merges,
             const std::string& merges_source);
  void AddToken(const std::string& token, int64_t id, const std::string& source);
  void EncodePiece(std::string_view piece, std::vector<uint32_t>& ids) const;

  std::string name_;  // for errors: the path given to Load
  std::vector<TokenizerFile> files_;
  std::unordered_map<std::string, uint32_t> vocab_;        // token text (byte-mapped) -> id
  std::unordered_map<std::string, uint32_t> added_;        // added token content -> id
  std::unordered_map<uint32_t, std::string> token_bytes_;  // id -> the bytes it decodes to
  int64_t vocab_size_ = 0;                                 // the highest id + 1
  uint32_t byte_ids_[256] = {};                            // byte -> id of its one-byte token
  bool byte_known_[256] = {};
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
  bool add_prefix_space_ = false;
  PreTokenizerScheme pre_tokenizer_ = PreTokenizerScheme::kGpt2;
  bool ignore_merges_ = false;  // a piece that is itself a token skips BPE (newer tokenizers)
  std::unique_ptr<Cache> cache_;
  std::unique_ptr<SentencePieceModel> sentencepiece_;  // set: a tokenizer.model does the work
};

// Copies the tokenizer's files into `dir` under their Hugging Face names, each atomically.
void CopyTokenizerFiles(const Tokenizer& tokenizer, const std::string& dir);

}  // namespace baton
