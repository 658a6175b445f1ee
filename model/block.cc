// The GPT-2 block and the MLP block (see block.h).
#include "model/block.h"

#include <fmt/format.h>

#include "core/error.h"
#include "model/init.h"

namespace baton {
namespace {

using model_ops::Linear;
using model_ops::Norm;

// The MLP sublayer's parameters "h.{i}.ln_2.*", "h.{i}.mlp.*", in params() order.
void AppendMlpDefs(std::vector<ParamDef>& defs, const std::string& prefix, int64_t width) {
  const int64_t c = width;
  defs.push_back({prefix + "ln_2.weight", {c}, ParamInit::kOnes});
  defs.push_back({prefix + "ln_2.bias", {c}, ParamInit::kZeros});
  defs.push_back({prefix + "mlp.c_fc.weight", {c, 4 * c}, ParamInit::kNormal});
  defs.push_back({prefix + "mlp.c_fc.bias", {4 * c}, ParamInit::kZeros});
  defs.push_back({prefix + "mlp.c_proj.weight", {4 * c, c}, ParamInit::kOutputProjection});
  defs.push_back({prefix + "mlp.c_proj.bias", {c}, ParamInit::kZeros});
}

// The MLP sublayer's view of six consecutive params starting at `first`.
model_ops::MlpParams MlpView(std::vector<Param>& p, size_t first) {
  return {Norm{&p[first], &p[first + 1]}, Linear{&p[first + 2], &p[first + 3]},
          Linear{&p[first + 4], &p[first + 5]}};
}

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

void CheckGradient(const Tensor& dy, const ModelDims& dims, DType act_dtype,
                   const std::string& who) {
  BATON_CHECK(dy.defined() && dy.dim() == 3 && dy.size(2) == dims.width && dy.dtype() == act_dtype,
              "{} needs dy (B,T,C={}) {}, got {}", who, dims.width, Name(act_dtype), dy.ToString());
}

}  // namespace

// ---- BlockLayer

BlockLayer::BlockLayer(Backend& backend, const ModelDims& dims, DType param_dtype, DType act_dtype,
                       uint64_t seed, int layer_index, int block_index)
    : backend_(backend),
      dims_(dims),
      act_dtype_(act_dtype),
      name_(fmt::format("block.{}", block_index)) {
  Validate(dims);
  BATON_CHECK(block_index >= 0, "block index {} must be non-negative", block_index);
  const std::string prefix = fmt::format("h.{}.", block_index);
  const int64_t c = dims.width;
  std::vector<ParamDef> defs = {
      {prefix + "ln_1.weight", {c}, ParamInit::kOnes},
      {prefix + "ln_1.bias", {c}, ParamInit::kZeros},
      {prefix + "attn.c_attn.weight", {c, 3 * c}, ParamInit::kNormal},
      {prefix + "attn.c_attn.bias", {3 * c}, ParamInit::kZeros},
      {prefix + "attn.c_proj.weight", {c, c}, ParamInit::kOutputProjection},
      {prefix + "attn.c_proj.bias", {c}, ParamInit::kZeros},
  };
  AppendMlpDefs(defs, prefix, c);
  params_ = NewParams(backend, defs, param_dtype, seed, layer_index, dims.num_layers);
  attn_ = {Norm{&params_[0], &params_[1]}, Linear{&params_[2], &params_[3]},
           Linear{&params_[4], &params_[5]}, dims.num_heads, /*flash=*/true};
  mlp_ = MlpView(params_, 6);
}

std::vector<Param*> BlockLayer::params() { return Pointers(params_); }

Tensor BlockLayer::Forward(const Tensor& x, const MicroBatch& /*batch*/, Stash& stash) {
  CheckInput(x, dims_, act_dtype_, name_);
  BATON_CHECK(stash.empty(), "{}: Forward into a stash that is in use", name_);
  const Tensor x2 =
      model_ops::AttentionSublayerForward(backend_, attn_, x, selective_recompute_, stash);
  return model_ops::MlpSublayerForward(backend_, mlp_, x2, selective_recompute_, stash);
}

Tensor BlockLayer::BackwardPass(const Tensor& dy, Stash& stash, bool defer_weights) {
  CheckGradient(dy, dims_, act_dtype_, name_);
  model_ops::WeightGradSink sink(backend_, defer_weights);
  // dx2 is c_proj's output gradient, so an operand of attn.c_proj's weight GEMM.
  Tensor dx2 =
      model_ops::MlpSublayerBackward(backend_, mlp_, dy, stash, sink, sink.operand_category());
  Tensor dx = model_ops::AttentionSublayerBackward(backend_, attn_, dx2, stash, sink,
                                                   MemCategory::kActivations);
  dx2 = Tensor();
  sink.Finish(stash);
  return dx;
}

Tensor BlockLayer::Backward(const Tensor& dy, const MicroBatch& /*batch*/, Stash& stash,
                            const BackwardArgs& /*args*/) {
  return BackwardPass(dy, stash, /*defer_weights=*/false);
}

Tensor BlockLayer::BackwardInput(const Tensor& dy, const MicroBatch& /*batch*/, Stash& stash,
                                 const BackwardArgs& /*args*/) {
  return BackwardPass(dy, stash, /*defer_weights=*/true);
}

void BlockLayer::BackwardWeight(Stash& stash) {
  model_ops::RunDeferredWeightGrads(
      backend_, {attn_.c_attn.weight, attn_.c_proj.weight, mlp_.c_fc.weight, mlp_.c_proj.weight},
      stash);
}

// ---- MlpBlockLayer

MlpBlockLayer::MlpBlockLayer(Backend& backend, const ModelDims& dims, DType param_dtype,
                             DType act_dtype, uint64_t seed, int layer_index, int block_index)
    : backend_(backend),
      dims_(dims),
      act_dtype_(act_dtype),
      name_(fmt::format("mlp_block.{}", block_index)) {
  Validate(dims);
  BATON_CHECK(block_index >= 0, "block index {} must be non-negative", block_index);
  std::vector<ParamDef> defs;
  AppendMlpDefs(defs, fmt::format("h.{}.", block_index), dims.width);
  params_ = NewParams(backend, defs, param_dtype, seed, layer_index, dims.num_layers);
  mlp_ = MlpView(params_, 0);
}

std::vector<Param*> MlpBlockLayer::params() { return Pointers(params_); }

Tensor MlpBlockLayer::Forward(const Tensor& x, const MicroBatch& /*batch*/, Stash& stash) {
  CheckInput(x, dims_, act_dtype_, name_);
  BATON_CHECK(stash.empty(), "{}: Forward into a stash that is in use", name_);
  return model_ops::MlpSublayerForward(backend_, mlp_, x, selective_recompute_, stash);
}

Tensor MlpBlockLayer::BackwardPass(const Tensor& dy, Stash& stash, bool defer_weights) {
  CheckGradient(dy, dims_, act_dtype_, name_);
  model_ops::WeightGradSink sink(backend_, defer_weights);
  Tensor dx =
      model_ops::MlpSublayerBackward(backend_, mlp_, dy, stash, sink, MemCategory::kActivations);
  sink.Finish(stash);
  return dx;
}

Tensor MlpBlockLayer::Backward(const Tensor& dy, const MicroBatch& /*batch*/, Stash& stash,
                               const BackwardArgs& /*args*/) {
  return BackwardPass(dy, stash, /*defer_weights=*/false);
}

Tensor MlpBlockLayer::BackwardInput(const Tensor& dy, const MicroBatch& /*batch*/, Stash& stash,
                                    const BackwardArgs& /*args*/) {
  return BackwardPass(dy, stash, /*defer_weights=*/true);
}

void MlpBlockLayer::BackwardWeight(Stash& stash) {
  model_ops::RunDeferredWeightGrads(backend_, {mlp_.c_fc.weight, mlp_.c_proj.weight}, stash);
}

}  // namespace baton
