// Byte-level BPE: loading tokenizer.json or vocab.json + merges.txt, encoding, decoding (see
// tokenizer.h).
#include "data/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/error.h"
#include "core/files.h"
#include "core/json_fields.h"
#include "data/pretokenize.h"
#include "data/sentencepiece.h"
#include "data/unicode.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using MergeList = std::vector<std::pair<std::string, std::string>>;

constexpr size_t kMaxCachedPieces = 1 << 18;  // then the cache starts over
constexpr size_t kEncodePartBytes = 1 << 20;  // Encode pre-tokenizes about this much at a time

// Input errors name the file (or file:line), not Baton's source line: that is what to fix.
template <typename... Args>
[[noreturn]] void Fail(std::string_view where, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format("{}: {}", where, fmt::format(format, std::forward<Args>(args)...)));
}

// GPT-2's bytes_to_unicode(): bytes that are printable and not a space map to the code point of
// the same value ('!'..'~', '¡'..'¬', '®'..'ÿ'); the other 68, in byte order, to 256, 257, ...
// So every byte is a visible character and no token text holds a space.
struct ByteMap {
  char32_t to_char[256];
  int to_byte[256 + 68];  // indexed by code point; -1 for none

  ByteMap() {
    for (int& b : to_byte) b = -1;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = b;
    }
  }
};

const ByteMap& Bytes() {
  static const ByteMap map;
  return map;
}

// The token text of raw bytes: each byte's character, as UTF-8.
std::string ByteMapped(std::string_view bytes) {
  std::string out;
  for (const char c : bytes) AppendUtf8(Bytes().to_char[static_cast<unsigned char>(c)], out);
  return out;
}

// The bytes a token's text stands for. A character outside the map stands for its own UTF-8
// bytes, as in Hugging Face's ByteLevel decoder.
std::string Unmapped(std::string_view token) {
  std::string out;
  for (size_t offset = 0; offset < token.size();) {
    const Utf8CodePoint cp = DecodeUtf8(token, offset);
    const bool mapped = cp.value < std::size(Bytes().to_byte) && Bytes().to_byte[cp.value] >= 0;
    if (mapped) {
      out.push_back(static_cast<char>(Bytes().to_byte[cp.value]));
    } else {
      out.append(token.substr(offset, static_cast<size_t>(cp.length)));
    }
    offset += static_cast<size_t>(cp.length);
  }
  return out;
}

// Fails unless `path` is a regular file (a symlink to one is fine): "no such file" only when
// nothing is there, else what it is (a FIFO would block the reader, a device never ends).
void CheckRegularFile(const std::string& path, std::string_view what = "") {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (status.type() == fs::file_type::regular) return;
  if (status.type() == fs::file_type::not_found || error) {
    Fail(path, "no such file{}", what);
  }
  Fail(path, "not a regular file (a {}){}",
       status.type() == fs::file_type::fifo        ? "FIFO"
       : status.type() == fs::file_type::directory ? "folder"
       : status.type() == fs::file_type::socket    ? "socket"
                                                   : "device",
       what);
}

// The JSON document of `path`: a syntax error gives its line and column (core/json_fields.h).
Json ReadJson(const std::string& path) {
  CheckRegularFile(path);
  return ParseJsonFile(path);
}

// "a b" -> {"a", "b"}; `where` names the merge in errors.
std::pair<std::string, std::string> SplitMerge(std::string_view line, const std::string& where) {
  const size_t space = line.find(' ');
  if (space == 0 || space == std::string_view::npos || space + 1 == line.size() ||
      line.find(' ', space + 1) != std::string_view::npos) {
    Fail(where, "expected a merge of two tokens separated by one space, got '{}'", line);
  }
  return {std::string(line.substr(0, space)), std::string(line.substr(space + 1))};
}

MergeList ReadMergesTxt(const std::string& path) {
  CheckRegularFile(path, " (the merges for vocab.json)");
  const std::string text = ReadFileToString(path);
  MergeList merges;
  size_t line_number = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + start, end - start);
    start = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_number == 1 && line.starts_with("#version"))) continue;
    merges.push_back(SplitMerge(line, fmt::format("{}:{}", path, line_number)));
  }
  return merges;
}

