// The token + position embedding layer (see embedding.h).
#include "model/embedding.h"

#include <vector>

#include "core/error.h"
#include "model/init.h"
#include "model/ops.h"

namespace baton {

EmbeddingLayer::EmbeddingLayer(Backend& backend, const ModelDims& dims, DType param_dtype,
                               DType act_dtype, uint64_t seed, int layer_index)
    : backend_(backend), dims_(dims), act_dtype_(act_dtype) {
  Validate(dims);
  BATON_CHECK(layer_index == kEmbeddingLayerIndex,
              "the embedding must be layer {} of the graph, got {}", kEmbeddingLayerIndex,
              layer_index);
  const int64_t vocab = dims.vocab_size;
  const int64_t width = dims.width;
  wte_ = NewParam(backend, "wte.weight", {vocab, width}, param_dtype);
  InitNormal(backend, wte_.value, seed, layer_index, 0, kInitStd);
  if (dims.learned_positions()) {
    wpe_ = NewParam(backend, "wpe.weight", {dims.context, width}, param_dtype);
    InitNormal(backend, wpe_.value, seed, layer_index, 1, kInitStd);
  }
}

std::vector<Param*> EmbeddingLayer::params() {
  if (!dims_.learned_positions()) return {&wte_};
  return {&wte_, &wpe_};
}

Tensor EmbeddingLayer::Forward(const Tensor& /*x*/, const MicroBatch& batch, Stash& stash) {
  const Tensor& tokens = batch.tokens;
  BATON_CHECK(tokens.defined() && tokens.dtype() == DType::kI32 && tokens.dim() == 2,
              "the embedding needs tokens (B,T) i32, got {}", tokens.ToString());
  BATON_CHECK(tokens.size(1) <= dims_.context, "sequence length {} exceeds the context {}",
              tokens.size(1), dims_.context);
  BATON_CHECK(stash.empty(), "Forward into a stash that is in use");
  Tensor out = model_ops::NewTensor(backend_, {tokens.size(0), tokens.size(1), dims_.width},
                                    act_dtype_, MemCategory::kActivations);
  backend_.EmbeddingForward(tokens, batch.segment_starts, wte_.value, wpe_.value, out);
  return out;
}

Tensor EmbeddingLayer::ForwardCached(const Tensor& /*x*/, const MicroBatch& batch, int64_t start,
                                     KvCache& /*cache*/) {
  const Tensor& tokens = batch.tokens;
  BATON_CHECK(tokens.defined() && tokens.dtype() == DType::kI32 && tokens.dim() == 2,
              "the embedding needs tokens (B,T) i32, got {}", tokens.ToString());
  BATON_CHECK(start >= 0 && start + tokens.size(1) <= dims_.context,
              "positions {}..{} exceed the context {}", start, start + tokens.size(1) - 1,
              dims_.context);
  Tensor out = model_ops::NewTensor(backend_, {tokens.size(0), tokens.size(1), dims_.width},
                                    act_dtype_, MemCategory::kActivations);
  const Tensor positions = dims_.learned_positions()
                               ? wpe_.value.Slice(0, start, start + tokens.size(1))
                               : Tensor();  // rotary: the blocks turn q and k by position
  backend_.EmbeddingForward(tokens, wte_.value, positions, out);
  return out;
}

Tensor EmbeddingLayer::Backward(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                                const BackwardArgs& args) {
  return BackwardInput(dy, batch, stash, args);
}

Tensor EmbeddingLayer::BackwardInput(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                                     const BackwardArgs& /*args*/) {
  BATON_CHECK(
      dy.defined() && dy.dim() == 3 && dy.size(-1) == dims_.width && dy.dtype() == act_dtype_,
      "the embedding's dy must be (B,T,C={}) {}, got {}", dims_.width, Name(act_dtype_),
      dy.ToString());
  backend_.EmbeddingBackward(batch.tokens, batch.segment_starts, dy, wte_.grad, wpe_.grad);
  stash.Clear();
  return Tensor();
}

void EmbeddingLayer::BackwardWeight(Stash& stash) {
  BATON_CHECK(stash.empty(), "the embedding defers nothing, but its stash holds {} entries",
              stash.size());
}

}  // namespace baton
