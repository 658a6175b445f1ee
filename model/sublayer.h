// Sublayer: one residual part of a block (attention, the MLP or its experts), everything about it
// behind one type: its parameter definitions, its tensor-split checks, the collectives it issues,
// its FLOPs, and, bound to the block's parameters, its forward, backward (split for the zero-bubble
// schedules through the WeightGradSink), cached forward and weight matrices. A block
// (model/block.h) is its sublayers in order (SublayersOf); the block's parameter list, the
// tuner's collective counts (model/collectives.h) and the TP checks ask them, so a new sublayer
// kind is one implementation file and a row here (docs/architecture.md, "Adding a layer kind").
//
// x, y, dy, dx are (B,T,C) in the activation dtype; y = x + f(norm(x)). Each sublayer stashes
// under its own prefix ("attn.", "mlp."; model/sublayer_ops.h lists the entries), so a block holds
// them all in one Stash. Not thread-safe; owned by its block.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "config/layer_kind.h"
#include "kernels/backend.h"
#include "model/collectives.h"
#include "model/dims.h"
#include "model/expert_parallel.h"
#include "model/init.h"
#include "model/layer.h"
#include "model/ops.h"
#include "model/tensor_parallel.h"

namespace baton {

// Where a sublayer's parameters come from: its own block, or (model.share) the first block of
// its share group, whose names it takes and from whose init stream it draws.
struct SublayerSource {
  std::string prefix;     // "h.{i}."
  int source_layer = -1;  // the group leader's graph index; -1 for the block's own
};
// The source of a sublayer of block `block_index` (graph index layer_index), `shared` by its
// share group or not.
SublayerSource SourceOf(const ModelDims& dims, bool shared, int layer_index, int block_index);

class Sublayer {
 public:
  virtual ~Sublayer() = default;

  // ---- what it is, before any parameter exists
  virtual const char* name() const = 0;  // "attention", "mlp"
  // Whether a share group's blocks hold one set of its parameters (model.share).
  virtual bool shared() const = 0;
  // Its parameters' definitions, in params() order, named and drawn as `source` says.
  virtual void AppendDefs(std::vector<ParamDef>& defs, const SublayerSource& source) const = 0;
  // Why its parameters do not split over `tensor` ranks, naming the numbers; empty when they do.
  virtual std::string TensorSplitProblem(int tensor) const = 0;
  // The collectives it issues over its tensor group for x (B,S,C) of `rows` = B*S rows of the
  // whole sequence (model/collectives.h); none with one tensor rank.
  virtual LayerCollectives Collectives(int64_t rows, DType act_dtype,
                                       const TensorLayout& layout) const = 0;
  // FLOPs per micro-batch, by model/cost.h's conventions: its forward, and the forward work its
  // backward redoes (cost.h's RecomputeFlops).
  virtual int64_t ForwardFlops(const MicroBatchShape& shape) const = 0;
  virtual int64_t RecomputeFlops(const MicroBatchShape& shape) const = 0;