// Why `value` is not a token id for `token`, or "" when it is one: an integer in [0, 2^31 - 1].
std::string IdProblem(const Json& value, const std::string& token) {
  if (!value.is_number_integer()) {
    return fmt::format("token '{}' has id {}, not an integer", token, DescribeJson(value));
  }
  if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t{kMaxTokenId}) {
    return fmt::format(
        "token '{}' has id {}, more than the largest token id {} (batches carry ids as int32)",
        token, value.dump(), kMaxTokenId);  // as the unsigned text: 2^63 must not print negative
  }
  if (value.get<int64_t>() < 0) {
    return fmt::format("token '{}' has id {}: ids must be in [0, {}] (batches carry ids as int32)",
                       token, value.dump(), kMaxTokenId);
  }
  return "";
}

// The id of `token`, member `token` of `table` (model.vocab, or vocab.json's whole document); an
// error names the file and the key.
int64_t VocabId(const JsonField& table, const std::string& token, const Json& value) {
  if (const std::string problem = IdProblem(value, token); !problem.empty()) {
    table[token].Fail(problem);  // the key's path is made only for the error
  }
  return value.get<int64_t>();
}

struct PreTokenizerConfig {
  PreTokenizerScheme scheme;
  bool add_prefix_space;
};

// A pre-tokenizer's (or normalizer's) "type", "?" without one, or what the value is when it is
// not an object.
std::string TypeOf(const JsonField& step) {
  return step.json().is_object() ? step["type"].OptionalString().value_or("?")
                                 : DescribeJson(step.json());
}

// Llama 3's pre_tokenizer: a Sequence of a Split on Llama 3's regex (Isolated, not inverted) and
// a ByteLevel that only maps bytes. Anything else is refused: its pieces would differ.
PreTokenizerConfig ReadLlama3PreTokenizer(const JsonField& sequence, const std::string& path) {
  const JsonField steps = sequence["pretokenizers"];
  const size_t count = steps.json().is_array() ? steps.json().size() : 0;
  if (count != 2 || TypeOf(steps[0]) != "Split" || TypeOf(steps[1]) != "ByteLevel") {
    std::string types;
    for (size_t i = 0; i < count; ++i) types += (types.empty() ? "" : ", ") + TypeOf(steps[i]);
    Fail(path,
         "pre_tokenizer Sequence [{}] is not supported (only Llama 3's: Split on its regex, then "
         "ByteLevel)",
         types);
  }
  const JsonField split = steps[0];
  const JsonField pattern = split["pattern"];
  if (!pattern.json().is_object() ||
      pattern["Regex"].OptionalString() != std::string(kLlama3SplitPattern)) {
    Fail(path, "pre_tokenizer Split pattern {} is not supported (only Llama 3's regex {})",
         pattern.json().dump(), Json(std::string(kLlama3SplitPattern)).dump());
  }
  const std::string behavior = split["behavior"].OptionalString().value_or("?");
  if (behavior != "Isolated") {
    Fail(path, "pre_tokenizer Split behavior {} is not supported (only Isolated, Llama 3's)",
         behavior);
  }
  if (split["invert"].OptionalBool().value_or(false)) {
    Fail(path, "pre_tokenizer Split with invert true is not supported (Llama 3's is false)");
  }
  const JsonField byte_level = steps[1];
  if (byte_level["use_regex"].OptionalBool().value_or(true)) {
    Fail(path,
         "pre_tokenizer ByteLevel after a Split must have use_regex false, as Llama 3's has "
         "(GPT-2's regex would cut the pieces again)");
  }
  if (byte_level["add_prefix_space"].OptionalBool().value_or(false)) {
    Fail(path,
         "pre_tokenizer ByteLevel after a Split with add_prefix_space true is not supported (it "
         "puts a space before every piece; Llama 3's is false)");
  }
  return {PreTokenizerScheme::kLlama3, false};
}

// GPT-2's pre_tokenizer (ByteLevel with its regex) or Llama 3's.
PreTokenizerConfig ReadPreTokenizer(const JsonField& root, const std::string& path) {
  const JsonField pre = root["pre_tokenizer"];
  const std::string type = TypeOf(pre);
  if (type == "Sequence") return ReadLlama3PreTokenizer(pre, path);
  if (type != "ByteLevel") {
    Fail(path,
         "pre_tokenizer {} is not supported (only ByteLevel, GPT-2's, or Llama 3's Sequence of "
         "Split and ByteLevel)",
         type);
  }
  if (!pre["use_regex"].OptionalBool().value_or(true)) {
    Fail(path,
         "pre_tokenizer ByteLevel with use_regex false is not supported alone (only GPT-2's "
         "split, or after Llama 3's Split)");
  }
  return {PreTokenizerScheme::kGpt2, pre["add_prefix_space"].OptionalBool().value_or(false)};
}

