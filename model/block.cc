// The GPT-2 block and the MLP block (see block.h).
#include "model/block.h"

#include <fmt/format.h>

#include <cmath>
#include <initializer_list>

#include "core/error.h"
#include "model/init.h"

namespace baton {
namespace {

using model_ops::Linear;
using model_ops::Norm;

// Where a sublayer's parameters come from: its own block, or (model.share) the first block of
// its share group, whose names it takes and from whose init stream it draws.
struct SublayerSource {
  std::string prefix;     // "h.{i}."
  int source_layer = -1;  // the group leader's graph index; -1 for the block's own
};

SublayerSource SourceOf(const ModelDims& dims, bool shared, int layer_index, int block_index) {
  if (!shared || !dims.shares()) return {fmt::format("h.{}.", block_index), -1};
  const int leader = dims.share_leader(block_index);
  return {fmt::format("h.{}.", leader), layer_index - (block_index - leader)};
}

// A linear's weight (in, out) and bias (out); at rank r > 0 the weight is "weight_u" (in, r) and
// "weight_v" (r, out), each N(0, sqrt(std / sqrt(r))^2) so that their product's entries have the
// dense weight's std.
// Tensor parallelism (model/tensor_parallel.h): a column-parallel linear is cut along its
// output columns, made of `sections` (its bias likewise); a row-parallel one along its input
// rows (its bias replicated: added once, after the sum).
struct LinearCut {
  enum Kind { kColumns, kRows } kind;
  std::vector<int64_t> sections;  // kColumns: the output's sections
};

void AppendLinearDefs(std::vector<ParamDef>& defs, const SublayerSource& source,
                      const std::string& name, int64_t in, int64_t out, bool output_projection,
                      int rank, int num_layers, bool bias, const LinearCut& cut) {
  const bool columns = cut.kind == LinearCut::kColumns;
  const std::string base = source.prefix + name;
  if (rank == 0) {
    defs.push_back({base + ".weight",
                    {in, out},
                    output_projection ? ParamInit::kOutputProjection : ParamInit::kNormal,
                    0.0,
                    source.source_layer,
                    columns ? TensorSplit{1, cut.sections} : TensorSplit{0, {in}}});
  } else {
    const double dense_std = output_projection ? OutputProjectionStd(num_layers) : kInitStd;
    const double std = std::sqrt(dense_std / std::sqrt(static_cast<double>(rank)));
    defs.push_back(
        {base + ".weight_u", {in, rank}, ParamInit::kNormalStd, std, source.source_layer});
    defs.push_back(
        {base + ".weight_v", {rank, out}, ParamInit::kNormalStd, std, source.source_layer});
  }
  if (bias) {
    defs.push_back({base + ".bias",
                    {out},
                    ParamInit::kZeros,
                    0.0,
                    source.source_layer,
                    columns ? TensorSplit{0, cut.sections} : TensorSplit{}});
  }
}

// A norm "<name>.weight" = 1, and for a LayerNorm "<name>.bias" = 0.
void AppendNormDefs(std::vector<ParamDef>& defs, const SublayerSource& source,
                    const std::string& name, const ModelDims& dims) {
  const int64_t c = dims.width;
  defs.push_back(
      {source.prefix + name + ".weight", {c}, ParamInit::kOnes, 0.0, source.source_layer});
  if (dims.spec().norm_bias()) {
    defs.push_back(
        {source.prefix + name + ".bias", {c}, ParamInit::kZeros, 0.0, source.source_layer});
  }
}

void AppendAttentionDefs(std::vector<ParamDef>& defs, const SublayerSource& source,
                         const ModelDims& dims) {
  const int64_t c = dims.width;
  const bool bias = dims.spec().linear_biases;
  AppendNormDefs(defs, source, "ln_1", dims);
  const int64_t kv = int64_t{dims.kv_heads()} * dims.head_dim();
  AppendLinearDefs(defs, source, "attn.c_attn", c, dims.qkv_width(), false, dims.low_rank_attn,
                   dims.num_layers, bias, {LinearCut::kColumns, {c, kv, kv}});
  AppendLinearDefs(defs, source, "attn.c_proj", c, c, true, dims.low_rank_attn, dims.num_layers,
                   bias, {LinearCut::kRows, {}});
}

// The MLP sublayer's parameters "h.{i}.ln_2.*", "h.{i}.mlp.*", in params() order.
void AppendMlpDefs(std::vector<ParamDef>& defs, const SublayerSource& source,
                   const ModelDims& dims) {
  const int64_t c = dims.width;
  const bool bias = dims.spec().linear_biases;
  AppendNormDefs(defs, source, "ln_2", dims);
  const int64_t h = dims.hidden();
  AppendLinearDefs(defs, source, "mlp.c_fc", c, dims.fc_width(), false, dims.low_rank_mlp,
                   dims.num_layers, bias,
                   {LinearCut::kColumns,
                    dims.spec().swiglu() ? std::vector<int64_t>{h, h} : std::vector<int64_t>{h}});
  AppendLinearDefs(defs, source, "mlp.c_proj", h, c, true, dims.low_rank_mlp, dims.num_layers, bias,
                   {LinearCut::kRows, {}});
}

Param* Find(std::vector<Param>& params, const std::string& name) {
  for (Param& p : params) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

Norm NormView(std::vector<Param>& p, const std::string& base, const ModelDims& dims) {
  Norm norm{Find(p, base + ".weight"), Find(p, base + ".bias"), dims.spec().rms_norm(),
            dims.norm_eps};
  BATON_CHECK(norm.weight != nullptr && (norm.rms || norm.bias != nullptr), "no norm {}", base);
  return norm;
}

Linear LinearView(std::vector<Param>& p, const std::string& base) {
  Linear linear{Find(p, base + ".weight"), Find(p, base + ".bias")};
  if (linear.weight == nullptr) {  // low rank
    linear.weight = Find(p, base + ".weight_u");
    linear.weight_v = Find(p, base + ".weight_v");
    BATON_CHECK(linear.weight_v != nullptr, "linear {} has weight_u but no weight_v", base);
  }
  BATON_CHECK(linear.weight != nullptr, "no linear {}", base);
  return linear;
}

model_ops::MlpParams MlpView(std::vector<Param>& p, const SublayerSource& source,
                             const ModelDims& dims, TensorGroup* tensor) {
  return {NormView(p, source.prefix + "ln_2", dims), LinearView(p, source.prefix + "mlp.c_fc"),
          LinearView(p, source.prefix + "mlp.c_proj"), dims.spec().swiglu(), tensor};
}

// Sequence parallelism: a norm applied to this rank's part of the sequence has a part of its
// gradient here (Param::sequence_partial_grad).
void MarkSequencePartial(const Norm& norm, const TensorGroup* tensor) {
  if (!SequenceParallel(tensor)) return;
  norm.weight->sequence_partial_grad = true;
  if (norm.bias != nullptr) norm.bias->sequence_partial_grad = true;
}

// Tensor parallelism needs the heads and the hidden units to split evenly.
void CheckTensorSplit(const ModelDims& dims, LayerKind kind, const TensorGroup* tensor) {
  const int t = TensorSize(tensor);
  if (t == 1) return;
  BATON_CHECK(dims.low_rank_attn == 0 && dims.low_rank_mlp == 0,
              "tensor parallelism cuts dense matrices; this model is low-rank ({})",
              ToString(dims));
  BATON_CHECK(dims.hidden() % t == 0, "the MLP's {} hidden units do not split over {} tensor ranks",
              dims.hidden(), t);
  if (kind == LayerKind::kBlock) {
    BATON_CHECK(dims.num_heads % t == 0 && dims.kv_heads() % t == 0,
                "{} query and {} key/value heads do not split over {} tensor ranks", dims.num_heads,
                dims.kv_heads(), t);
  }
}

// Every weight matrix (dense, or both low-rank factors) of `linears`, in order.
std::vector<Param*> WeightMatrices(std::initializer_list<Linear> linears) {
  std::vector<Param*> out;
  for (const Linear& l : linears) {
    out.push_back(l.weight);
    if (l.weight_v != nullptr) out.push_back(l.weight_v);
  }
  return out;
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

// New positions start .. start+T-1 of x (B,T,C) fit the context.
void CheckCachedPositions(const Tensor& x, int64_t start, const ModelDims& dims,
                          const std::string& who) {
  BATON_CHECK(start >= 0 && start + x.size(1) <= dims.context,
              "{}: positions {}..{} exceed the context {}", who, start, start + x.size(1) - 1,
              dims.context);
}

void CheckGradient(const Tensor& dy, const ModelDims& dims, DType act_dtype,
                   const std::string& who) {
  BATON_CHECK(dy.defined() && dy.dim() == 3 && dy.size(2) == dims.width && dy.dtype() == act_dtype,
              "{} needs dy (B,T,C={}) {}, got {}", who, dims.width, Name(act_dtype), dy.ToString());
}

// The defs of a block of `kind` (block or mlp_block).
std::vector<ParamDef> BlockDefs(LayerKind kind, const ModelDims& dims, int layer_index,
                                int block_index) {
  std::vector<ParamDef> defs;
  if (kind == LayerKind::kBlock) {
    AppendAttentionDefs(defs, SourceOf(dims, dims.share_attention, layer_index, block_index), dims);
  }
  AppendMlpDefs(defs, SourceOf(dims, dims.share_mlp, layer_index, block_index), dims);
  return defs;
}

}  // namespace

std::vector<std::string> SharedParamNames(LayerKind kind, const ModelDims& dims, int layer_index,
                                          int block_index) {
  std::vector<std::string> names;
  for (const ParamDef& def : BlockDefs(kind, dims, layer_index, block_index)) {
    if (def.source_layer >= 0 && def.source_layer != layer_index) names.push_back(def.name);
  }
  return names;
}

// ---- BlockLayer

BlockLayer::BlockLayer(Backend& backend, const ModelDims& dims, DType param_dtype, DType act_dtype,
                       uint64_t seed, int layer_index, int block_index, const LocalParams& local,
                       TensorGroup* tensor)
    : backend_(backend),
      dims_(dims),
      act_dtype_(act_dtype),
      name_(fmt::format("block.{}", block_index)) {
  Validate(dims);
  BATON_CHECK(block_index >= 0, "block index {} must be non-negative", block_index);
  const SublayerSource attn = SourceOf(dims, dims.share_attention, layer_index, block_index);
  const SublayerSource mlp = SourceOf(dims, dims.share_mlp, layer_index, block_index);
  CheckTensorSplit(dims, LayerKind::kBlock, tensor);
  const std::vector<ParamDef> defs = BlockDefs(LayerKind::kBlock, dims, layer_index, block_index);
  params_ =
      NewParams(backend, defs, param_dtype, seed, layer_index, dims.num_layers, local, tensor);
  const int t = TensorSize(tensor);  // each tensor rank attends with its share of the heads
  attn_ = {NormView(params_, attn.prefix + "ln_1", dims),
           LinearView(params_, attn.prefix + "attn.c_attn"),
           LinearView(params_, attn.prefix + "attn.c_proj"),
           AttentionHeads{dims.num_heads / t, dims.kv_heads() / t},
           /*flash=*/true,
           /*rotary=*/dims.spec().rotary(),
           dims.rope,
           tensor};
  mlp_ = MlpView(params_, mlp, dims, tensor);
  MarkSequencePartial(attn_.ln, tensor);
  MarkSequencePartial(mlp_.ln, tensor);
}

std::vector<Param*> BlockLayer::params() { return Pointers(params_); }

Tensor BlockLayer::Forward(const Tensor& x, const MicroBatch& batch, Stash& stash) {
  CheckInput(x, dims_, act_dtype_, name_);
  BATON_CHECK(stash.empty(), "{}: Forward into a stash that is in use", name_);
  const Tensor x2 = model_ops::AttentionSublayerForward(backend_, attn_, x, batch.segment_starts,
                                                        selective_recompute_, stash);
  return model_ops::MlpSublayerForward(backend_, mlp_, x2, selective_recompute_, stash);
}

Tensor BlockLayer::ForwardCached(const Tensor& x, const MicroBatch& /*batch*/, int64_t start,
                                 KvCache& cache) {
  CheckInput(x, dims_, act_dtype_, name_);
  CheckCachedPositions(x, start, dims_, name_);
  BATON_CHECK(start == cache.length, "{}: new positions from {}, but the cache holds {}", name_,
              start, cache.length);
  const Tensor x2 = model_ops::AttentionSublayerCached(backend_, attn_, x, dims_.context, cache);
  return model_ops::MlpSublayerInference(backend_, mlp_, x2);
}

Tensor BlockLayer::BackwardPass(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                                bool defer_weights) {
  CheckGradient(dy, dims_, act_dtype_, name_);
  model_ops::WeightGradSink sink(backend_, defer_weights);
  // dx2 is c_proj's output gradient, so an operand of attn.c_proj's weight GEMM.
  Tensor dx2 =
      model_ops::MlpSublayerBackward(backend_, mlp_, dy, stash, sink, sink.operand_category());
  Tensor dx = model_ops::AttentionSublayerBackward(backend_, attn_, dx2, batch.segment_starts,
                                                   stash, sink, MemCategory::kActivations);
  dx2 = Tensor();
  sink.Finish(stash);
  return dx;
}

Tensor BlockLayer::Backward(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                            const BackwardArgs& /*args*/) {
  return BackwardPass(dy, batch, stash, /*defer_weights=*/false);
}

Tensor BlockLayer::BackwardInput(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                                 const BackwardArgs& /*args*/) {
  return BackwardPass(dy, batch, stash, /*defer_weights=*/true);
}

void BlockLayer::BackwardWeight(Stash& stash) {
  model_ops::RunDeferredWeightGrads(
      backend_, WeightMatrices({attn_.c_attn, attn_.c_proj, mlp_.c_fc, mlp_.c_proj}), stash);
}

// ---- MlpBlockLayer

MlpBlockLayer::MlpBlockLayer(Backend& backend, const ModelDims& dims, DType param_dtype,
                             DType act_dtype, uint64_t seed, int layer_index, int block_index,
                             const LocalParams& local, TensorGroup* tensor)
    : backend_(backend),
      dims_(dims),
      act_dtype_(act_dtype),
      name_(fmt::format("mlp_block.{}", block_index)) {
  Validate(dims);
  BATON_CHECK(block_index >= 0, "block index {} must be non-negative", block_index);
  const SublayerSource mlp = SourceOf(dims, dims.share_mlp, layer_index, block_index);
  CheckTensorSplit(dims, LayerKind::kMlpBlock, tensor);
  const std::vector<ParamDef> defs =
      BlockDefs(LayerKind::kMlpBlock, dims, layer_index, block_index);
  params_ =
      NewParams(backend, defs, param_dtype, seed, layer_index, dims.num_layers, local, tensor);
  mlp_ = MlpView(params_, mlp, dims, tensor);
  MarkSequencePartial(mlp_.ln, tensor);
}

std::vector<Param*> MlpBlockLayer::params() { return Pointers(params_); }

Tensor MlpBlockLayer::Forward(const Tensor& x, const MicroBatch& /*batch*/, Stash& stash) {
  CheckInput(x, dims_, act_dtype_, name_);
  BATON_CHECK(stash.empty(), "{}: Forward into a stash that is in use", name_);
  return model_ops::MlpSublayerForward(backend_, mlp_, x, selective_recompute_, stash);
}

Tensor MlpBlockLayer::ForwardCached(const Tensor& x, const MicroBatch& /*batch*/, int64_t start,
                                    KvCache& /*cache*/) {
  CheckInput(x, dims_, act_dtype_, name_);
  CheckCachedPositions(x, start, dims_, name_);
  return model_ops::MlpSublayerInference(backend_, mlp_, x);
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
  model_ops::RunDeferredWeightGrads(backend_, WeightMatrices({mlp_.c_fc, mlp_.c_proj}), stash);
}

}  // namespace baton
