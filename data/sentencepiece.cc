#include "data/sentencepiece.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <queue>

#include "core/error.h"
#include "core/files.h"
#include "data/unicode.h"

namespace baton {
namespace {

constexpr std::string_view kSpace = "\xe2\x96\x81";  // "▁" U+2581, SentencePiece's space
constexpr int kBpe = 2;                              // TrainerSpec.ModelType.BPE

// The protobuf wire format, as much as a ModelProto needs: varints, length-delimited fields and
// 32/64-bit values. Every read is bounds-checked; a short or malformed message throws, naming the
// file.
class WireReader {
 public:
  WireReader(std::string_view bytes, const std::string& path) : bytes_(bytes), path_(path) {}

  bool done() const { return at_ == bytes_.size(); }

  uint64_t Varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      Need(1);
      const auto byte = static_cast<uint8_t>(bytes_[at_++]);
      value |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80u) == 0) return value;
    }
    Fail("a varint longer than 10 bytes");
  }
  // (field number, wire type) of the next field.
  std::pair<uint64_t, int> Tag() {
    const uint64_t tag = Varint();
    return {tag >> 3, static_cast<int>(tag & 7)};
  }
  std::string_view Bytes() {
    const uint64_t length = Varint();
    Need(length);
    const std::string_view out = bytes_.substr(at_, length);
    at_ += length;
    return out;
  }
  float Fixed32Float() {
    Need(4);
    uint32_t bits = 0;
    for (int i = 0; i < 4; ++i) bits |= uint32_t{static_cast<uint8_t>(bytes_[at_ + i])} << (8 * i);
    at_ += 4;
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
  }
  void Skip(int wire_type) {
    switch (wire_type) {
      case 0:
        Varint();
        return;
      case 1:
        Need(8);
        at_ += 8;
        return;
      case 2:
        Bytes();
        return;
      case 5:
        Need(4);
        at_ += 4;
        return;
      default:
        Fail(fmt::format("wire type {}", wire_type));
    }
  }
  void Expect(int wire_type, int expected, uint64_t field) {
    if (wire_type != expected) Fail(fmt::format("field {} has wire type {}", field, wire_type));
  }
  [[noreturn]] void Fail(const std::string& what) const {
    BATON_FAIL(
        "{}: not a SentencePiece model (a sentencepiece.ModelProto): {} at byte {}; a "
        "tokenizer.model in tiktoken's text format (Llama 3's original/) is not one: give "
        "its tokenizer.json",
        path_, what, at_);
  }

 private:
  void Need(uint64_t n) const {
    if (n > bytes_.size() - at_) Fail("the message ends early");
  }
  std::string_view bytes_;
  const std::string& path_;
  size_t at_ = 0;
};

// The int32 of a varint (negative ids are 10-byte two's complement).
int64_t Int32(uint64_t varint) { return static_cast<int32_t>(static_cast<uint32_t>(varint)); }

SentencePieceModel::Piece ReadPiece(std::string_view bytes, const std::string& path) {
  WireReader in(bytes, path);
  SentencePieceModel::Piece piece;
  while (!in.done()) {
    const auto [field, wire] = in.Tag();
    if (field == 1) {
      in.Expect(wire, 2, field);
      piece.text = std::string(in.Bytes());
    } else if (field == 2) {
      in.Expect(wire, 5, field);
      piece.score = in.Fixed32Float();
    } else if (field == 3) {
      in.Expect(wire, 0, field);
      const uint64_t type = in.Varint();
      if (type < 1 || type > 6) in.Fail(fmt::format("piece type {}", type));
      piece.type = static_cast<SentencePieceModel::Type>(type);
    } else {
      in.Skip(wire);
    }
  }
  return piece;
}

