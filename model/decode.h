// Next-token logits for `baton generate`: a whole model's layers (one process; the embedding
// first, the head last) run over one growing sequence (batch 1), either by recomputing the
// window for every token or with a key-value cache.
//
// The window is the sequence's last min(n, context) tokens: learned absolute positions (GPT-2)
// put its first token at position 0.
// - MakeWindowDecoder: every call runs Forward (the training forward) over the whole window and
//   reads the last row of the head's stashed logits.
// - MakeCachedDecoder: Layer::ForwardCached with one KvCache per layer. While the sequence fits
//   the context, only the tokens not yet cached run: the prompt once (the prefill, causal over
//   itself), then one new token per call, one row through every layer, its attention over the
//   cached keys and values; the head computes the last row only. Past the context:
//   - learned positions: the window slides, every token's position changes and with it every
//     cached key, so each call resets the caches and prefills the whole window again (as costly
//     as recomputing);
//   - rotary positions: attention depends only on differences of positions, so the caches slide
//     instead: the oldest position is dropped (DropOldest) and each new token runs alone at its
//     own position (past the context), attending over itself and the context - 1 tokens before
//     it, whose keys and values stay as computed when they were new. This is sliding-window
//     attention of width context (Mistral's rolling cache), not the window's recompute: each
//     earlier token keeps what it saw before, where recompute makes the window's first token see
//     only itself. A prompt longer than the context runs the same way, all of it read.
// Both give the same logits up to rounding while the sequence fits the context, and past it for
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
  // The logits (V) f32 of the token after `sequence` (every token so far, at least one).
  virtual std::vector<float> NextLogits(std::span<const int32_t> sequence) = 0;
  // Bytes kept between calls (the key-value caches), booked as activations; freed with the
  // decoder.
  virtual int64_t cache_bytes() const = 0;
};

std::unique_ptr<Decoder> MakeWindowDecoder(std::vector<Layer*> layers, Backend& backend,
                                           int context);
// `rotary`: the model's positions are rotary (ModelDims::learned_positions() false), and the
// caches slide past the context instead of being refilled.
std::unique_ptr<Decoder> MakeCachedDecoder(std::vector<Layer*> layers, Backend& backend,
                                           int context, bool rotary = false);

}  // namespace baton
