// Helpers shared by the tokenizer tests (tokenizer_test, llama3_tokenizer_test,
// sentencepiece_test): a fixture file's bytes, and the message of the baton::Error an action
// throws.
#pragma once

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "core/error.h"

namespace baton::tokenizer_test {

// The file's bytes ("" when it cannot be read: the comparison that follows then fails).
inline std::string ReadText(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// What `action` threw as baton::Error, or "(no error)".
inline std::string ErrorOf(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace baton::tokenizer_test