// Checks a tokenizer.json's parts other than the vocabulary and the pre-tokenizer: only
// byte-level BPE without a normalizer is supported.
void CheckHfPipeline(const JsonField& root, const JsonField& model, const std::string& path) {
  const std::string type = model["type"].OptionalString().value_or("BPE");
  if (type != "BPE") Fail(path, "model type '{}' is not supported (only BPE)", type);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const std::optional<std::string> affix = model[key].OptionalString();
    if (affix.has_value() && !affix->empty()) {
      Fail(path, "model.{} {} is not supported (GPT-2's BPE has none)", key, Json(*affix).dump());
    }
  }
  const std::optional<double> dropout = model["dropout"].OptionalNumber();
  if (dropout.has_value() && *dropout != 0) {
    Fail(path, "model.dropout {} is not supported (encoding must be deterministic)", *dropout);
  }
  if (root["normalizer"].present()) {
    Fail(path, "normalizer {} is not supported (GPT-2's and Llama 3's byte-level BPE have none)",
         TypeOf(root["normalizer"]));
  }
}

}  // namespace

struct Tokenizer::Cache {
  std::mutex mutex;
  std::unordered_map<std::string, std::vector<uint32_t>> pieces;  // piece bytes -> ids
};

Tokenizer::Tokenizer() : cache_(std::make_unique<Cache>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::Load(const std::string& path) {
  std::error_code error;
  fs::path json_path(path);
  if (fs::is_directory(json_path, error)) {
    const fs::path folder = json_path;
    json_path = fs::is_regular_file(folder / "tokenizer.json", error) ? folder / "tokenizer.json"
                                                                      : folder / "vocab.json";
    if (!fs::is_regular_file(json_path, error)) {
      if (fs::is_regular_file(folder / "tokenizer.model", error)) {
        return LoadSentencePiece((folder / "tokenizer.model").string());
      }
      Fail(path,
           "the folder holds neither tokenizer.json, nor vocab.json + merges.txt, nor "
           "tokenizer.model");
    }
  } else if (!fs::exists(json_path, error)) {
    Fail(path, "no such file or folder");
  } else if (json_path.extension() == ".model") {
    return LoadSentencePiece(path);
  }
  const std::string file = json_path.string();
  const Json document = ReadJson(file);
  const JsonField root(document, file);
  if (!document.is_object()) Fail(file, "expected a JSON object (tokenizer.json or vocab.json)");

  Tokenizer tokenizer;
  tokenizer.name_ = file;
  MergeList merges;
  std::string merges_source = file;
  if (document.contains("model")) {  // Hugging Face tokenizer.json
    const JsonField model = root["model"];
    if (!model.json().is_object()) Fail(file, "\"model\" is not an object");
    CheckHfPipeline(root, model, file);
    const PreTokenizerConfig pre_tokenizer = ReadPreTokenizer(root, file);
    tokenizer.files_.push_back({file, "tokenizer.json"});
    tokenizer.pre_tokenizer_ = pre_tokenizer.scheme;
    tokenizer.add_prefix_space_ = pre_tokenizer.add_prefix_space;
    tokenizer.ignore_merges_ = model["ignore_merges"].OptionalBool().value_or(false);
    const JsonField vocab = model["vocab"];
    if (!vocab.json().is_object()) Fail(file, "model.vocab is missing or not an object");
    for (const auto& [token, id] : vocab.json().items()) {
      tokenizer.AddToken(token, VocabId(vocab, token, id), file);
    }
    // Without merges a BPE tokenizer gives one id per byte: not what the file's author meant.
    if (!model.json().contains("merges")) {
      Fail(file, "model.merges is missing (BPE needs its merges)");
    }
    const Json& list = model["merges"].json();
    if (!list.is_array()) Fail(file, "model.merges is not a list");
    for (size_t i = 0; i < list.size(); ++i) {
      const Json& merge = list[i];
      if (merge.is_string()) {  // "a b" (older tokenizers versions)
        merges.push_back(
            SplitMerge(merge.get<std::string>(), fmt::format("{}: model.merges[{}]", file, i)));
      } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
                 merge[1].is_string()) {  // ["a", "b"] (newer versions)
        merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
      } else {
        Fail(file, "model.merges[{}] is {}, neither \"a b\" nor [\"a\", \"b\"]", i, merge.dump());
      }
    }
    const JsonField added_tokens = root["added_tokens"];
    const size_t added_count = added_tokens.present() ? added_tokens.Array().json().size() : 0;
    for (size_t i = 0; i < added_count; ++i) {
      const JsonField added = added_tokens[i];
      const std::string content = added["content"].String();
      const JsonField id_field = added["id"];
      if (const std::string problem = IdProblem(id_field.json(), content); !problem.empty()) {
        id_field.Fail(problem);
      }
      const int64_t id = id_field.json().get<int64_t>();
      tokenizer.AddToken(ByteMapped(content), id, file);  // may already be in the vocab
      tokenizer.token_bytes_[static_cast<uint32_t>(id)] = content;
      tokenizer.added_[content] = static_cast<uint32_t>(id);
    }
  } else {  // GPT-2's vocab.json, with merges.txt beside it
    const std::string name = json_path.filename().string();
    // A tokenizer.json that lost its "model" is no flat token -> id map: say so, rather than
    // reading "added_tokens" as a token.
    for (const char* key : {"added_tokens", "pre_tokenizer", "normalizer", "decoder"}) {
      if (document.contains(key)) {
        Fail(file, "a Hugging Face tokenizer.json (it has \"{}\") without its \"model\"", key);
      }
    }
    const std::string merges_name =
        name.ends_with("vocab.json")
            ? name.substr(0, name.size() - std::string_view("vocab.json").size()) + "merges.txt"
            : "merges.txt";
    merges_source = (json_path.parent_path() / merges_name).string();
    for (const auto& [token, id] : document.items()) {
      tokenizer.AddToken(token, VocabId(root, token, id), file);
    }
    merges = ReadMergesTxt(merges_source);
    tokenizer.files_ = {{file, "vocab.json"}, {merges_source, "merges.txt"}};
  }
  tokenizer.Build(merges, merges_source);
  return tokenizer;
}

