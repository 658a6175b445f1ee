// The attention sublayer (model/sublayer.h): y = x + c_proj(attention(c_attn(ln_1(x)))), its
// kernels in model/sublayer_ops.cc. Parameters, in order ("h.{i}." prefixed): ln_1.weight (C),
// ln_1.bias (C, LayerNorm only), attn.c_attn.weight (C, (NH+2KVH)D), attn.c_attn.bias,
// attn.c_proj.weight (NH D, C: C x C unless the head size is set apart), attn.c_proj.bias (biases
// per BlockSpec::linear_biases; c_attn's also with BlockSpec::qkv_bias).
#include <fmt/format.h>

#include <memory>
#include <string>

#include "core/error.h"
#include "model/sublayer.h"
#include "model/sublayer_ops.h"

namespace baton {
namespace {

using model_ops::LinearCut;

class AttentionSublayer final : public Sublayer {
 public:
  explicit AttentionSublayer(const ModelDims& dims) : dims_(dims) {}

  const char* name() const override { return "attention"; }
  bool shared() const override { return dims_.share_attention; }

  void AppendDefs(std::vector<ParamDef>& defs, const SublayerSource& source) const override {
    const int64_t c = dims_.width;
    const BlockSpec spec = dims_.spec();
    model_ops::AppendNormDefs(defs, source, "ln_1", dims_);
    const int64_t q = dims_.attention_width();
    const int64_t kv = int64_t{dims_.kv_heads()} * dims_.head_dim();
    // Column-parallel by heads: each rank's queries, keys and values.
    model_ops::AppendLinearDefs(defs, source, "attn.c_attn", c, dims_.qkv_width(), false,
                                dims_.low_rank_attn, dims_.num_layers, spec.attention_in_bias(),
                                {LinearCut::kColumns, {q, kv, kv}});
    model_ops::AppendLinearDefs(defs, source, "attn.c_proj", q, c, true, dims_.low_rank_attn,
                                dims_.num_layers, spec.linear_biases, {LinearCut::kRows, {}});
    if (spec.qk_norm) {  // Qwen3: one weight per head size, shared by the heads (replicated)
      for (const char* norm : {"attn.q_norm.weight", "attn.k_norm.weight"}) {
        defs.push_back(
            {source.prefix + norm, {dims_.head_dim()}, ParamInit::kOnes, 0.0, source.source_layer});
      }
    }
  }

  std::string TensorSplitProblem(int tensor) const override {
    if (dims_.num_heads % tensor == 0 && dims_.kv_heads() % tensor == 0) return "";
    return fmt::format("{} query and {} key/value heads do not split over {} tensor ranks",
                       dims_.num_heads, dims_.kv_heads(), tensor);
  }

  LayerCollectives Collectives(int64_t rows, DType act_dtype,
                               const TensorLayout& layout) const override {
    LayerCollectives c = model_ops::AttentionSublayerCollectives(rows, dims_.width, act_dtype,
                                                                 dims_.spec().norm_bias(), layout);
    if (dims_.spec().qk_norm && layout.tensor > 1) {  // each rank's heads' part of the q/k norms'
      for (int norm = 0; norm < 2; ++norm) {
        c.step_end.push_back({TensorCollective::Kind::kGradientSum, dims_.head_dim(), DType::kF32});
      }
    }
    return c;
  }

  // c_attn and c_proj; QK^T and PV 2*2*B*T*K*NH*D, K = T keys per query (the full T x T), or
  // the sliding window's W when it is shorter.
  int64_t ForwardFlops(const MicroBatchShape& shape) const override {
    const int64_t n = shape.batch_size * shape.seq_len, c = dims_.width, r = dims_.low_rank_attn;
    const int64_t q = dims_.attention_width();
    const int64_t linears =
        2 * n * (model_ops::WeightCount(c, dims_.qkv_width(), r) + model_ops::WeightCount(q, c, r));
    return linears + 4 * n * dims_.attention_window(shape.seq_len) * q;
  }