  // ---- running it
  // Finds its parameters in the block's `params` (which must not move afterwards); `tensor`: the
  // stage's tensor group, null for T = 1; `experts`: its expert group, null for E = 1 (only the
  // experts' sublayer splits over it, allocating its gradient accumulators on `backend`).
  virtual void Bind(Backend& backend, std::vector<Param>& params, const SublayerSource& source,
                    TensorGroup* tensor, ExpertGroup* experts) = 0;
  virtual Tensor Forward(Backend& backend, const Tensor& x, const MicroBatch& batch,
                         bool selective_recompute, Stash& stash) = 0;
  // dx booked under `dx_category`; weight gradients go through `sink`, the rest accumulate.
  // `args` scale a loss the sublayer adds itself (the experts' router losses) as the head's.
  virtual Tensor Backward(Backend& backend, const Tensor& dy, const MicroBatch& batch,
                          const Stash& stash, const BackwardArgs& args,
                          model_ops::WeightGradSink& sink, MemCategory dx_category) = 0;
  // Inference over each row's new positions starts[b].. (Layer::ForwardCached); `who` names
  // the block in errors. A sublayer without attention leaves `cache` alone.
  virtual Tensor ForwardCached(Backend& backend, const Tensor& x,
                               const std::vector<int64_t>& starts, KvCache& cache,
                               const std::string& who) = 0;
  // Its weight matrices (dense, or both low-rank factors), in the order the zero-bubble weight
  // pass runs their GEMMs.
  virtual void AppendWeightMatrices(std::vector<Param*>& out) const = 0;
  virtual void set_flash_attention(bool on) { (void)on; }
  virtual bool flash_attention() const { return false; }
  // Experts only: Layer::TakeExpertStats, routing_bias and UpdateRoutingBias.
  virtual std::optional<ExpertStats> TakeExpertStats() { return std::nullopt; }
  virtual Layer::RoutingBias routing_bias() { return {}; }
  virtual void UpdateRoutingBias(const std::vector<int64_t>& load) { (void)load; }
  virtual std::vector<ExpertGradSources> expert_grad_sources() { return {}; }
};

std::unique_ptr<Sublayer> MakeAttentionSublayer(const ModelDims& dims);  // attention_sublayer.cc
std::unique_ptr<Sublayer> MakeMlpSublayer(const ModelDims& dims);        // mlp_sublayer.cc
std::unique_ptr<Sublayer> MakeMoeSublayer(const ModelDims& dims);        // moe_sublayer.cc

// Whether every block of `graph` splits over `tensor` ranks (its sublayers' heads, hidden units).
bool BlocksSplitOver(const std::vector<LayerSpec>& graph, const ModelDims& dims, int tensor);

// The elements of its parameters, whole (as AppendDefs defines them, before any tensor split).
int64_t ParamCount(const Sublayer& sublayer);

// The sublayers of block `block_index` of `kind`, in order: kBlock is attention then the MLP,
// kMlpBlock the MLP alone, the MLP being experts where dims.moe_block(block_index); empty for a
// kind that is not a block. (Here, beside the makers, so that a new
// sublayer kind is its own file, its maker's line above and its row here.)
inline std::vector<std::unique_ptr<Sublayer>> SublayersOf(LayerKind kind, const ModelDims& dims,
                                                          int block_index) {
  std::vector<std::unique_ptr<Sublayer>> sublayers;
  if (kind == LayerKind::kBlock) sublayers.push_back(MakeAttentionSublayer(dims));
  if (kind == LayerKind::kBlock || kind == LayerKind::kMlpBlock) {
    sublayers.push_back(dims.moe_block(block_index) ? MakeMoeSublayer(dims)
                                                    : MakeMlpSublayer(dims));
  }
  return sublayers;
}

namespace model_ops {

// For the implementations: parameter definitions and views shared by the sublayers.
//
// A linear's weight (in, out) and bias (out, when `bias`); at low rank r = low_rank > 0 the weight
// is "weight_u" (in, r) and "weight_v" (r, out). Tensor parallelism (model/tensor_parallel.h): a
// column-parallel linear is cut along its output columns, made of `sections` (its bias likewise);
// a row-parallel one along its input rows (its bias replicated: added once, after the sum).
struct LinearCut {
  enum Kind { kColumns, kRows } kind;
  std::vector<int64_t> sections;  // kColumns: the output's sections
};
void AppendLinearDefs(std::vector<ParamDef>& defs, const SublayerSource& source,
                      const std::string& name, int64_t in, int64_t out, bool output_projection,
                      int low_rank, int num_layers, bool bias, const LinearCut& cut);
// A norm "<name>.weight" = 1, and for a LayerNorm "<name>.bias" = 0.
void AppendNormDefs(std::vector<ParamDef>& defs, const SublayerSource& source,
                    const std::string& name, const ModelDims& dims);
// Views of the parameters named "<base>.*" in `params` (throws when one is missing).
Norm NormView(std::vector<Param>& params, const std::string& base, const ModelDims& dims);
Linear LinearView(std::vector<Param>& params, const std::string& base);
// Sequence parallelism: a norm applied to this rank's part of the sequence has a part of its
// gradient here (Param::tensor_partial_grad).
void MarkSequencePartial(const Norm& norm, const TensorGroup* tensor);
// A linear's weight matrices (dense, or both low-rank factors).
void AppendWeightMatrices(const Linear& linear, std::vector<Param*>& out);
// Weight-matrix entries of a linear (in, out): dense in*out, low rank r*(in + out).
inline int64_t WeightCount(int64_t in, int64_t out, int64_t rank) {
  return rank > 0 ? rank * (in + out) : in * out;
}

}  // namespace model_ops
}  // namespace baton
