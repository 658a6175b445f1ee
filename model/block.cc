// Blocks as their sublayers in order (see block.h).
#include "model/block.h"

#include <fmt/format.h>

#include "core/error.h"
#include "model/init.h"

namespace baton {
namespace {

std::vector<Param*> Pointers(std::vector<Param>& params) {
  std::vector<Param*> out;
  for (Param& p : params) out.push_back(&p);
  return out;
}

void CheckInput(const Tensor& x, const ModelDims& dims, DType act_dtype, const std::string& who) {
  BATON_CHECK(x.defined() && x.dim() == 3 && x.size(2) == dims.width && x.dtype() == act_dtype,
              "{} needs an input (B,T,C={}) {}, got {}", who, dims.width, Name(act_dtype),
              x.ToString());
  BATON_CHECK(x.size(1) <= dims.context, "{}: sequence length {} exceeds the context {}", who,
              x.size(1), dims.context);
}

// Each row's new positions starts[b] .. starts[b]+T-1 of x (B,T,C) fit the context.
// Learned positions end at the context; rotary ones go on (a slid cache: Layer::ForwardCached).
void CheckCachedPositions(const Tensor& x, const std::vector<int64_t>& starts,
                          const ModelDims& dims, const std::string& who) {
  BATON_CHECK(static_cast<int64_t>(starts.size()) == x.size(0),
              "{}: {} start positions for {} rows", who, starts.size(), x.size(0));
  for (const int64_t start : starts) {
    const int64_t end = dims.learned_positions() ? start + x.size(1) : x.size(1);
    BATON_CHECK(start >= 0 && end <= dims.context, "{}: positions {}..{} exceed the context {}",
                who, start, start + x.size(1) - 1, dims.context);
  }
}

void CheckGradient(const Tensor& dy, const ModelDims& dims, DType act_dtype,
                   const std::string& who) {
  BATON_CHECK(dy.defined() && dy.dim() == 3 && dy.size(2) == dims.width && dy.dtype() == act_dtype,
              "{} needs dy (B,T,C={}) {}, got {}", who, dims.width, Name(act_dtype), dy.ToString());
}

// Tensor parallelism cuts dense matrices, and each sublayer's heads or hidden units evenly.
void CheckTensorSplit(const ModelDims& dims,
                      const std::vector<std::unique_ptr<Sublayer>>& sublayers,
                      const TensorGroup* tensor) {
  const int t = TensorSize(tensor);
  if (t == 1) return;
  BATON_CHECK(dims.low_rank_attn == 0 && dims.low_rank_mlp == 0,
              "tensor parallelism cuts dense matrices; this model is low-rank ({})",
              ToString(dims));
  for (const auto& sublayer : sublayers) {
    const std::string problem = sublayer->TensorSplitProblem(t);
    BATON_CHECK(problem.empty(), "{}", problem);
  }
}

// The defs of a block made of `sublayers`, in params() order.
std::vector<ParamDef> BlockDefs(const std::vector<std::unique_ptr<Sublayer>>& sublayers,
                                const ModelDims& dims, int layer_index, int block_index) {
  std::vector<ParamDef> defs;
  for (const auto& sublayer : sublayers) {
    sublayer->AppendDefs(defs, SourceOf(dims, sublayer->shared(), layer_index, block_index));
  }
  return defs;
}

}  // namespace

std::vector<std::string> SharedParamNames(LayerKind kind, const ModelDims& dims, int layer_index,
                                          int block_index) {
  std::vector<std::string> names;
  for (const ParamDef& def :
       BlockDefs(SublayersOf(kind, dims, block_index), dims, layer_index, block_index)) {
    if (def.source_layer >= 0 && def.source_layer != layer_index) names.push_back(def.name);
  }
  return names;
}

BlockLayer::BlockLayer(LayerKind kind, Backend& backend, const ModelDims& dims, DType param_dtype,
                       DType act_dtype, uint64_t seed, int layer_index, int block_index,
                       const LocalParams& local, TensorGroup* tensor, ExpertGroup* experts)
    : backend_(backend),
      dims_(dims),
      act_dtype_(act_dtype),
      name_(fmt::format("{}.{}", Name(kind), block_index)),
      sublayers_(SublayersOf(kind, dims, block_index)) {
  Validate(dims);
  BATON_CHECK(!sublayers_.empty(), "a {} layer is not a block", Name(kind));
  BATON_CHECK(block_index >= 0, "block index {} must be non-negative", block_index);
  CheckTensorSplit(dims, sublayers_, tensor);
  params_ = NewParams(backend, BlockDefs(sublayers_, dims, layer_index, block_index), param_dtype,
                      seed, layer_index, dims.num_layers, local, tensor, experts);
  for (const auto& sublayer : sublayers_) {
    sublayer->Bind(backend, params_, SourceOf(dims, sublayer->shared(), layer_index, block_index),
                   tensor, experts);
  }
}

std::vector<Param*> BlockLayer::params() { return Pointers(params_); }

void BlockLayer::set_flash_attention(bool on) {
  for (const auto& sublayer : sublayers_) sublayer->set_flash_attention(on);
}

bool BlockLayer::flash_attention() const {
  for (const auto& sublayer : sublayers_) {
    if (sublayer->flash_attention()) return true;
  }
  return false;
}

std::optional<ExpertStats> BlockLayer::TakeExpertStats() {
  for (const auto& sublayer : sublayers_) {
    if (std::optional<ExpertStats> stats = sublayer->TakeExpertStats()) return stats;
  }
  return std::nullopt;
}

Layer::RoutingBias BlockLayer::routing_bias() {
  for (const auto& sublayer : sublayers_) {
    RoutingBias bias = sublayer->routing_bias();
    if (bias.values.defined()) return bias;
  }
  return {};
}

void BlockLayer::UpdateRoutingBias(const std::vector<int64_t>& load) {
  for (const auto& sublayer : sublayers_) sublayer->UpdateRoutingBias(load);
}

std::vector<ExpertGradSources> BlockLayer::expert_grad_sources() {
  std::vector<ExpertGradSources> out;
  for (const auto& sublayer : sublayers_) {
    for (ExpertGradSources& s : sublayer->expert_grad_sources()) out.push_back(std::move(s));
  }
  return out;
}

Tensor BlockLayer::Forward(const Tensor& x, const MicroBatch& batch, Stash& stash) {
  CheckInput(x, dims_, act_dtype_, name_);
  BATON_CHECK(stash.empty(), "{}: Forward into a stash that is in use", name_);
  Tensor y = x;
  for (const auto& sublayer : sublayers_) {
    y = sublayer->Forward(backend_, y, batch, selective_recompute_, stash);
  }
  return y;
}

Tensor BlockLayer::ForwardCached(const Tensor& x, const MicroBatch& /*batch*/,
                                 const std::vector<int64_t>& starts, KvCache& cache) {
  CheckInput(x, dims_, act_dtype_, name_);
  CheckCachedPositions(x, starts, dims_, name_);
  Tensor y = x;
  for (const auto& sublayer : sublayers_) {
    y = sublayer->ForwardCached(backend_, y, starts, cache, name_);
  }
  return y;
}

Tensor BlockLayer::BackwardPass(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                                const BackwardArgs& args, bool defer_weights) {
  CheckGradient(dy, dims_, act_dtype_, name_);
  model_ops::WeightGradSink sink(backend_, defer_weights);
  // Between two sublayers the gradient is the later one's output gradient, so an operand of
  // the earlier one's output-projection weight GEMM; the first sublayer's dx is the block's.
  Tensor d = dy;
  for (size_t i = sublayers_.size(); i-- > 0;) {
    const MemCategory category = i == 0 ? MemCategory::kActivations : sink.operand_category();
    d = sublayers_[i]->Backward(backend_, d, batch, stash, args, sink, category);
  }
  sink.Finish(stash);
  return d;
}

Tensor BlockLayer::Backward(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                            const BackwardArgs& args) {
  return BackwardPass(dy, batch, stash, args, /*defer_weights=*/false);
}

Tensor BlockLayer::BackwardInput(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                                 const BackwardArgs& args) {
  return BackwardPass(dy, batch, stash, args, /*defer_weights=*/true);
}

void BlockLayer::BackwardWeight(Stash& stash) {
  std::vector<Param*> weights;
  for (const auto& sublayer : sublayers_) sublayer->AppendWeightMatrices(weights);
  model_ops::RunDeferredWeightGrads(backend_, weights, stash);
}

}  // namespace baton
