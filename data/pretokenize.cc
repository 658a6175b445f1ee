// GPT-2's pre-tokenizer regex, by hand (see pretokenize.h).
#include "data/pretokenize.h"

#include <algorithm>
#include <cstdint>

#include "data/unicode.h"

namespace baton {
namespace {

enum class CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

struct CodePoint {
  char32_t value;
  CharClass kind;
  size_t offset;  // of its first byte in the text
};

CharClass ClassOf(char32_t c) {
  if (IsLetter(c)) return CharClass::kLetter;
  if (IsNumber(c)) return CharClass::kNumber;
  if (IsWhitespace(c)) return CharClass::kSpace;
  return CharClass::kOther;  // \p{P}, \p{S}, marks, controls, malformed bytes, ...
}

// The length in code points of the contraction ('s 't 're 've 'm 'll 'd) at `i`, or 0.
size_t ContractionAt(const std::vector<CodePoint>& cps, size_t i) {
  if (cps[i].value != U'\'' || i + 1 >= cps.size()) return 0;
  const char32_t first = cps[i + 1].value;
  if (first == U's' || first == U't' || first == U'm' || first == U'd') return 2;
  if (i + 2 >= cps.size()) return 0;
  const char32_t second = cps[i + 2].value;
  if ((first == U'r' || first == U'v') && second == U'e') return 3;
  if (first == U'l' && second == U'l') return 3;
  return 0;
}

// The end (exclusive, in code points) of the regex's match at `i`.
size_t MatchEnd(const std::vector<CodePoint>& cps, size_t i) {
  const size_t n = cps.size();
  if (const size_t contraction = ContractionAt(cps, i); contraction > 0) return i + contraction;
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional space, then a run of one class.
  size_t run_start = i;
  if (cps[i].value == U' ' && i + 1 < n && cps[i + 1].kind != CharClass::kSpace) run_start = i + 1;
  const CharClass kind = cps[run_start].kind;
  size_t end = run_start;
  while (end < n && cps[end].kind == kind) ++end;
  if (kind != CharClass::kSpace) return end;
  // '\s+(?!\S)': the whitespace run, less its last character when a non-space follows it;
  // a single space before a non-space is left to '\s+'.
  if (end == n || end - i == 1) return end;
  return end - 1;
}

}  // namespace

std::vector<std::string_view> PreTokenize(std::string_view text) {
  std::vector<CodePoint> cps;
  cps.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    const Utf8CodePoint cp = DecodeUtf8(text, offset);
    cps.push_back({cp.value, ClassOf(cp.value), offset});
    offset += static_cast<size_t>(cp.length);
  }
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < cps.size();) {
    const size_t end = MatchEnd(cps, i);
    const size_t last_byte = end < cps.size() ? cps[end].offset : text.size();
    pieces.push_back(text.substr(cps[i].offset, last_byte - cps[i].offset));
    i = end;
  }
  return pieces;
}

size_t PieceBoundaryAfter(std::string_view text, size_t from) {
  // b is a boundary when text[b - 2], text[b - 1], text[b] are an ASCII non-space, '\n', a
  // non-space: the whitespace run there is the '\n' alone, a piece in the whole text and at the
  // end of text[0, b) alike.
  const auto ascii_non_space = [](char c) {
    return static_cast<unsigned char>(c) < 0x80 && !IsWhitespace(static_cast<char32_t>(c));
  };
  size_t newline = std::max<size_t>(from, 2) - 1;
  while ((newline = text.find('\n', newline)) != std::string_view::npos) {
    const size_t boundary = newline + 1;
    if (boundary >= text.size()) break;
    if (newline >= 1 && ascii_non_space(text[newline - 1]) &&
        !IsWhitespace(DecodeUtf8(text, boundary).value)) {
      return boundary;
    }
    newline = boundary;
  }
  return text.size();
}

}  // namespace baton
