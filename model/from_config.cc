#include "model/from_config.h"

#include "core/error.h"

namespace baton {

int64_t LlamaIntermediateSize(const ModelConfig& model) {
  if (model.intermediate_size > 0) return model.intermediate_size;
  const int64_t two_thirds = 8 * model.width / 3;
  return (two_thirds + 255) / 256 * 256;
}

ModelDims DimsOf(const ModelConfig& model) {
  ModelDims dims;
  dims.vocab_size = static_cast<int>(model.vocab_size);
  dims.context = static_cast<int>(model.context);
  dims.num_heads = model.num_heads;
  dims.width = static_cast<int>(model.width);
  dims.num_layers = model.num_layers;
  dims.share_group = model.share_group;
  dims.share_attention = model.share_what != ShareWhat::kMlp;
  dims.share_mlp = model.share_what != ShareWhat::kAttention;
  if (model.preset == ModelPreset::kMlp) dims.share_attention = false;
  if (model.share_group <= 1) dims.share_attention = dims.share_mlp = false;  // one form for none
  dims.low_rank_attn = static_cast<int>(model.low_rank_attn);
  dims.low_rank_mlp = static_cast<int>(model.low_rank_mlp);
  if (LlamaLike(model.preset)) {
    dims.family = model.preset == ModelPreset::kQwen2     ? ModelFamily::kQwen2
                  : model.preset == ModelPreset::kMistral ? ModelFamily::kMistral
                  : model.preset == ModelPreset::kQwen3   ? ModelFamily::kQwen3
                                                          : ModelFamily::kLlama;
    dims.sliding_window = static_cast<int>(model.sliding_window);
    // One spelling of the default head size: 0 (a head_dim of width / num_heads is that).
    if (model.head_dim * model.num_heads != model.width) {
      dims.head_size = static_cast<int>(model.head_dim);
    }
    dims.num_kv_heads = static_cast<int>(model.num_kv_heads);
    dims.mlp_hidden = static_cast<int>(LlamaIntermediateSize(model));
    dims.norm_eps = static_cast<float>(model.rms_norm_eps);
    dims.rope = {model.rope_theta, model.rope_scaling_factor, model.rope_scaling_low_freq_factor,
                 model.rope_scaling_high_freq_factor, model.rope_scaling_original_context};
    const MoeConfig& e = model.moe;
    if (e.num_experts > 0) {
      MoeDims& moe = dims.moe;
      moe.num_experts = static_cast<int>(e.num_experts);
      moe.top_k = static_cast<int>(e.top_k);
      moe.expert_hidden = static_cast<int>(
          e.expert_intermediate_size > 0 ? e.expert_intermediate_size : dims.mlp_hidden);
      moe.shared_experts = static_cast<int>(e.shared_experts);
      moe.shared_hidden =
          static_cast<int>(e.shared_expert_intermediate_size > 0 ? e.shared_expert_intermediate_size
                                                                 : moe.expert_hidden);
      moe.shared_gate = e.shared_expert_gate;
      moe.first_dense = static_cast<int>(e.first_dense_layers);
      moe.every = static_cast<int>(e.every);
      moe.router = e.router == MoeRouter::kTopkSoftmax   ? MoeDims::Router::kTopkSoftmax
                   : e.router == MoeRouter::kSigmoidBias ? MoeDims::Router::kSigmoidBias
                                                         : MoeDims::Router::kSoftmaxTopk;
      moe.norm_topk_prob = e.norm_topk_prob;
      moe.aux_loss_coef = e.aux_loss_coef;
      moe.z_loss_coef = e.z_loss_coef;
      moe.capacity_factor = e.capacity_factor;
      moe.bias_update_rate = moe.routing_bias() ? e.bias_update_rate : 0.0;
    }
  }
  dims.tie_embeddings = model.tie_embeddings == TieEmbeddings::kAuto
                            ? !LlamaLike(model.preset)
                            : model.tie_embeddings == TieEmbeddings::kTied;
  if (model.preset == ModelPreset::kCustom) {
    int blocks = 0;
    for (LayerKind kind : model.layers)
      blocks += (kind == LayerKind::kBlock || kind == LayerKind::kMlpBlock);
    dims.num_layers = blocks;
  }
  return dims;
}

std::vector<LayerSpec> GraphOf(const ModelConfig& model) {
  const ModelDims dims = DimsOf(model);
  switch (model.preset) {
    case ModelPreset::kGpt:
    case ModelPreset::kLlama:  // the same graph; the blocks differ (dims.family)
    case ModelPreset::kQwen2:
    case ModelPreset::kMistral:
    case ModelPreset::kQwen3:
      return GptGraph(dims);
    case ModelPreset::kMlp:
      return MlpGraph(dims);
    case ModelPreset::kCustom: {
      std::vector<std::string> names;
      for (LayerKind kind : model.layers) names.emplace_back(Name(kind));
      return CustomGraph(dims, names);
    }
  }
  BATON_FAIL("unknown model preset {}", static_cast<int>(model.preset));
}

}  // namespace baton
