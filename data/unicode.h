// UTF-8 decoding and the three Unicode classes of GPT-2's pre-tokenizer regex: letters (\p{L}),
// numbers (\p{N}) and whitespace (\s).
//
// Letters and numbers come from a compact table that is exact for the scripts most text uses
// (Latin, Greek, Cyrillic, Armenian, Hebrew, Arabic, Devanagari, Thai, Georgian, Hangul, kana,
// CJK ideographs, full-width forms, digits, super/subscripts, fractions, Roman and circled
// numerals) and classes every other code point as neither; unicode.cc lists the blocks and
// docs/data.md says what that changes. Whitespace is the whole White_Space property.
//
// Pure functions, safe from any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace baton {

// What DecodeUtf8 returns for a byte that does not start a well-formed UTF-8 sequence (a stray
// continuation byte, an overlong form, a surrogate, a truncated sequence): that byte alone, as a
// value that is no letter, number or space.
inline constexpr char32_t kInvalidCodePoint = 0xFFFFFFFF;

struct Utf8CodePoint {
  char32_t value;  // kInvalidCodePoint for a malformed byte
  int length;      // bytes taken, 1..4
};

// The code point starting at text[offset] (offset < text.size()).
Utf8CodePoint DecodeUtf8(std::string_view text, size_t offset);
// Appends c (<= 0x10FFFF, not a surrogate) as UTF-8.
void AppendUtf8(char32_t c, std::string& out);

bool IsLetter(char32_t c);      // \p{L}, within the table's blocks
bool IsNumber(char32_t c);      // \p{N}, within the table's blocks
bool IsWhitespace(char32_t c);  // \s: Unicode White_Space
}  // namespace baton
