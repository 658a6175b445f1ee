// Typed reads of a JSON file's fields, each error naming the file and the key path.
//
// A reader of a JSON file (a Hugging Face config.json or index, a checkpoint's state, a
// tokenizer.json) parses it with ParseJsonFile and reads every value through a JsonField, so a
// wrong type is "config.json: rope_scaling.rope_type: expected a string, got number 5", never
// nlohmann's "[json.exception.type_error.302] type must be string, but is number". A member that
// is absent or null reads as absent (Hugging Face writes null for "not set"): an Optional* read
// gives nullopt, a required read is an error naming the key. Errors never quote the file's raw
// bytes: a syntax error gives its line and column, a value is shown as parsed JSON (a string cut to
// 40 characters).
//
// A JsonField is a view: the document it was taken from must outlive it. Thread-compatible.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace baton {

// The JSON document in `path` (a regular file, or a link to one), or an Error:
// "PATH: not valid JSON (syntax error at line 3, column 7)".
nlohmann::json ParseJsonFile(const std::string& path);
// `text` as JSON; `file` names it in errors. `callback`, when given, is nlohmann's parser
// callback (e.g. to see duplicate keys).
nlohmann::json ParseJson(std::string_view text, const std::string& file,
                         const nlohmann::json::parser_callback_t& callback = nullptr);

// "a string", "a number", "null", ...: a JSON value's type, with its value when short
// ("number 5", "string \"yes\"", "boolean true", "an array", "an object", "null").
std::string DescribeJson(const nlohmann::json& value);

// One value of a JSON document (or an absent one) and where it is: the file and the key path
// ("rope_scaling.rope_type", "weight_map[\"lm_head.weight\"]", "files[3].name").
class JsonField {
 public:
  // The whole document `root` of `file`.
  JsonField(const nlohmann::json& root, std::string file);

  // Member `key` of this object: absent when this is absent or null, an error when this is
  // another type.
  JsonField operator[](std::string_view key) const;
  // Element `index` of this array: absent past the end or when this is absent or null, an error
  // when this is another type.
  JsonField operator[](size_t index) const;
  // This value, checked to be an object (an array): an error when absent, null or otherwise.
  JsonField Object() const;
  JsonField Array() const;

  bool present() const { return value_ != nullptr && !value_->is_null(); }
  // The value; null when absent.
  const nlohmann::json& json() const;
  // "FILE: KEY.PATH", or "FILE" for the whole document.
  std::string where() const;
  // Throws baton::Error "where(): why".
  [[noreturn]] void Fail(std::string_view why) const;

  // Required reads: an error naming the key when absent, null or of another type.
  std::string String() const;
  bool Bool() const;
  int64_t Int(int64_t min, int64_t max) const;  // an integer in [min, max]; not 2.0
  double Number() const;                        // any JSON number
  // Optional reads: nullopt when absent or null, otherwise as the required reads.
  std::optional<std::string> OptionalString() const;
  std::optional<bool> OptionalBool() const;
  std::optional<int64_t> OptionalInt(int64_t min, int64_t max) const;
  std::optional<double> OptionalNumber() const;

 private:
  JsonField(const nlohmann::json* value, std::string file, std::string path);
  [[noreturn]] void Expected(const char* what) const;  // "expected WHAT, got ..."

  const nlohmann::json* value_;  // null: absent
  std::string file_;
  std::string path_;
};

}  // namespace baton
