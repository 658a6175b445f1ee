// The final LayerNorm, tied LM head and cross-entropy loss (see head.h).
#include "model/head.h"

#include <vector>

#include "core/error.h"
#include "model/init.h"
#include "model/ops.h"

namespace baton {

using model_ops::NewTensor;
using model_ops::Rows;

HeadLayer::HeadLayer(Backend& backend, const ModelDims& dims, DType param_dtype, DType act_dtype,
                     uint64_t seed, int layer_index, TensorGroup* tensor)
    : backend_(backend), dims_(dims), act_dtype_(act_dtype), tensor_(tensor) {
  Validate(dims);
  const int64_t c = dims.width;
  const TensorSplit split = VocabSplit(dims, tensor);
  std::vector<ParamDef> defs = {{"ln_f.weight", {c}, ParamInit::kOnes}};
  const BlockSpec spec = dims.spec();
  if (spec.norm_bias()) defs.push_back({"ln_f.bias", {c}, ParamInit::kZeros});
  if (!dims.tie_embeddings) {
    defs.push_back({"lm_head.weight",
                    {dims.vocab_size, c},
                    ParamInit::kNormal,
                    0.0,
                    -1,
                    {0, {dims.vocab_size}}});
  }
  std::vector<Param> params =
      NewParams(backend, defs, param_dtype, seed, layer_index, dims.num_layers, nullptr, tensor);
  ln_weight_ = std::move(params[0]);
  if (spec.norm_bias()) ln_bias_ = std::move(params[1]);
  norm_ = {&ln_weight_, spec.norm_bias() ? &ln_bias_ : nullptr, spec.rms_norm(), dims.norm_eps};
  if (!dims.tie_embeddings) {  // its own matrix, drawn from this layer's stream
    wte_ = std::move(params.back());
    MarkSequencePartial();
    return;
  }
  // Drawn from the embedding's stream (its layer, its param 0), not this layer's.
  wte_ = NewParam(backend, "wte.weight", PartShape({dims.vocab_size, c}, split), param_dtype);
  wte_.tied = true;
  wte_.source_layer = kEmbeddingLayerIndex;
  wte_.split = split;
  InitNormal(backend, wte_.value, seed, kEmbeddingLayerIndex, 0, kInitStd, split);
  MarkSequencePartial();
}

void HeadLayer::MarkSequencePartial() {
  if (!SequenceParallel(tensor_)) return;  // ln_f runs on this rank's part of the sequence
  ln_weight_.tensor_partial_grad = true;
  if (!norm_.rms) ln_bias_.tensor_partial_grad = true;
}

std::vector<Param*> HeadLayer::params() {
  if (norm_.rms) return {&ln_weight_, &wte_};
  return {&ln_weight_, &ln_bias_, &wte_};
}

Tensor HeadLayer::Forward(const Tensor& x, const MicroBatch& batch, Stash& stash) {
  BATON_CHECK(x.defined() && x.dim() == 3 && x.size(2) == dims_.width && x.dtype() == act_dtype_,
              "head needs an input (B,T,C={}) {}, got {}", dims_.width, Name(act_dtype_),
              x.ToString());
  const Tensor& targets = batch.targets;
  // Under sequence parallelism x is this rank's part of the sequence; the targets are whole.
  const int64_t parts = SequenceParallel(tensor_) ? tensor_->size() : 1;
  BATON_CHECK(targets.defined() && targets.dtype() == DType::kI32 && targets.dim() == 2 &&
                  targets.size(0) == x.size(0) && targets.size(1) == x.size(1) * parts,
              "head needs targets (B,T) i32 matching {}, got {}", x.ToString(), targets.ToString());
  BATON_CHECK(stash.empty(), "head: Forward into a stash that is in use");
  const int64_t own_rows = x.size(0) * x.size(1);
  const int64_t rows = targets.numel();
  Tensor ln = NewTensor(backend_, x.shape(), act_dtype_, MemCategory::kActivations);
  Tensor mean = norm_.rms ? Tensor()
                          : NewTensor(backend_, {own_rows}, DType::kF32, MemCategory::kActivations);
  Tensor rstd = NewTensor(backend_, {own_rows}, DType::kF32, MemCategory::kActivations);
  Tensor ln_rows = Rows(ln);
  model_ops::NormRowsForward(backend_, norm_, Rows(x), ln_rows, mean, rstd);
  Tensor logits =
      NewTensor(backend_, {rows, wte_.value.size(0)}, act_dtype_, MemCategory::kActivations);
  backend_.Matmul(Rows(WholeSequence(backend_, tensor_, ln, MemCategory::kWorkspace)), false,
                  wte_.value, true, logits, false);
  Tensor loss = NewTensor(backend_, {1}, DType::kF32, MemCategory::kActivations);
  if (TensorSize(tensor_) == 1) {
    backend_.CrossEntropyForward(logits, targets.View({rows}), loss);
  } else {
    stash.Put("row_stats", VocabParallelLoss(logits, targets.View({rows}), loss));
  }
  stash.Put("x", x);
  stash.Put("ln", ln_rows);
  if (mean.defined()) stash.Put("mean", std::move(mean));
  stash.Put("rstd", std::move(rstd));
  stash.Put("logits", std::move(logits));
  return loss;
}

// Every rank's row statistics of its logits, all-gathered into (T,N,3) (slot t rank t's), then
// combined on every rank alike.
Tensor HeadLayer::VocabParallelLoss(const Tensor& logits, const Tensor& targets, Tensor& loss) {
  const int64_t rows = logits.size(0);
  Tensor all_stats = model_ops::NewTensor(backend_, {TensorSize(tensor_), rows, 3}, DType::kF32,
                                          MemCategory::kWorkspace);
  Tensor own = all_stats.Slice(0, tensor_->rank(), tensor_->rank() + 1).View({rows, 3});
  backend_.CrossEntropyShardStats(logits, targets, VocabBegin(wte_.split), own);
  own = Tensor();
  tensor_->AllGather(all_stats, /*dim=*/0);
  Tensor row_stats = NewTensor(backend_, {rows, 2}, DType::kF32, MemCategory::kActivations);
  backend_.CrossEntropyShardCombine(all_stats, targets, row_stats, loss);
  return row_stats;
}

Tensor HeadLayer::ForwardCached(const Tensor& x, const MicroBatch& /*batch*/,
                                const std::vector<int64_t>& /*starts*/, KvCache& /*cache*/) {
  BATON_CHECK(TensorSize(tensor_) == 1,
              "inference with a key-value cache runs on one tensor rank (a checkpoint holds the "
              "whole model: generate with parallel.tensor 1)");
  BATON_CHECK(x.defined() && x.dim() == 3 && x.size(2) == dims_.width && x.dtype() == act_dtype_,
              "head needs an input (B,T,C={}) {}, got {}", dims_.width, Name(act_dtype_),
              x.ToString());
  const int64_t rows = x.size(0) * x.size(1);
  Tensor ln = NewTensor(backend_, {rows, dims_.width}, act_dtype_, MemCategory::kWorkspace);
  Tensor mean =
      norm_.rms ? Tensor() : NewTensor(backend_, {rows}, DType::kF32, MemCategory::kWorkspace);
  Tensor rstd = NewTensor(backend_, {rows}, DType::kF32, MemCategory::kWorkspace);
  model_ops::NormRowsForward(backend_, norm_, Rows(x), ln, mean, rstd);
  Tensor logits =
      NewTensor(backend_, {rows, dims_.vocab_size}, act_dtype_, MemCategory::kActivations);
  backend_.Matmul(ln, false, wte_.value, true, logits, false);
  return logits;
}

Tensor HeadLayer::BackwardPass(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                               const BackwardArgs& args, bool defer_weights) {
  BATON_CHECK(!dy.defined(), "the head starts backward from the loss; dy must be undefined");
  const Tensor& x = stash.Get("x");
  const Tensor& ln = stash.Get("ln");
  Tensor dlogits = stash.Get("logits");  // the same storage: overwritten in place
  const int64_t rows = dlogits.size(0);  // the whole sequence's, under sequence parallelism too
  if (TensorSize(tensor_) == 1) {
    backend_.CrossEntropyBackward(dlogits, batch.targets.View({rows}), args.loss_grad_scale,
                                  dlogits);
  } else {
    backend_.CrossEntropyShardBackward(dlogits, batch.targets.View({rows}), VocabBegin(wte_.split),
                                       stash.Get("row_stats"), args.loss_grad_scale, dlogits);
  }
  model_ops::WeightGradSink sink(backend_, defer_weights);
  const Tensor ln_whole =
      Rows(WholeSequence(backend_, tensor_, ln.View(x.shape()), sink.operand_category()));
  Tensor dln = NewTensor(backend_, ln_whole.shape(), act_dtype_, MemCategory::kWorkspace);
  backend_.Matmul(dlogits, false, wte_.value, false, dln, false);
  if (SequenceParallel(tensor_)) {  // the sum's rows of this rank's part of the sequence
    Tensor whole = dln.View({x.size(0), x.size(1) * tensor_->size(), x.size(2)});
    dln = Rows(ScatterSequenceSum(backend_, *tensor_, whole, MemCategory::kWorkspace));
  } else if (TensorSize(tensor_) > 1) {
    tensor_->AllReduceSum(dln);  // each rank's vocabulary's part
  }
  sink.Add(wte_, dlogits, ln_whole);  // dwte (V,C) += dlogits^T (V,N) @ ln (N,C)
  Tensor dx = model_ops::NewZeros(backend_, x.shape(), act_dtype_, MemCategory::kActivations);
  Tensor dx_rows = Rows(dx);
  const Tensor mean = norm_.rms ? Tensor() : stash.Get("mean");
  model_ops::NormRowsBackward(backend_, norm_, dln, Rows(x), mean, stash.Get("rstd"), dx_rows);
  dln = Tensor();
  dlogits = Tensor();
  sink.Finish(stash);
  return dx;
}

Tensor HeadLayer::Backward(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                           const BackwardArgs& args) {
  return BackwardPass(dy, batch, stash, args, /*defer_weights=*/false);
}

Tensor HeadLayer::BackwardInput(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                                const BackwardArgs& args) {
  return BackwardPass(dy, batch, stash, args, /*defer_weights=*/true);
}

void HeadLayer::BackwardWeight(Stash& stash) {
  model_ops::RunDeferredWeightGrads(backend_, {&wte_}, stash);
}

void TieEmbedding(EmbeddingLayer& embedding, HeadLayer& head) {
  const Tensor& source = embedding.wte().value;
  Tensor& copy = head.wte_.value;
  BATON_CHECK(source.shape() == copy.shape() && source.dtype() == copy.dtype(),
              "cannot tie the head's wte {} to the embedding's {}", copy.ToString(),
              source.ToString());
  if (source.raw() == copy.raw()) return;  // already tied
  if (copy.is_meta()) {                    // the memory planner: no values to compare
    copy = source;
    return;
  }
  // Both were drawn from the same stream; a mismatch means different seeds or a trained copy.
  std::vector<char> a(source.nbytes());
  std::vector<char> b(copy.nbytes());
  Tensor a_host = Tensor::Wrap(a.data(), source.shape(), source.dtype());
  Tensor b_host = Tensor::Wrap(b.data(), copy.shape(), copy.dtype());
  head.backend_.Copy(source, a_host);
  head.backend_.Copy(copy, b_host);
  head.backend_.Synchronize();
  BATON_CHECK(a == b, "the head's wte differs from the embedding's: built with other seeds?");
  copy = source;
}

void TieEmbedding(Layer& embedding, Layer& head) {
  auto* e = dynamic_cast<EmbeddingLayer*>(&embedding);
  auto* h = dynamic_cast<HeadLayer*>(&head);
  BATON_CHECK(e != nullptr && h != nullptr,
              "TieEmbedding needs an embedding and a head, got {} and {}", embedding.name(),
              head.name());
  TieEmbedding(*e, *h);
}

}  // namespace baton
