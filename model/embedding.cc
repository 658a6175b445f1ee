// The token + position embedding layer (see embedding.h).
#include "model/embedding.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "model/init.h"
#include "model/ops.h"

namespace baton {

TensorSplit VocabSplit(const ModelDims& dims, const TensorGroup* tensor) {
  if (TensorSize(tensor) == 1) return {};
  BATON_CHECK(dims.vocab_size >= TensorSize(tensor),
              "a vocabulary of {} tokens does not split over {} tensor ranks", dims.vocab_size,
              TensorSize(tensor));
  return {0, {dims.vocab_size}, TensorRank(tensor), TensorSize(tensor)};
}

int64_t VocabBegin(const TensorSplit& split) {
  return split.cut() ? PartRanges(split).front().first : 0;
}

EmbeddingLayer::EmbeddingLayer(Backend& backend, const ModelDims& dims, DType param_dtype,
                               DType act_dtype, uint64_t seed, int layer_index, TensorGroup* tensor)
    : backend_(backend), dims_(dims), act_dtype_(act_dtype), tensor_(tensor) {
  Validate(dims);
  BATON_CHECK(layer_index == kEmbeddingLayerIndex,
              "the embedding must be layer {} of the graph, got {}", kEmbeddingLayerIndex,
              layer_index);
  const int64_t vocab = dims.vocab_size;
  const int64_t width = dims.width;
  const TensorSplit split = VocabSplit(dims, tensor);
  wte_ = NewParam(backend, "wte.weight", PartShape({vocab, width}, split), param_dtype);
  wte_.split = split;
  InitNormal(backend, wte_.value, seed, layer_index, 0, kInitStd, split);
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
  if (TensorSize(tensor_) == 1) {
    backend_.EmbeddingForward(tokens, batch.segment_starts, wte_.value, wpe_.value, out);
    return out;
  }
  if (tensor_->sequence_parallel()) {  // this rank's part of the sequence of the sum
    Tensor whole = model_ops::NewTensor(backend_, out.shape(), act_dtype_, MemCategory::kWorkspace);
    out = Tensor();
    backend_.EmbeddingShardForward(tokens, batch.segment_starts, VocabBegin(wte_.split), wte_.value,
                                   tensor_->rank() == 0 ? wpe_.value : Tensor(), whole);
    return ScatterSequenceSum(backend_, *tensor_, whole, MemCategory::kActivations);
  }
  backend_.EmbeddingShardForward(tokens, batch.segment_starts, VocabBegin(wte_.split), wte_.value,
                                 tensor_->rank() == 0 ? wpe_.value : Tensor(), out);
  tensor_->AllReduceSum(out);
  return out;
}

Tensor EmbeddingLayer::ForwardCached(const Tensor& /*x*/, const MicroBatch& batch,
                                     const std::vector<int64_t>& starts, KvCache& /*cache*/) {
  BATON_CHECK(TensorSize(tensor_) == 1,
              "inference with a key-value cache runs on one tensor rank (a checkpoint holds the "
              "whole model: generate with parallel.tensor 1)");
  const Tensor& tokens = batch.tokens;
  BATON_CHECK(tokens.defined() && tokens.dtype() == DType::kI32 && tokens.dim() == 2,
              "the embedding needs tokens (B,T) i32, got {}", tokens.ToString());
  const int64_t rows = tokens.size(0), t = tokens.size(1);
  BATON_CHECK(static_cast<int64_t>(starts.size()) == rows,
              "the embedding: {} start positions for {} rows", starts.size(), rows);
  for (const int64_t start : starts) {
    // Learned positions end at the context; rotary ones go on (Layer::ForwardCached).
    const int64_t end = dims_.learned_positions() ? start + t : t;
    BATON_CHECK(start >= 0 && end <= dims_.context, "positions {}..{} exceed the context {}", start,
                start + t - 1, dims_.context);
  }
  Tensor out =
      model_ops::NewTensor(backend_, {rows, t, dims_.width}, act_dtype_, MemCategory::kActivations);
  if (!dims_.learned_positions()) {  // rotary: the blocks turn q and k by position
    backend_.EmbeddingForward(tokens, wte_.value, Tensor(), out);
    return out;
  }
  // Rows at the same positions take one call, others one each.
  const bool aligned = std::all_of(starts.begin(), starts.end(),
                                   [&](int64_t start) { return start == starts.front(); });
  for (int64_t b = 0; b < (aligned ? 1 : rows); ++b) {
    const int64_t end = aligned ? rows : b + 1, start = starts[static_cast<size_t>(b)];
    Tensor rows_out = out.Slice(0, b, end);
    backend_.EmbeddingForward(tokens.Slice(0, b, end), wte_.value,
                              wpe_.value.Slice(0, start, start + t), rows_out);
  }
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
  // Sequence parallelism: dy is this rank's part of the sequence; each rank needs all of it.
  const Tensor dy_whole = SequenceParallel(tensor_)
                              ? GatherSequence(backend_, *tensor_, dy, MemCategory::kWorkspace)
                              : dy;
  // Every rank has the whole dy: each accumulates its vocabulary rows, and the same positions'
  // gradient (wpe is replicated).
  if (TensorSize(tensor_) == 1) {
    backend_.EmbeddingBackward(batch.tokens, batch.segment_starts, dy, wte_.grad, wpe_.grad);
  } else {
    backend_.EmbeddingShardBackward(batch.tokens, batch.segment_starts, VocabBegin(wte_.split),
                                    dy_whole, wte_.grad, wpe_.grad);
  }
  stash.Clear();
  return Tensor();
}

void EmbeddingLayer::BackwardWeight(Stash& stash) {
  BATON_CHECK(stash.empty(), "the embedding defers nothing, but its stash holds {} entries",
              stash.size());
}

}  // namespace baton
