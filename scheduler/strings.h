// Small string helpers shared by the scheduler's text parsers (actions, CSV, costs). Internal.
#pragma once

#include <cctype>
#include <string_view>
#include <vector>

namespace baton::scheduler_strings {

// `text` without leading and trailing whitespace.
inline std::string_view Trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

// The pieces of `text` between separators; n separators give n + 1 pieces.
inline std::vector<std::string_view> Split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find(separator, begin);
    if (end == std::string_view::npos) {
      parts.push_back(text.substr(begin));
      return parts;
    }
    parts.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
}

}  // namespace baton::scheduler_strings