  // A low-rank linear's backward redoes x @ U; flash attention's backward redoes QK^T, and
  // materialized attention under selective recompute QK^T and PV.
  int64_t RecomputeFlops(const MicroBatchShape& shape) const override {
    const int64_t n = shape.batch_size * shape.seq_len, c = dims_.width, r = dims_.low_rank_attn;
    const int64_t q = dims_.attention_width();
    const int64_t low_rank = r > 0 ? 2 * n * r * (c + q) : 0;
    const int64_t keys = dims_.attention_window(shape.seq_len);
    if (shape.flash_attention) return low_rank + 2 * n * keys * q;
    return low_rank + (shape.selective_recompute ? 4 * n * keys * q : 0);
  }

  void Bind(Backend& /*backend*/, std::vector<Param>& params, const SublayerSource& source,
            TensorGroup* tensor, ExpertGroup* /*experts*/) override {
    const int t = TensorSize(tensor);  // each tensor rank attends with its share of the heads
    params_ = {model_ops::NormView(params, source.prefix + "ln_1", dims_),
               model_ops::LinearView(params, source.prefix + "attn.c_attn"),
               model_ops::LinearView(params, source.prefix + "attn.c_proj"),
               AttentionHeads{dims_.num_heads / t, dims_.kv_heads() / t},
               /*flash=*/true,
               /*rotary=*/dims_.spec().rotary(),
               dims_.rope,
               dims_.sliding_window,
               tensor,
               /*q_norm=*/{},
               /*k_norm=*/{}};
    model_ops::MarkSequencePartial(params_.ln, tensor);
    if (dims_.spec().qk_norm) {
      for (auto [norm, name] :
           {std::pair{&params_.q_norm, "q_norm"}, {&params_.k_norm, "k_norm"}}) {
        *norm = model_ops::NormView(params, source.prefix + "attn." + name, dims_);
        // Each tensor rank normalises its own heads: its weight gradient is a part of the sum.
        if (t > 1) norm->weight->tensor_partial_grad = true;
      }
    }
  }

  Tensor Forward(Backend& backend, const Tensor& x, const MicroBatch& batch,
                 bool selective_recompute, Stash& stash) override {
    return model_ops::AttentionSublayerForward(backend, params_, x, batch.segment_starts,
                                               selective_recompute, stash);
  }

  Tensor Backward(Backend& backend, const Tensor& dy, const MicroBatch& batch, const Stash& stash,
                  const BackwardArgs& /*args*/, model_ops::WeightGradSink& sink,
                  MemCategory dx_category) override {
    return model_ops::AttentionSublayerBackward(backend, params_, dy, batch.segment_starts, stash,
                                                sink, dx_category);
  }

  Tensor ForwardCached(Backend& backend, const Tensor& x, const std::vector<int64_t>& starts,
                       KvCache& cache, const std::string& who) override {
    BATON_CHECK(cache.rows() == 0 || cache.rows() == static_cast<int64_t>(starts.size()),
                "{}: {} rows of new positions for a key-value cache of {} rows", who, starts.size(),
                cache.rows());
    for (size_t b = 0; b < starts.size(); ++b) {
      const auto row = static_cast<int64_t>(b);
      BATON_CHECK(starts[b] == cache.end(row),
                  "{}: row {}'s new positions start at {}, but its cache ends at {}", who, b,
                  starts[b], cache.end(row));
    }
    // A sliding window holds at most its own positions (the decoder drops the older ones).
    return model_ops::AttentionSublayerCached(backend, params_, x,
                                              dims_.attention_window(dims_.context), cache);
  }

  void AppendWeightMatrices(std::vector<Param*>& out) const override {
    model_ops::AppendWeightMatrices(params_.c_attn, out);
    model_ops::AppendWeightMatrices(params_.c_proj, out);
  }

  void set_flash_attention(bool on) override { params_.flash = on; }
  bool flash_attention() const override { return params_.flash; }

 private:
  ModelDims dims_;
  model_ops::AttentionParams params_;
};

}  // namespace

std::unique_ptr<Sublayer> MakeAttentionSublayer(const ModelDims& dims) {
  return std::make_unique<AttentionSublayer>(dims);
}

}  // namespace baton
