// The token + position embedding: the first layer of every graph.
//
//   Forward:  tokens (B,T) i32 -> out (B,T,C) = wte[tokens] + wpe[pos]        (x is ignored)
//   Backward: dwte[tokens[b,t]] += dy[b,t]; dwpe[pos] += dy[b,t]; no dx
// pos = t, or with packed documents (MicroBatch::segment_starts) t - segment_starts[b,t]:
// positions restart at 0 at each document.
// Parameters: "wte.weight" (V,C), "wpe.weight" (maxT,C), both N(0, 0.02); Llama (rotary
// positions, dims.learned_positions() false) has wte only, and out = wte[tokens]. Nothing is
// stashed (backward reads the tokens from the micro-batch again), and BackwardInput does all the
// work: there is no weight GEMM to defer.
#pragma once

#include <string>
#include <vector>

#include "kernels/backend.h"
#include "model/dims.h"
#include "model/layer.h"
#include "model/tensor_parallel.h"

namespace baton {

// How a (V,C) token embedding or LM head is cut over `tensor`'s ranks: by vocabulary rows
// (not cut without a group).
TensorSplit VocabSplit(const ModelDims& dims, const TensorGroup* tensor);
// The first vocabulary row `split` holds (0 when not cut).
int64_t VocabBegin(const TensorSplit& split);

class EmbeddingLayer final : public Layer {
 public:
  // layer_index must be kEmbeddingLayerIndex (0): the head draws its tied wte from that stream.
  // `tensor` (parallel.tensor T > 1; null for T = 1): wte is vocab-parallel, this rank holding
  // the rows of its vocabulary range (VocabSplit); each rank looks up the tokens in its range
  // (the others give 0, and only rank 0 adds the positions) and the group sums the outputs.
  EmbeddingLayer(Backend& backend, const ModelDims& dims, DType param_dtype, DType act_dtype,
                 uint64_t seed, int layer_index, TensorGroup* tensor = nullptr);

  const std::string& name() const override { return name_; }
  std::vector<Param*> params() override;

  Tensor Forward(const Tensor& x, const MicroBatch& batch, Stash& stash) override;
  // out (B,T,C) = wte[tokens] + wpe[start .. start+T): the new tokens at their absolute positions.
  Tensor ForwardCached(const Tensor& x, const MicroBatch& batch, const std::vector<int64_t>& starts,
                       KvCache& cache) override;
  Tensor Backward(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                  const BackwardArgs& args) override;
  Tensor BackwardInput(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                       const BackwardArgs& args) override;
  void BackwardWeight(Stash& stash) override;

  Param& wte() { return wte_; }
  Param& wpe() { return wpe_; }

 private:
  Backend& backend_;
  ModelDims dims_;
  DType act_dtype_;
  std::string name_ = "embedding";
  TensorGroup* tensor_ = nullptr;
  Param wte_;
  Param wpe_;  // undefined value without learned positions
};

}  // namespace baton