// What a ModelProto's trainer_spec and normalizer_spec say, with the library's defaults for
// what they leave out.
struct Settings {
  int model_type = 1;  // unigram
  bool whitespace_suffix = false;
  bool byte_fallback = false;
  int64_t unk_id = 0;
  int64_t eos_id = 2;
  std::string unk_surface = " \xe2\x81\x87 ";  // " ⁇ "
  std::string normalizer = "nmt_nfkc";
  bool charsmap = false;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

void ReadTrainerSpec(std::string_view bytes, const std::string& path, Settings& settings) {
  WireReader spec(bytes, path);
  while (!spec.done()) {
    const auto [field, wire] = spec.Tag();
    if (field == 3 && wire == 0) {
      settings.model_type = static_cast<int>(spec.Varint());
    } else if (field == 24 && wire == 0) {
      settings.whitespace_suffix = spec.Varint() != 0;
    } else if (field == 35 && wire == 0) {
      settings.byte_fallback = spec.Varint() != 0;
    } else if (field == 40 && wire == 0) {
      settings.unk_id = Int32(spec.Varint());
    } else if (field == 42 && wire == 0) {
      settings.eos_id = Int32(spec.Varint());
    } else if (field == 44 && wire == 2) {
      settings.unk_surface = std::string(spec.Bytes());
    } else {
      spec.Skip(wire);
    }
  }
}

void ReadNormalizerSpec(std::string_view bytes, const std::string& path, Settings& settings) {
  WireReader spec(bytes, path);
  while (!spec.done()) {
    const auto [field, wire] = spec.Tag();
    if (field == 1 && wire == 2) {
      settings.normalizer = std::string(spec.Bytes());
    } else if (field == 2 && wire == 2) {
      settings.charsmap = !spec.Bytes().empty();
    } else if (field == 3 && wire == 0) {
      settings.add_dummy_prefix = spec.Varint() != 0;
    } else if (field == 4 && wire == 0) {
      settings.remove_extra_whitespaces = spec.Varint() != 0;
    } else if (field == 5 && wire == 0) {
      settings.escape_whitespaces = spec.Varint() != 0;
    } else {
      spec.Skip(wire);
    }
  }
}

// One "a run of symbols" node of the merge: [begin, end) of the normalized text.
struct Symbol {
  size_t begin, end;
  int prev, next;  // -1 for none
};

struct Candidate {
  float score;
  int left;
  size_t size;  // the pair's bytes when queued: a merge since then makes it stale
  bool operator<(const Candidate& other) const {  // the queue's top: highest score, then leftmost
    if (score != other.score) return score < other.score;
    return left > other.left;
  }
};

}  // namespace

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(const std::string& path) {
  std::error_code error;
  BATON_CHECK(std::filesystem::is_regular_file(path, error), "{}: no such file or folder", path);
  const std::string bytes = ReadFileToString(path);
  std::unique_ptr<SentencePieceModel> model(new SentencePieceModel());
  model->path_ = path;
  Settings settings;
  WireReader in(bytes, path);
  while (!in.done()) {
    const auto [field, wire] = in.Tag();
    if (field == 1 || field == 2 || field == 3) in.Expect(wire, 2, field);
    if (field == 1) {
      model->pieces_.push_back(ReadPiece(in.Bytes(), path));
    } else if (field == 2) {
      ReadTrainerSpec(in.Bytes(), path, settings);
    } else if (field == 3) {
      ReadNormalizerSpec(in.Bytes(), path, settings);
    } else {
      in.Skip(wire);
    }
  }
  model->byte_fallback_ = settings.byte_fallback;
  model->unk_id_ = settings.unk_id;
  model->eos_id_ = settings.eos_id;
  model->unk_surface_ = settings.unk_surface;
  model->add_dummy_prefix_ = settings.add_dummy_prefix;
  model->remove_extra_whitespaces_ = settings.remove_extra_whitespaces;
  model->escape_whitespaces_ = settings.escape_whitespaces;
  BATON_CHECK(!model->pieces_.empty(), "{}: a SentencePiece model without pieces", path);
  BATON_CHECK(settings.model_type == kBpe,
              "{}: a SentencePiece {} model; Baton runs BPE models (Llama 2's, Mistral's) only",
              path,
              settings.model_type == 1 ? "unigram" : fmt::format("type-{}", settings.model_type));
  BATON_CHECK(settings.normalizer == "identity" && !settings.charsmap,
              "{}: normalizer \"{}\"; Baton runs SentencePiece models with the identity "
              "normalizer (Llama 2's, Mistral's) only",
              path, settings.normalizer);
  BATON_CHECK(!settings.whitespace_suffix, "{}: treat_whitespace_as_suffix is not supported", path);
  bool bytes_known[256] = {};
  for (size_t id = 0; id < model->pieces_.size(); ++id) {
    Piece& piece = model->pieces_[id];
    const auto index = static_cast<uint32_t>(id);
    BATON_CHECK(model->ids_.emplace(piece.text, index).second, "{}: piece '{}' appears twice", path,
                piece.text);
    BATON_CHECK(piece.type != Type::kUserDefined,
                "{}: user-defined piece '{}': not supported (Llama 2 and Mistral have none)", path,
                piece.text);
    if (piece.type == Type::kNormal) model->merged_.emplace(piece.text, index);
    if (piece.type == Type::kByte) {
      unsigned value = 0;
      BATON_CHECK(piece.text.size() == 6 && piece.text.starts_with("<0x") &&
                      piece.text.ends_with(">") &&
                      std::sscanf(piece.text.c_str() + 3, "%2X", &value) == 1 && value < 256,
                  "{}: byte piece '{}' is not <0xXX>", path, piece.text);
      piece.byte = static_cast<uint8_t>(value);
      model->byte_ids_[value] = index;
      bytes_known[value] = true;
    }
  }
  BATON_CHECK(model->unk_id_ >= 0 && model->unk_id_ < model->size() &&
                  model->pieces_[static_cast<size_t>(model->unk_id_)].type == Type::kUnknown,
              "{}: unk_id {} is not the unknown piece", path, model->unk_id_);
  if (model->byte_fallback_) {
    for (int b = 0; b < 256; ++b) {
      BATON_CHECK(bytes_known[b], "{}: byte fallback without the piece <0x{:02X}>", path, b);
    }
  }
  return model;
}