Tokenizer Tokenizer::LoadSentencePiece(const std::string& path) {
  Tokenizer tokenizer;
  tokenizer.name_ = path;
  tokenizer.sentencepiece_ = SentencePieceModel::Load(path);
  tokenizer.vocab_size_ = tokenizer.sentencepiece_->size();
  tokenizer.files_ = {{path, "tokenizer.model"}};
  return tokenizer;
}

void Tokenizer::AddToken(const std::string& token, int64_t id, const std::string& source) {
  if (id < 0 || id > kMaxTokenId) {
    Fail(source, "token '{}' has id {}: ids must be in [0, {}] (batches carry ids as int32)", token,
         id, kMaxTokenId);
  }
  const auto index = static_cast<uint32_t>(id);
  const auto [it, inserted] = vocab_.emplace(token, index);
  if (!inserted && it->second != id) {
    Fail(source, "token '{}' has two ids, {} and {}", token, it->second, id);
  }
  if (inserted && token_bytes_.contains(index)) {
    Fail(source, "id {} is given to two tokens ('{}' and another)", id, token);
  }
  token_bytes_[index] = Unmapped(token);
  vocab_size_ = std::max(vocab_size_, id + 1);
}

void Tokenizer::Build(const MergeList& merges, const std::string& merges_source) {
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab_.find(ByteMapped(std::string(1, static_cast<char>(b))));
    byte_known_[b] = it != vocab_.end();
    if (byte_known_[b]) byte_ids_[b] = it->second;
  }
  if (merges.size() > std::numeric_limits<uint32_t>::max()) Fail(merges_source, "too many merges");
  const auto id_of = [&](const std::string& token, size_t rank) {
    const auto it = vocab_.find(token);
    if (it == vocab_.end()) {
      Fail(merges_source, "merge {} ('{} {}'): '{}' is not in the vocabulary", rank,
           merges[rank].first, merges[rank].second, token);
    }
    return it->second;
  };
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const uint64_t key = (uint64_t{id_of(left, rank)} << 32) | id_of(right, rank);
    // A repeated pair keeps its first (lowest) rank.
    merges_.emplace(key, Merge{static_cast<uint32_t>(rank), id_of(left + right, rank)});
  }
}

