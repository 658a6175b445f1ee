// Typed JSON field reads with errors naming the file and the key (see json_fields.h).
#include "core/json_fields.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "core/files.h"

namespace baton {
namespace {

using Json = nlohmann::json;

// A key that reads as itself after a dot ("rope_type"); others are quoted ("[\"a.b\"]").
bool IsPlainKey(std::string_view key) {
  if (key.empty() || (key[0] >= '0' && key[0] <= '9')) return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// "line 3, column 7" of the byte at `offset` (0-based) of `text`.
std::string LineAndColumn(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  const std::string_view before = text.substr(0, offset);
  const size_t line = 1 + static_cast<size_t>(std::count(before.begin(), before.end(), '\n'));
  const size_t newline = before.rfind('\n');
  const size_t column = offset - (newline == std::string_view::npos ? 0 : newline + 1) + 1;
  return fmt::format("line {}, column {}", line, column);
}

}  // namespace

Json ParseJson(std::string_view text, const std::string& file,
               const Json::parser_callback_t& callback) {
  const bool blank = text.find_first_not_of(" \t\r\n") == std::string_view::npos;
  BATON_CHECK(!blank, "{}: empty, not JSON", file);
  try {
    return Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::parse_error& e) {
    // e.what() quotes the bytes last read: name the place instead.
    BATON_FAIL("{}: not valid JSON (syntax error at {})", file,
               LineAndColumn(text, e.byte > 0 ? e.byte - 1 : 0));
  } catch (const Json::exception& e) {
    // out_of_range.406, a number beyond a double, is the only other parse failure.
    BATON_FAIL("{}: not valid JSON for Baton: a number overflows a double (error {})", file, e.id);
  }
}

Json ParseJsonFile(const std::string& path) { return ParseJson(ReadFileToString(path), path); }

std::string DescribeJson(const Json& value) {
  constexpr size_t kMaxShown = 40;
  switch (value.type()) {
    case Json::value_t::null:
    case Json::value_t::discarded:
      return "null";
    case Json::value_t::boolean:
      return fmt::format("boolean {}", value.get<bool>());
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return fmt::format("number {}", value.dump());
    case Json::value_t::string: {
      const std::string shown = value.dump(-1, ' ', false, Json::error_handler_t::replace);
      return shown.size() <= kMaxShown ? "string " + shown
                                       : "string " + shown.substr(0, kMaxShown) + "...\"";
    }
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::binary:
      break;
  }
  return "a binary value";
}

JsonField::JsonField(const Json& root, std::string file) : JsonField(&root, std::move(file), "") {}

JsonField::JsonField(const Json* value, std::string file, std::string path)
    : value_(value), file_(std::move(file)), path_(std::move(path)) {}

const Json& JsonField::json() const {
  static const Json kNull;
  return value_ != nullptr ? *value_ : kNull;
}

std::string JsonField::where() const { return path_.empty() ? file_ : file_ + ": " + path_; }

void JsonField::Fail(std::string_view why) const { BATON_FAIL("{}: {}", where(), why); }

void JsonField::Expected(const char* what) const {
  if (value_ == nullptr) Fail(fmt::format("missing; expected {}", what));
  Fail(fmt::format("expected {}, got {}", what, DescribeJson(*value_)));
}

JsonField JsonField::operator[](std::string_view key) const {
  std::string path =
      IsPlainKey(key)
          ? (path_.empty() ? std::string(key) : path_ + "." + std::string(key))
          : path_ + "[" + Json(key).dump(-1, ' ', false, Json::error_handler_t::replace) + "]";
  if (!present()) return JsonField(nullptr, file_, std::move(path));
  if (!value_->is_object()) Expected("an object");
  const auto it = value_->find(key);
  return JsonField(it == value_->end() ? nullptr : &*it, file_, std::move(path));
}

JsonField JsonField::operator[](size_t index) const {
  std::string path = fmt::format("{}[{}]", path_, index);
  if (!present()) return JsonField(nullptr, file_, std::move(path));
  if (!value_->is_array()) Expected("an array");
  return JsonField(index < value_->size() ? &(*value_)[index] : nullptr, file_, std::move(path));
}

JsonField JsonField::Object() const {
  if (!present() || !value_->is_object()) Expected("an object");
  return *this;
}

JsonField JsonField::Array() const {
  if (!present() || !value_->is_array()) Expected("an array");
  return *this;
}

std::string JsonField::String() const {
  if (!present() || !value_->is_string()) Expected("a string");
  return value_->get<std::string>();
}

bool JsonField::Bool() const {
  if (!present() || !value_->is_boolean()) Expected("a boolean");
  return value_->get<bool>();
}

int64_t JsonField::Int(int64_t min, int64_t max) const {
  if (!present() || !value_->is_number_integer()) Expected("an integer");
  const bool over = value_->is_number_unsigned() &&
                    value_->get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()};
  const int64_t value = over ? 0 : value_->get<int64_t>();
  if (over || value < min || value > max) {
    Fail(fmt::format("{} is out of range [{}, {}]", value_->dump(), min, max));
  }
  return value;
}

double JsonField::Number() const {
  if (!present() || !value_->is_number()) Expected("a number");
  return value_->get<double>();
}

std::optional<std::string> JsonField::OptionalString() const {
  return present() ? std::optional(String()) : std::nullopt;
}

std::optional<bool> JsonField::OptionalBool() const {
  return present() ? std::optional(Bool()) : std::nullopt;
}

std::optional<int64_t> JsonField::OptionalInt(int64_t min, int64_t max) const {
  return present() ? std::optional(Int(min, max)) : std::nullopt;
}

std::optional<double> JsonField::OptionalNumber() const {
  return present() ? std::optional(Number()) : std::nullopt;
}

}  // namespace baton