std::string SentencePieceModel::Normalize(std::string_view text) const {
  std::string_view kept = text;
  std::string collapsed;
  if (remove_extra_whitespaces_) {
    while (!kept.empty() && kept.front() == ' ') kept.remove_prefix(1);
    while (!kept.empty() && kept.back() == ' ') kept.remove_suffix(1);
    for (size_t i = 0; i < kept.size(); ++i) {
      if (kept[i] == ' ' && i > 0 && kept[i - 1] == ' ') continue;
      collapsed.push_back(kept[i]);
    }
    kept = collapsed;
  }
  if (kept.empty()) return "";
  std::string out;
  if (add_dummy_prefix_) out += escape_whitespaces_ ? kSpace : " ";
  for (const char c : kept) {
    if (c == ' ' && escape_whitespaces_) {
      out += kSpace;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::vector<uint32_t> SentencePieceModel::Encode(std::string_view text) const {
  const std::string normalized = Normalize(text);
  std::vector<Symbol> symbols;
  for (size_t at = 0; at < normalized.size();) {
    const size_t length = static_cast<size_t>(DecodeUtf8(normalized, at).length);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({at, at + length, index - 1, -1});
    if (index > 0) symbols[index - 1].next = index;
    at += length;
  }
  const auto piece_of = [&](int left, int right) {
    return std::string_view(normalized)
        .substr(symbols[left].begin, symbols[right].end - symbols[left].begin);
  };
  std::priority_queue<Candidate> agenda;
  const auto consider = [&](int left) {
    if (left < 0 || symbols[left].next < 0) return;
    const std::string_view piece = piece_of(left, symbols[left].next);
    const auto it = merged_.find(std::string(piece));
    if (it == merged_.end()) return;
    agenda.push({pieces_[it->second].score, left, piece.size()});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) consider(i);
  while (!agenda.empty()) {
    const Candidate top = agenda.top();
    agenda.pop();
    Symbol& left = symbols[top.left];
    // Stale: the left symbol was merged into another, or grew, or lost its right neighbour.
    if (left.begin == left.end || left.next < 0 ||
        symbols[left.next].end - left.begin != top.size) {
      continue;
    }
    Symbol& right = symbols[left.next];
    left.end = right.end;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    right.begin = right.end;  // emptied
    consider(left.prev);
    consider(top.left);
  }
  std::vector<uint32_t> ids;
  bool previous_unknown = false;
  for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const std::string piece(piece_of(i, i));
    if (const auto it = merged_.find(piece); it != merged_.end()) {
      ids.push_back(it->second);
      previous_unknown = false;
    } else if (byte_fallback_) {
      for (const char c : piece) ids.push_back(byte_ids_[static_cast<uint8_t>(c)]);
      previous_unknown = false;
    } else if (!previous_unknown) {  // a run of unknown symbols is one unknown id
      ids.push_back(static_cast<uint32_t>(unk_id_));
      previous_unknown = true;
    }
  }
  return ids;
}

std::string SentencePieceModel::Decode(std::span<const uint32_t> ids) const {
  std::string text, bytes;
  const auto flush_bytes = [&] {  // a run of byte pieces, read as UTF-8
    for (size_t at = 0; at < bytes.size();) {
      const Utf8CodePoint c = DecodeUtf8(bytes, at);
      if (c.value == kInvalidCodePoint) {
        text += "\xef\xbf\xbd";  // U+FFFD
      } else {
        text.append(bytes, at, static_cast<size_t>(c.length));
      }
      at += static_cast<size_t>(c.length);
    }
    bytes.clear();
  };
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t id = ids[i];
    BATON_CHECK(id < pieces_.size(), "{}: id {} is not in the vocabulary ({} ids)", path_, id,
                pieces_.size());
    const Piece& piece = pieces_[id];
    if (piece.type == Type::kByte) {
      bytes.push_back(static_cast<char>(piece.byte));
      continue;
    }
    flush_bytes();
    if (piece.type == Type::kControl) continue;
    if (piece.type == Type::kUnknown) {
      text += unk_surface_;
      continue;
    }
    std::string_view surface = piece.text;
    if (i == 0 && add_dummy_prefix_ && surface.starts_with(kSpace)) {
      surface.remove_prefix(kSpace.size());  // the dummy prefix
    }
    for (size_t at = 0; at < surface.size();) {
      if (surface.substr(at).starts_with(kSpace)) {
        text.push_back(' ');
        at += kSpace.size();
      } else {
        text.push_back(surface[at++]);
      }
    }
  }
  flush_bytes();
  return text;
}

std::optional<uint32_t> SentencePieceModel::PieceId(std::string_view piece) const {
  const auto it = ids_.find(std::string(piece));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

std::optional<uint32_t> SentencePieceModel::eos_id() const {
  if (eos_id_ < 0 || eos_id_ >= size()) return std::nullopt;
  return static_cast<uint32_t>(eos_id_);
}

}  // namespace baton
