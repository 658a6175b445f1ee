// GPT-2's pre-tokenizer: the text is cut into pieces before BPE, and no merge crosses a cut.
//
// The pieces are the successive matches of GPT-2's regular expression
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (the first alternative that matches at a position wins; each `+` is greedy), written out by
// hand over UTF-8 code points with the classes of unicode.h. So a word keeps its leading space
// (" world"), digits, letters and punctuation runs are apart ("abc", "123"), and a run of
// whitespace before a word leaves its last character to it: "a   b" is "a", "  ", " b", and
// "\n\nX" is "\n", "\n", "X" (the run is given back one character at a time because of (?!\S)).
// A malformed UTF-8 byte counts as punctuation (neither letter, number nor space).
//
// Pure; safe from any thread.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace baton {

// The pieces of `text` in order, as views into it; they concatenate to `text`.
std::vector<std::string_view> PreTokenize(std::string_view text);

// The first offset b >= `from` that follows an ASCII non-space and a '\n' and precedes a
// non-space (as in "word.\nNext"), or text.size() when there is none. A piece starts at b and
// one ends there, whatever the text on either side, so text cut at b pre-tokenizes into the same
// pieces as the whole (the regex never looks back, and that '\n' is a piece of its own).
size_t PieceBoundaryAfter(std::string_view text, size_t from);

}  // namespace baton
