// A SentencePiece model (tokenizer.model: Llama 2's, Mistral's) read and run by Baton: the
// Tokenizer's engine for such a file (data/tokenizer.h, docs/data.md, "SentencePiece").
//
// The file is a serialized sentencepiece.ModelProto; the fields read are its pieces (text, score,
// type), the trainer's model type, byte fallback and special ids, and the normalizer's name,
// dummy prefix, whitespace escaping and removal. Only BPE models with the identity normalizer
// (Llama 2's and Mistral's) are taken; another model type (unigram), a normalization table, or
// whitespace as a suffix is refused naming the file.
//
// Encode(text), as sentencepiece's `encode(text, out_type=int)`, no <s> or </s> added:
//   1. Normalize: with remove_extra_whitespaces, strip leading and trailing spaces and collapse
//      runs of them; with add_dummy_prefix put a space first (a non-empty text); with
//      escape_whitespaces every space becomes "▁" (U+2581).
//   2. Split into characters (UTF-8 sequences; a malformed byte alone); user-defined pieces are
//      not merged into and refused at load (none in Llama 2 or Mistral).
//   3. BPE by score: while some adjacent pair's concatenation is a normal piece, merge the pair
//      whose piece has the highest score (the leftmost among equals).
//   4. Each symbol's id; a symbol that is no piece becomes its bytes' <0xXX> pieces with byte
//      fallback, else the unknown id (a run of unknown symbols one id, as the library does).
// Decode(ids): control pieces give nothing, the unknown piece " ⁇ ", byte pieces their bytes (a
// run of them read as UTF-8, each malformed byte U+FFFD), the others their text with "▁" as a
// space; the first piece's leading "▁" (the dummy prefix) is dropped.
//
// Thread safety: const, and may run on many threads at once. Checked byte for byte against the
// `sentencepiece` Python package on tests/fixtures/sentencepiece.
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

class SentencePieceModel {
 public:
  // Loads `path`; an error names it (missing, not a ModelProto, truncated, a model it cannot
  // run). Llama 3's original/tokenizer.model is tiktoken's text format, not a ModelProto: its
  // tokenizer.json is what Baton reads.
  static std::unique_ptr<SentencePieceModel> Load(const std::string& path);

  std::vector<uint32_t> Encode(std::string_view text) const;
  // Throws, naming the file, for an id that is not a piece.
  std::string Decode(std::span<const uint32_t> ids) const;
  // Pieces, ids 0 .. size-1 (control and unknown pieces included).
  int64_t size() const { return static_cast<int64_t>(pieces_.size()); }
  // The id of a piece by its text ("</s>", "▁the"), if the model has it.
  std::optional<uint32_t> PieceId(std::string_view piece) const;
  // The end-of-sentence piece's id ("</s>" in Llama 2), if the model has one.
  std::optional<uint32_t> eos_id() const;

  enum class Type {
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6
  };
  struct Piece {
    std::string text;
    float score = 0;
    Type type = Type::kNormal;
    uint8_t byte = 0;  // a byte piece's value (<0xXX>)
  };

 private:
  SentencePieceModel() = default;
  std::string Normalize(std::string_view text) const;

  std::string path_;
  std::vector<Piece> pieces_;
  std::unordered_map<std::string, uint32_t> ids_;     // every piece's text -> id
  std::unordered_map<std::string, uint32_t> merged_;  // the normal pieces BPE may form
  uint32_t byte_ids_[256] = {};
  bool byte_fallback_ = false;
  int64_t unk_id_ = 0;
  int64_t eos_id_ = -1;
  std::string unk_surface_;
  bool add_dummy_prefix_ = true;
  bool remove_extra_whitespaces_ = true;
  bool escape_whitespaces_ = true;
};

}  // namespace baton
