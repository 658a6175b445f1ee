// GPT-2's and Llama 3's pre-tokenizer regexes, by hand (see pretokenize.h).
#include "data/pretokenize.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"
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

// The length in code points of GPT-2's contraction ('s 't 're 've 'm 'll 'd) at `i`, or 0.
size_t Gpt2ContractionAt(const std::vector<CodePoint>& cps, size_t i) {
  if (cps[i].value != U'\'' || i + 1 >= cps.size()) return 0;
  const char32_t first = cps[i + 1].value;
  if (first == U's' || first == U't' || first == U'm' || first == U'd') return 2;
  if (i + 2 >= cps.size()) return 0;
  const char32_t second = cps[i + 2].value;
  if ((first == U'r' || first == U'v') && second == U'e') return 3;
  if (first == U'l' && second == U'l') return 3;
  return 0;
}

// The end (exclusive, in code points) of GPT-2's regex's match at `i`.
size_t Gpt2MatchEnd(const std::vector<CodePoint>& cps, size_t i) {
  const size_t n = cps.size();
  if (const size_t contraction = Gpt2ContractionAt(cps, i); contraction > 0) return i + contraction;
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

// Llama 3's contractions are case-insensitive: Unicode's case folding takes 'A'..'Z' to
// 'a'..'z' and the long s (U+017F) to 's', and nothing else to the letters they use.
char32_t FoldContractionLetter(char32_t c) {
  if (c >= U'A' && c <= U'Z') return c - U'A' + U'a';
  return c == U'\u017F' ? U's' : c;
}

size_t Llama3ContractionAt(const std::vector<CodePoint>& cps, size_t i) {
  if (cps[i].value != U'\'' || i + 1 >= cps.size()) return 0;
  const char32_t first = FoldContractionLetter(cps[i + 1].value);
  if (first == U's' || first == U't' || first == U'm' || first == U'd') return 2;
  if (i + 2 >= cps.size()) return 0;
  const char32_t second = FoldContractionLetter(cps[i + 2].value);
  if ((first == U'r' || first == U'v') && second == U'e') return 3;
  if (first == U'l' && second == U'l') return 3;
  return 0;
}

bool IsNewline(char32_t c) { return c == U'\r' || c == U'\n'; }

// The end of the run of `kind` starting at `from`.
size_t RunEnd(const std::vector<CodePoint>& cps, size_t from, CharClass kind) {
  while (from < cps.size() && cps[from].kind == kind) ++from;
  return from;
}

// The end (exclusive, in code points) of Llama 3's regex's match at `i`, trying its alternatives
// in order.
size_t Llama3MatchEnd(const std::vector<CodePoint>& cps, size_t i) {
  const size_t n = cps.size();
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (const size_t contraction = Llama3ContractionAt(cps, i); contraction > 0) {
    return i + contraction;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  const CharClass kind = cps[i].kind;
  if (kind == CharClass::kLetter) return RunEnd(cps, i, CharClass::kLetter);
  const bool may_lead_letters =
      kind == CharClass::kOther || (kind == CharClass::kSpace && !IsNewline(cps[i].value));
  if (may_lead_letters && i + 1 < n && cps[i + 1].kind == CharClass::kLetter) {
    return RunEnd(cps, i + 1, CharClass::kLetter);
  }
  // \p{N}{1,3}
  if (kind == CharClass::kNumber) {
    size_t end = i + 1;
    while (end < n && end < i + 3 && cps[end].kind == CharClass::kNumber) ++end;
    return end;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  const size_t run_start =
      cps[i].value == U' ' && i + 1 < n && cps[i + 1].kind == CharClass::kOther ? i + 1 : i;
  if (cps[run_start].kind == CharClass::kOther) {
    size_t end = RunEnd(cps, run_start, CharClass::kOther);
    while (end < n && IsNewline(cps[end].value)) ++end;
    return end;
  }
  // Whitespace from here on. '\s*[\r\n]+': up to the run's last \r or \n, if it has one.
  const size_t space_end = RunEnd(cps, i, CharClass::kSpace);
  for (size_t end = space_end; end > i; --end) {
    if (IsNewline(cps[end - 1].value)) return end;
  }
  // '\s+(?!\S)', then '\s+': as in GPT-2's.
  if (space_end == n || space_end - i == 1) return space_end;
  return space_end - 1;
}

// The successive matches of a regex whose match at `i` ends at match_end(cps, i).
template <typename MatchEnd>
std::vector<std::string_view> Split(std::string_view text, MatchEnd match_end) {
  std::vector<CodePoint> cps;
  cps.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    const Utf8CodePoint cp = DecodeUtf8(text, offset);
    cps.push_back({cp.value, ClassOf(cp.value), offset});
    offset += static_cast<size_t>(cp.length);
  }
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < cps.size();) {
    const size_t end = match_end(cps, i);
    const size_t last_byte = end < cps.size() ? cps[end].offset : text.size();
    pieces.push_back(text.substr(cps[i].offset, last_byte - cps[i].offset));
    i = end;
  }
  return pieces;
}

}  // namespace

std::vector<std::string_view> PreTokenize(std::string_view text) {
  return Split(text, Gpt2MatchEnd);
}

std::vector<std::string_view> PreTokenizeLlama3(std::string_view text) {
  return Split(text, Llama3MatchEnd);
}

std::vector<std::string_view> PreTokenize(std::string_view text, PreTokenizerScheme scheme) {
  switch (scheme) {
    case PreTokenizerScheme::kGpt2:
      return PreTokenize(text);
    case PreTokenizerScheme::kLlama3:
      return PreTokenizeLlama3(text);
  }
  BATON_FAIL("unknown pre-tokenizer scheme {}", static_cast<int>(scheme));
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

size_t Llama3PieceBoundaryAfter(std::string_view text, size_t from) {
  // b is a boundary when text[b - 1] is '\n' and text[b] starts a non-space (pretokenize.h).
  size_t newline = std::max<size_t>(from, 1) - 1;
  while ((newline = text.find('\n', newline)) != std::string_view::npos) {
    const size_t boundary = newline + 1;
    if (boundary >= text.size()) break;
    if (!IsWhitespace(DecodeUtf8(text, boundary).value)) return boundary;
    newline = boundary;
  }
  return text.size();
}

size_t PieceBoundaryAfter(std::string_view text, size_t from, PreTokenizerScheme scheme) {
  switch (scheme) {
    case PreTokenizerScheme::kGpt2:
      return PieceBoundaryAfter(text, from);
    case PreTokenizerScheme::kLlama3:
      return Llama3PieceBoundaryAfter(text, from);
  }
  BATON_FAIL("unknown pre-tokenizer scheme {}", static_cast<int>(scheme));
}

}  // namespace baton