void Tokenizer::EncodePiece(std::string_view piece, std::vector<uint32_t>& ids) const {
  const std::string key(piece);
  {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    const auto it = cache_->pieces.find(key);
    if (it != cache_->pieces.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<uint32_t> symbols;
  const auto whole = ignore_merges_ ? vocab_.find(ByteMapped(piece)) : vocab_.end();
  if (whole != vocab_.end()) {
    symbols.push_back(whole->second);
  } else {
    for (const char c : piece) {
      const auto byte = static_cast<unsigned char>(c);
      if (!byte_known_[byte]) {
        Fail(name_, "unknown token: byte 0x{:02x} (token '{}') is not in the vocabulary", byte,
             ByteMapped(std::string_view(&c, 1)));
      }
      symbols.push_back(byte_ids_[byte]);
    }
  }
  std::vector<uint32_t> merged;
  while (symbols.size() > 1) {
    // The adjacent pair with the lowest rank...
    const Merge* best = nullptr;
    uint64_t best_key = 0;
    for (size_t k = 0; k + 1 < symbols.size(); ++k) {
      const uint64_t pair = (uint64_t{symbols[k]} << 32) | symbols[k + 1];
      const auto it = merges_.find(pair);
      if (it != merges_.end() && (best == nullptr || it->second.rank < best->rank)) {
        best = &it->second;
        best_key = pair;
      }
    }
    if (best == nullptr) break;
    // ... is merged wherever it occurs, left to right.
    merged.clear();
    for (size_t k = 0; k < symbols.size(); ++k) {
      const bool match =
          k + 1 < symbols.size() && ((uint64_t{symbols[k]} << 32) | symbols[k + 1]) == best_key;
      merged.push_back(match ? best->id : symbols[k]);
      if (match) ++k;
    }
    symbols.swap(merged);
  }
  ids.insert(ids.end(), symbols.begin(), symbols.end());
  std::lock_guard<std::mutex> lock(cache_->mutex);
  if (cache_->pieces.size() >= kMaxCachedPieces) cache_->pieces.clear();
  cache_->pieces.emplace(key, std::move(symbols));
}

std::vector<uint32_t> Tokenizer::Encode(std::string_view text) const {
  if (sentencepiece_) return sentencepiece_->Encode(text);
  std::string prefixed;
  if (add_prefix_space_ && !text.empty() && text.front() != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  std::vector<uint32_t> ids;
  // A part at a time, cut where a piece starts anyway: the pre-tokenizer's working memory stays
  // a few megabytes whatever the text's size.
  for (size_t start = 0; start < text.size();) {
    const size_t end = PieceBoundaryAfter(text, start + kEncodePartBytes, pre_tokenizer_);
    for (const std::string_view piece :
         PreTokenize(text.substr(start, end - start), pre_tokenizer_)) {
      EncodePiece(piece, ids);
    }
    start = end;
  }
  return ids;
}

std::string Tokenizer::Decode(std::span<const uint32_t> ids) const {
  if (sentencepiece_) return sentencepiece_->Decode(ids);
  std::string bytes;
  for (const uint32_t id : ids) {
    const auto it = token_bytes_.find(id);
    if (it == token_bytes_.end()) {
      Fail(name_, "id {} is not in the vocabulary ({} ids)", id, vocab_size_);
    }
    bytes += it->second;
  }
  return bytes;
}

std::optional<uint32_t> Tokenizer::TokenId(std::string_view token) const {
  if (sentencepiece_) return sentencepiece_->PieceId(token);
  const std::string key(token);
  if (const auto it = added_.find(key); it != added_.end()) return it->second;
  if (const auto it = vocab_.find(key); it != vocab_.end()) return it->second;
  return std::nullopt;
}

std::optional<uint32_t> Tokenizer::DocumentSeparator() const {
  if (const std::optional<uint32_t> id = TokenId(kEndOfText)) return id;
  if (const std::optional<uint32_t> id = TokenId(kLlama3EndOfText)) return id;
  if (sentencepiece_) return sentencepiece_->eos_id();
  return std::nullopt;
}

void CopyTokenizerFiles(const Tokenizer& tokenizer, const std::string& dir) {
  MakeDirectories(dir);
  for (const TokenizerFile& file : tokenizer.files()) {
    WriteFileAtomically((fs::path(dir) / file.hf_name).string(), ReadFileToString(file.path));
  }
}

}  // namespace baton
