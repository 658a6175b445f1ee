// Next-token logits for `baton generate`: a whole model's layers (one process; the embedding
// first, the head last) run over B growing sequences at once (a batch of prompts, of any
// lengths), either by recomputing the window for every token or with a key-value cache. Rows are
// independent: each row's logits are those of its sequence decoded alone, up to float rounding
// (GEMMs over B rows instead of 1).
//
// A row's window is its sequence's last min(n, context) tokens: learned absolute positions
// (GPT-2) put its first token at position 0.
// - MakeWindowDecoder: every call runs Forward (the training forward) over the rows' windows,
//   right-padded to the longest (causal attention keeps the padding out of the real tokens), and
//   reads each row's last real row of the head's stashed logits.
// - MakeCachedDecoder: Layer::ForwardCached with one KvCache per layer, a row per sequence. While
//   the sequences fit the context, only the tokens not yet cached run: the prompts once (the
//   prefill, right-padded to the longest, causal over itself; each row's cache then ends at its
//   own prompt), then one new token per row and call, all rows together, each attending over its
//   own row of the cache (rows of different lengths take one attention call each; the linears
//   run every row at once). Calls that add other numbers of tokens per row run row by row. The
//   head computes each row's last row only. Past the context:
//   - learned positions: the window slides, every token's position changes and with it every
//     cached key, so each call where a row's sequence exceeds the context resets the caches and
//     prefills every row's window again (as costly as recomputing);
//   - rotary positions: attention depends only on differences of positions, so the caches slide
//     instead: a full row's oldest position is dropped (DropOldest) and each new token runs at
//     its own position (past the context), attending over itself and the context - 1 tokens
//     before it, whose keys and values stay as computed when they were new. This is
//     sliding-window attention of width context (Mistral's rolling cache), not the window's
//     recompute: each earlier token keeps what it saw before, where recompute makes the window's
//     first token see only itself. A prompt longer than the context runs the same way, all of it
//     read (its first context tokens in the batched prefill, the rest token by token in its row).
// Both give the same logits up to rounding while the sequences fit the context, and past it for
// learned positions (model/decode_test.cc); past it a rotary model's sliding caches equal
// sliding-window attention recomputed per token. Neither is thread-safe; the layers and backend
// must outlive the decoder.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "model/layer.h"

namespace baton {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Row b: the logits (V) f32 of the token after sequences[b] (every token of that sequence so
  // far, at least one). The caches serve a call whose rows extend the previous call's rows (the
  // same number of rows); any other call starts afresh.
  virtual std::vector<std::vector<float>> NextLogitsBatch(
      const std::vector<std::vector<int32_t>>& sequences) = 0;
  // One sequence (a batch of one row).
  std::vector<float> NextLogits(std::span<const int32_t> sequence);
  // Bytes kept between calls (the key-value caches, every row), booked as activations; freed
  // with the decoder.
  virtual int64_t cache_bytes() const = 0;
};

std::unique_ptr<Decoder> MakeWindowDecoder(std::vector<Layer*> layers, Backend& backend,
                                           int context);
// `rotary`: the model's positions are rotary (ModelDims::learned_positions() false), and the
// caches slide past the context instead of being refilled.
std::unique_ptr<Decoder> MakeCachedDecoder(std::vector<Layer*> layers, Backend& backend,
                                           int context, bool rotary = false);

}  // namespace baton
