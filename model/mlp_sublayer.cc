// The MLP sublayer (model/sublayer.h): y = x + c_proj(gelu(c_fc(ln_2(x)))) (GPT-2), or
// y = x + c_proj(silu(gate) * up) with [gate | up] = c_fc(ln_2(x)) (Llama's SwiGLU); its kernels
// in model/sublayer_ops.cc. Parameters, in order ("h.{i}." prefixed): ln_2.weight (C), ln_2.bias
// (C, LayerNorm only), mlp.c_fc.weight (C, H or 2H), mlp.c_fc.bias, mlp.c_proj.weight (H, C),
// mlp.c_proj.bias (biases per BlockSpec::linear_biases).
#include <fmt/format.h>

#include <memory>
#include <string>

#include "core/error.h"
#include "model/sublayer.h"
#include "model/sublayer_ops.h"

namespace baton {
namespace {

using model_ops::LinearCut;

class MlpSublayer final : public Sublayer {
 public:
  explicit MlpSublayer(const ModelDims& dims) : dims_(dims) {}

  const char* name() const override { return "mlp"; }
  bool shared() const override { return dims_.share_mlp; }

  void AppendDefs(std::vector<ParamDef>& defs, const SublayerSource& source) const override {
    const int64_t c = dims_.width;
    const bool bias = dims_.spec().linear_biases;
    model_ops::AppendNormDefs(defs, source, "ln_2", dims_);
    const int64_t h = dims_.hidden();
    // Column-parallel by hidden units (SwiGLU: each rank's gates and its ups).
    model_ops::AppendLinearDefs(
        defs, source, "mlp.c_fc", c, dims_.fc_width(), false, dims_.low_rank_mlp, dims_.num_layers,
        bias,
        {LinearCut::kColumns,
         dims_.spec().swiglu() ? std::vector<int64_t>{h, h} : std::vector<int64_t>{h}});
    model_ops::AppendLinearDefs(defs, source, "mlp.c_proj", h, c, true, dims_.low_rank_mlp,
                                dims_.num_layers, bias, {LinearCut::kRows, {}});
  }

  std::string TensorSplitProblem(int tensor) const override {
    if (dims_.hidden() % tensor == 0) return "";
    return fmt::format("the MLP's {} hidden units do not split over {} tensor ranks",
                       dims_.hidden(), tensor);
  }

  LayerCollectives Collectives(int64_t rows, DType act_dtype,
                               const TensorLayout& layout) const override {
    return model_ops::MlpSublayerCollectives(rows, dims_.width, act_dtype, dims_.spec().norm_bias(),
                                             layout);
  }

  // c_fc and c_proj.
  int64_t ForwardFlops(const MicroBatchShape& shape) const override {
    const int64_t n = shape.batch_size * shape.seq_len, c = dims_.width, r = dims_.low_rank_mlp;
    return 2 * n *
           (model_ops::WeightCount(c, dims_.fc_width(), r) +
            model_ops::WeightCount(dims_.hidden(), c, r));
  }

  // Selective recompute redoes c_fc's forward; a low-rank linear's backward redoes x @ U.
  int64_t RecomputeFlops(const MicroBatchShape& shape) const override {
    const int64_t n = shape.batch_size * shape.seq_len, c = dims_.width, r = dims_.low_rank_mlp;
    const int64_t c_fc =
        shape.selective_recompute ? 2 * n * model_ops::WeightCount(c, dims_.fc_width(), r) : 0;
    return c_fc + (r > 0 ? 2 * n * r * (c + dims_.hidden()) : 0);
  }

  void Bind(Backend& /*backend*/, std::vector<Param>& params, const SublayerSource& source,
            TensorGroup* tensor, ExpertGroup* /*experts*/) override {
    params_ = {model_ops::NormView(params, source.prefix + "ln_2", dims_),
               model_ops::LinearView(params, source.prefix + "mlp.c_fc"),
               model_ops::LinearView(params, source.prefix + "mlp.c_proj"), dims_.spec().swiglu(),
               tensor};
    model_ops::MarkSequencePartial(params_.ln, tensor);
  }

  Tensor Forward(Backend& backend, const Tensor& x, const MicroBatch& /*batch*/,
                 bool selective_recompute, Stash& stash) override {
    return model_ops::MlpSublayerForward(backend, params_, x, selective_recompute, stash);
  }

  Tensor Backward(Backend& backend, const Tensor& dy, const MicroBatch& /*batch*/,
                  const Stash& stash, const BackwardArgs& /*args*/, model_ops::WeightGradSink& sink,
                  MemCategory dx_category) override {
    return model_ops::MlpSublayerBackward(backend, params_, dy, stash, sink, dx_category);
  }

  // No attention: the cache is left alone.
  Tensor ForwardCached(Backend& backend, const Tensor& x, const std::vector<int64_t>& /*starts*/,
                       KvCache& /*cache*/, const std::string& /*who*/) override {
    return model_ops::MlpSublayerInference(backend, params_, x);
  }

  void AppendWeightMatrices(std::vector<Param*>& out) const override {
    model_ops::AppendWeightMatrices(params_.c_fc, out);
    model_ops::AppendWeightMatrices(params_.c_proj, out);
  }

 private:
  ModelDims dims_;
  model_ops::MlpParams params_;
};

}  // namespace

std::unique_ptr<Sublayer> MakeMlpSublayer(const ModelDims& dims) {
  return std::make_unique<MlpSublayer>(dims);
}

}  // namespace baton
