// Transformer blocks: a block is its sublayers in order (model/sublayer.h, SublayersOf), each
// y = x + f(norm(x)).
//
// A `block` (GPT-2, pre-LayerNorm), x and y (B,T,C):
//   x2 = x + attn.c_proj(CausalSelfAttention(attn.c_attn(ln_1(x))))    qkv (B,T,3C)
//   y  = x2 + mlp.c_proj(gelu(mlp.c_fc(ln_2(x2))))                     hidden (B,T,4C)
// Attention: q, k, v are the column thirds of qkv, head h uses columns h*D..(h+1)*D of each,
// scale 1/sqrt(D), causal mask; GELU is the tanh approximation. Parameters, in params() order
// ("h.{i}." prefixed, Conv1D layout (in,out), y = x @ W + b):
//   ln_1.weight (C) ln_1.bias (C) attn.c_attn.weight (C,3C) attn.c_attn.bias (3C)
//   attn.c_proj.weight (C,C) attn.c_proj.bias (C) ln_2.weight (C) ln_2.bias (C)
//   mlp.c_fc.weight (C,4C) mlp.c_fc.bias (4C) mlp.c_proj.weight (4C,C) mlp.c_proj.bias (C)
// Llama's block is the same two sublayers as its BlockSpec makes them (RMSNorm, rotary GQA,
// SwiGLU, no biases).
//
// An `mlp_block` (the `mlp` preset): y = x + mlp.c_proj(gelu(mlp.c_fc(ln_2(x)))), with the six
// "h.{i}.ln_2.*" / "h.{i}.mlp.*" parameters above.
//
// Structure (docs/model.md, "Sharing and low rank"): with dims.low_rank_attn / low_rank_mlp = r
// each affected "<linear>.weight" (in, out) is "<linear>.weight_u" (in, r) and ".weight_v" (r,
// out), in that place of params(). With model.share a block after its group's first takes that
// block's shared sublayer parameters: named "h.{first}.*", drawn from its stream, Param::tied,
// and held once per process when `local` finds them.
//
// Stash: see model/sublayer_ops.h; under selective recompute the GELU input and output (B,T,4C)
// and, with materialized attention, the attention probabilities (B,NH,T,T) are not stashed and
// Backward recomputes them (bit-identical results). Flash attention (the default) stashes only
// each row's log-sum-exp (B,NH,T), so selective recompute leaves attention alone. BackwardInput
// leaves, per weight matrix W, the operands of dW += lhs^T @ rhs as "<W's name>.lhs"/".rhs".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "config/layer_kind.h"
#include "kernels/backend.h"
#include "model/dims.h"
#include "model/init.h"
#include "model/layer.h"
#include "model/sublayer.h"

namespace baton {

// The names of the parameters a block of `kind` at graph index layer_index (block block_index)
// takes from its share group's first block (model.share); empty for that block itself.
std::vector<std::string> SharedParamNames(LayerKind kind, const ModelDims& dims, int layer_index,
                                          int block_index);

class BlockLayer final : public Layer {
 public:
  // `kind`: kBlock or kMlpBlock. layer_index: position in the graph (keys the init streams);
  // block_index: i of "h.{i}". `local` finds this process's shared originals (model.share; see
  // init.h's NewParams). `tensor`: the stage's tensor-parallel group (parallel.tensor T > 1;
  // null for T = 1): the block then holds its share of the heads and hidden units
  // (model/tensor_parallel.h) and sums the row-parallel outputs (and the column-parallel inputs'
  // gradients) over the group. `experts`: the expert group its experts split over (E > 1;
  // model/expert_parallel.h), or null.
  BlockLayer(LayerKind kind, Backend& backend, const ModelDims& dims, DType param_dtype,
             DType act_dtype, uint64_t seed, int layer_index, int block_index,
             const LocalParams& local = nullptr, TensorGroup* tensor = nullptr,
             ExpertGroup* experts = nullptr);

  const std::string& name() const override { return name_; }  // "block.3", "mlp_block.3"
  std::vector<Param*> params() override;
  void set_selective_recompute(bool on) override { selective_recompute_ = on; }
  bool selective_recompute() const override { return selective_recompute_; }
  void set_flash_attention(bool on) override;
  bool flash_attention() const override;
  std::optional<ExpertStats> TakeExpertStats() override;
  RoutingBias routing_bias() override;
  void UpdateRoutingBias(const std::vector<int64_t>& load) override;
  std::vector<ExpertGradSources> expert_grad_sources() override;

  Tensor Forward(const Tensor& x, const MicroBatch& batch, Stash& stash) override;
  // Each sublayer's cached forward: attention over `cache` (Backend::CachedAttentionForward,
  // whichever of flash or materialized Forward uses: the same attention up to rounding), the
  // MLP over the new positions alone.
  Tensor ForwardCached(const Tensor& x, const MicroBatch& batch, const std::vector<int64_t>& starts,
                       KvCache& cache) override;
  Tensor Backward(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                  const BackwardArgs& args) override;
  Tensor BackwardInput(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                       const BackwardArgs& args) override;
  void BackwardWeight(Stash& stash) override;

 private:
  Tensor BackwardPass(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                      const BackwardArgs& args, bool defer_weights);

  Backend& backend_;
  ModelDims dims_;
  DType act_dtype_;
  std::string name_;
  bool selective_recompute_ = false;
  std::vector<Param> params_;  // fixed size: the sublayers point into it
  std::vector<std::unique_ptr<Sublayer>> sublayers_;
};

}  // namespace baton
