// The pre-tokenizers of byte-level BPE: the text is cut into pieces before BPE, and no merge
// crosses a cut. Two schemes, each a regular expression written out by hand over UTF-8 code
// points with the classes of unicode.h (no regex library), and each with its own safe cut points
// for encoding long text a part at a time.
//
// GPT-2's: the pieces are the successive matches of
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (the first alternative that matches at a position wins; each `+` is greedy). So a word keeps
// its leading space (" world"), digits, letters and punctuation runs are apart ("abc", "123"),
// and a run of whitespace before a word leaves its last character to it: "a   b" is "a", "  ",
// " b", and "\n\nX" is "\n", "\n", "X" (the run is given back one character at a time because
// of (?!\S)).
//
// Llama 3's (kLlama3SplitPattern): the successive matches of these alternatives, in order:
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)   contractions in any case ("'T", "'Re"; "'\u017F" too, the
//                                  long s folding to s)
//   [^\r\n\p{L}\p{N}]?\p{L}+       letters, with one character before them that is no newline,
//                                  letter or number (" world", "\tword", "(paren", "'abc")
//   \p{N}{1,3}                     numbers, three at a time ("1234567" is "123", "456", "7");
//                                  a space before them is a piece of its own
//   " ?[^\s\p{L}\p{N}]+[\r\n]*"    (quoted: it starts with a space) a punctuation run, with an
//                                  optional space before it and the \r and \n right after it
//                                  (".\n\n", " ???\r\n")
//   \s*[\r\n]+                     a whitespace run that holds a newline, up to its last \r or
//                                  \n ("  \n\n", leaving the spaces after it to what follows)
//   \s+(?!\S), \s+                 other whitespace, cut as in GPT-2's
//
// In both, a malformed UTF-8 byte counts as punctuation (neither letter, number nor space).
//
// Pure; safe from any thread.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace baton {

// Llama 3's pre-tokenizer regex exactly as its tokenizer.json spells it (a Split pre-tokenizer's
// pattern); Tokenizer::Load accepts no other Split.
inline constexpr std::string_view kLlama3SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum class PreTokenizerScheme { kGpt2, kLlama3 };

// The pieces of `text` in order, as views into it; they concatenate to `text`.
std::vector<std::string_view> PreTokenize(std::string_view text);  // GPT-2's
std::vector<std::string_view> PreTokenizeLlama3(std::string_view text);
std::vector<std::string_view> PreTokenize(std::string_view text, PreTokenizerScheme scheme);

// Cut points: the first offset b >= `from` where text[0, b) and text[b, end) pre-tokenize into
// the same pieces as the whole text does, or text.size() when there is none found. Each is a
// '\n' followed by a non-space, which ends a piece and starts one whatever the text on either
// side (the regexes never look back; the pieces before it cannot reach past it).
//
// GPT-2's: the '\n' must also follow an ASCII non-space ("word.\nNext"): there the '\n' is a
// piece of its own, while after whitespace it may be joined to the run before it or given back
// to it differently when the text ends there ("\n\n" at the end is one piece, "\n\nX" two).
size_t PieceBoundaryAfter(std::string_view text, size_t from);
// Llama 3's: any '\n' before a non-space. The '\n' is the last character of the piece that
// holds it, ` ?[^\s\p{L}\p{N}]+[\r\n]*` or `\s*[\r\n]+` (no other alternative takes a newline,
// and the one lookahead, (?!\S), belongs to whitespace runs without a newline), and neither of
// those alternatives looks past its end.
size_t Llama3PieceBoundaryAfter(std::string_view text, size_t from);
size_t PieceBoundaryAfter(std::string_view text, size_t from, PreTokenizerScheme scheme);

}  // namespace baton
