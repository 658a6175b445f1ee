// Packed documents (data.packing; docs/data.md, "Packed documents"): how a row of tokens is cut
// into documents at a separator token. A pure function of the tokens, so every pipeline stage
// computes the same layout from the same sampled rows.
//
// A document ENDS with its separator: the separator belongs to the document before it, and the
// token after it starts a new one. The row's first token starts a document (the tail of one
// that began before the window). Per row of `seq` tokens:
//   segment_starts[t] = t                   when t == 0 or tokens[t-1] == separator
//                     = segment_starts[t-1] otherwise
//   targets[t]        = ignored_target      where tokens[t] == separator (its target, the next
//                                           token, starts the next document), else unchanged
// A token's position within its document is t - segment_starts[t].
#pragma once

#include <cstdint>

namespace baton {

// Writes segment_starts (rows, seq) and overwrites the targets (rows, seq) of separators with
// `ignored_target`. Row-major; tokens and targets as FillBatch writes them. Returns how many
// targets are left counted (not `ignored_target`): 0 when every token is a separator, where the
// rows' mean loss is undefined (the trainer refuses it, docs/data.md).
int64_t PackRows(const int32_t* tokens, int rows, int seq, int32_t separator,
                 int32_t ignored_target, int32_t* segment_starts, int32_t* targets);

}  // namespace baton
