// The head: final norm, the LM head (tied to the token embedding, or its own matrix), and the
// loss.
//
//   Forward:  x (B,T,C) -> ln (B,T,C) = ln_f(x) -> logits (B*T,V) = ln @ wte^T
//             -> loss (1) f32 = mean over all B*T positions of -log softmax(logits)[target]
//   Backward: dlogits = loss_grad_scale * (softmax(logits) - onehot) / (B*T), written over the
//             stashed logits (no second (B*T,V) buffer); dln = dlogits @ wte;
//             dwte += dlogits^T @ ln; dx = ln_f'(x)^T dln
// Parameters, in params() order: "ln_f.weight" (C) = 1, "ln_f.bias" (C) = 0, and "wte.weight"
// (V,C), no bias: the head's own copy of the embedding's token matrix, drawn from the
// embedding's init stream so it equals it bit for bit, marked Param::tied. When the embedding and
// the head live in one process, TieEmbedding makes the copy share the embedding's storage; the
// two grads stay separate either way (the engine sums them at step end, in a fixed order).
// An RMSNorm block (BlockSpec::rms_norm, Llama): the final norm is an RMSNorm, "ln_f.weight"
// only (no bias, no mean stashed). Untied (dims.tie_embeddings false, Llama's default): the LM head
// is its own "lm_head.weight" (V,C), N(0, 0.02) from this layer's stream, not tied, in wte's place.
// Stash after Forward: x, ln (B,T,C); mean, rstd (B*T) f32; logits (B*T,V), activation dtype.
// BackwardInput leaves "wte.weight.lhs" = dlogits and "wte.weight.rhs" = ln (or lm_head's).
// Tensor parallelism (parallel.tensor T > 1): the LM head is vocab-parallel (VocabSplit), so
// each rank holds logits (B*T,V_t) of its vocabulary range only and the loss is a vocab-parallel
// cross-entropy: each rank's row statistics (max, sum of exponentials, target logit) are
// gathered over the group and combined the same way on every rank (Backend::
// CrossEntropyShardCombine), which also stashes "row_stats" (B*T,2) f32 for backward; dln is
// summed over the group. No rank holds the full logits. With sequence parallelism x, ln, mean,
// rstd and dx are this rank's part of the sequence: ln is gathered for the logits (again in
// backward, for the weight GEMM) and dln reduce-scattered.
#pragma once

#include <string>
#include <vector>

#include "kernels/backend.h"
#include "model/dims.h"
#include "model/embedding.h"
#include "model/layer.h"
#include "model/ops.h"

namespace baton {

class HeadLayer final : public Layer {
 public:
  HeadLayer(Backend& backend, const ModelDims& dims, DType param_dtype, DType act_dtype,
            uint64_t seed, int layer_index, TensorGroup* tensor = nullptr);

  const std::string& name() const override { return name_; }
  std::vector<Param*> params() override;

  // Returns the micro-batch's mean loss (1) f32, booked as activations.
  Tensor Forward(const Tensor& x, const MicroBatch& batch, Stash& stash) override;
  // The logits (B*T,V) of x (B,T,C), as Forward stashes them; no loss, no stash.
  Tensor ForwardCached(const Tensor& x, const MicroBatch& batch, const std::vector<int64_t>& starts,
                       KvCache& cache) override;
  // `dy` must be undefined: the gradient starts from args.loss_grad_scale.
  Tensor Backward(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                  const BackwardArgs& args) override;
  Tensor BackwardInput(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                       const BackwardArgs& args) override;
  void BackwardWeight(Stash& stash) override;

  Param& wte() { return wte_; }

 private:
  friend void TieEmbedding(EmbeddingLayer& embedding, HeadLayer& head);
  Tensor BackwardPass(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                      const BackwardArgs& args, bool defer_weights);
  // The vocab-parallel cross-entropy of this rank's logits (N,V_t) into loss; returns the
  // combined row statistics (N,2) f32, booked as activations.
  Tensor VocabParallelLoss(const Tensor& logits, const Tensor& targets, Tensor& loss);
  // Sequence parallelism: ln_f's gradient is this rank's part (Param::tensor_partial_grad).
  void MarkSequencePartial();

  Backend& backend_;
  ModelDims dims_;
  DType act_dtype_;
  std::string name_ = "head";
  TensorGroup* tensor_ = nullptr;
  Param ln_weight_;
  Param ln_bias_;  // LayerNorm only
  model_ops::Norm norm_;
  Param wte_;  // the tied copy "wte.weight", or untied "lm_head.weight"
};

// Makes the head's wte value share the embedding's storage (its own copy is freed), so an
// optimizer sees one tensor. Checks that the two are equal in shape, dtype and bits first. The
// grads stay separate.
void TieEmbedding(EmbeddingLayer& embedding, HeadLayer& head);
// The same for layers built by BuildLayer; throws unless they are an embedding and a head.
void TieEmbedding(Layer& embedding, Layer& head);

}  // namespace baton
