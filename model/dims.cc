// ModelDims validation and printing (see dims.h).
#include "model/dims.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace baton {

BlockSpec SpecOf(ModelFamily family) {
  switch (family) {
    case ModelFamily::kGpt2:
      return {};
    case ModelFamily::kLlama:
      return {BlockSpec::Norm::kRmsNorm, BlockSpec::Positions::kRotary, BlockSpec::Mlp::kSwiGlu,
              /*linear_biases=*/false};
    case ModelFamily::kMistral:
      return SpecOf(ModelFamily::kLlama);
    case ModelFamily::kQwen2:
      return {BlockSpec::Norm::kRmsNorm, BlockSpec::Positions::kRotary, BlockSpec::Mlp::kSwiGlu,
              /*linear_biases=*/false, /*qkv_bias=*/true};
    case ModelFamily::kQwen3: {
      BlockSpec spec = SpecOf(ModelFamily::kLlama);
      spec.qk_norm = true;
      return spec;
    }
  }
  BATON_FAIL("unknown model family {}", static_cast<int>(family));
}

void Validate(const ModelDims& dims) {
  BATON_CHECK(dims.vocab_size > 0, "vocab_size must be positive, got {}", dims.vocab_size);
  BATON_CHECK(dims.context > 0, "context must be positive, got {}", dims.context);
  BATON_CHECK(dims.num_layers > 0, "num_layers must be positive, got {}", dims.num_layers);
  BATON_CHECK(dims.num_heads > 0, "num_heads must be positive, got {}", dims.num_heads);
  BATON_CHECK(dims.width > 0, "width must be positive, got {}", dims.width);
  BATON_CHECK(dims.head_size > 0 || dims.width % dims.num_heads == 0,
              "width {} must be a multiple of num_heads {}", dims.width, dims.num_heads);
  BATON_CHECK(dims.head_size >= 0 && (dims.head_size == 0 || dims.llama()),
              "a head size set apart from the width ({}) is a Llama-family block's",
              dims.head_size);
  BATON_CHECK(dims.head_size == 0 || int64_t{dims.head_size} * dims.num_heads != dims.width,
              "head_size {} is width {} / num_heads {}: spelled 0", dims.head_size, dims.width,
              dims.num_heads);
  BATON_CHECK(dims.share_group >= 1, "share_group must be positive, got {}", dims.share_group);
  BATON_CHECK(dims.low_rank_attn >= 0 && dims.low_rank_attn <= dims.width &&
                  dims.low_rank_mlp >= 0 && dims.low_rank_mlp <= dims.width,
              "low ranks (attn {}, mlp {}) must be in [0, width {}]", dims.low_rank_attn,
              dims.low_rank_mlp, dims.width);
  BATON_CHECK(dims.num_kv_heads >= 0 && dims.num_heads % dims.kv_heads() == 0,
              "num_kv_heads {} must divide num_heads {}", dims.num_kv_heads, dims.num_heads);
  BATON_CHECK(dims.mlp_hidden >= 0, "mlp_hidden must be non-negative, got {}", dims.mlp_hidden);
  if (dims.spec().rotary()) {
    BATON_CHECK(dims.head_dim() % 2 == 0, "rotary positions need an even head size, got {}",
                dims.head_dim());
    BATON_CHECK(dims.rope.theta > 0.0, "rope theta {}", dims.rope.theta);
  }
  BATON_CHECK(dims.sliding_window >= 0 && (dims.sliding_window == 0 || dims.spec().rotary()),
              "a sliding window ({}) needs rotary positions (a Llama-family block)",
              dims.sliding_window);
  if (dims.spec().rms_norm()) {
    BATON_CHECK(dims.norm_eps > 0.0f, "norm eps {}", dims.norm_eps);
  }
  const MoeDims& moe = dims.moe;
  if (moe.enabled()) {
    BATON_CHECK(dims.spec().swiglu(), "experts are SwiGLU MLPs: a Llama-family block");
    BATON_CHECK(moe.top_k >= 1 && moe.top_k <= moe.num_experts && moe.expert_hidden > 0 &&
                    moe.every >= 1 && moe.first_dense >= 0 && moe.shared_experts >= 0 &&
                    (moe.shared_experts == 0 || moe.shared_hidden > 0) &&
                    (!moe.shared_gate || moe.shared_experts > 0) && moe.capacity_factor >= 0.0,
                "invalid experts: {} experts, top {}, width {}, {} shared of width {}, every {} "
                "after {}, capacity factor {}",
                moe.num_experts, moe.top_k, moe.expert_hidden, moe.shared_experts,
                moe.shared_hidden, moe.every, moe.first_dense, moe.capacity_factor);
  }
}

bool SameModel(const ModelDims& a, const ModelDims& b) {
  ModelDims training = a;
  training.moe.aux_loss_coef = b.moe.aux_loss_coef;
  training.moe.z_loss_coef = b.moe.z_loss_coef;
  training.moe.capacity_factor = b.moe.capacity_factor;
  training.moe.bias_update_rate = b.moe.bias_update_rate;
  return training == b;
}

const char* RouterName(MoeDims::Router router) {
  switch (router) {
    case MoeDims::Router::kSoftmaxTopk:
      return "softmax_topk";
    case MoeDims::Router::kTopkSoftmax:
      return "topk_softmax";
    case MoeDims::Router::kSigmoidBias:
      return "sigmoid_bias";
  }
  return "?";
}

std::optional<MoeDims::Router> RouterFromName(std::string_view name) {
  for (MoeDims::Router r : {MoeDims::Router::kSoftmaxTopk, MoeDims::Router::kTopkSoftmax,
                            MoeDims::Router::kSigmoidBias}) {
    if (name == RouterName(r)) return r;
  }
  return std::nullopt;
}

int64_t MoeDims::capacity(int64_t tokens) const {
  if (capacity_factor <= 0.0) return tokens;
  const double rows = capacity_factor * static_cast<double>(tokens * top_k) / num_experts;
  return std::min<int64_t>(tokens, static_cast<int64_t>(std::ceil(rows)));
}

int64_t MoeDims::routed_rows(int64_t tokens) const { return routed_rows(tokens, num_experts); }

int64_t MoeDims::routed_rows(int64_t tokens, int held) const {
  return std::min<int64_t>(tokens * std::min(top_k, held), int64_t{held} * capacity(tokens));
}

std::string ToString(const ModelDims& dims) {
  std::string out = fmt::format("V={} T={} L={} NH={} C={}", dims.vocab_size, dims.context,
                                dims.num_layers, dims.num_heads, dims.width);
  if (dims.shares()) {
    out += fmt::format(" share={}x{}", dims.share_group,
                       dims.share_attention && dims.share_mlp ? "all"
                       : dims.share_attention                 ? "attention"
                                                              : "mlp");
  }
  if (dims.low_rank_attn > 0) out += fmt::format(" low_rank.attn={}", dims.low_rank_attn);
  if (dims.low_rank_mlp > 0) out += fmt::format(" low_rank.mlp={}", dims.low_rank_mlp);
  if (dims.llama()) {
    out += fmt::format(" {} KVH={} H={} theta={}",
                       dims.qwen2()     ? "qwen2"
                       : dims.mistral() ? "mistral"
                       : dims.qwen3()   ? "qwen3"
                                        : "llama",
                       dims.kv_heads(), dims.hidden(), dims.rope.theta);
    if (dims.head_size > 0) out += fmt::format(" D={}", dims.head_size);
  }
  if (dims.sliding_window > 0) out += fmt::format(" window={}", dims.sliding_window);
  if (dims.moe.enabled()) {
    out += fmt::format(" moe={}x{}top{}", dims.moe.num_experts, dims.moe.expert_hidden,
                       dims.moe.top_k);
    if (dims.moe.shared_experts > 0) {
      out += fmt::format("+{}x{}shared", dims.moe.shared_experts, dims.moe.shared_hidden);
    }
  }
  if (!dims.tie_embeddings) out += " untied";
  return out;
}

}  // namespace baton
