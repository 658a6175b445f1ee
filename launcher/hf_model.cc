// A Hugging Face Llama-family folder as model.init_from: the model its config.json describes
// (see hf_model.h).
#include "launcher/hf_model.h"

#include <spdlog/spdlog.h>

#include <set>
#include <string>
#include <vector>

#include "checkpoint/safetensors_llama.h"
#include "core/error.h"
#include "model/from_config.h"

namespace baton {
namespace {

// A Hugging Face Llama folder as model.init_from: config.json decides the architecture (the
// preset, every dim, the norm's epsilon, rotary positions, the head's tie, the experts); the YAML
// keeps model.context when it is at most max_position_embeddings. Every value config.json changes
// is logged with the YAML's; returns those lines. The casts to int are exact: ReadHfLlamaConfig
// refuses, naming config.json and the key, any size above INT_MAX.
// The model's name in logs: its Hugging Face family.
const char* ModelName(const HfLlamaConfig& c) {
  return c.qwen3_moe   ? "Qwen3-MoE"
         : c.qwen3     ? "Qwen3"
         : c.qwen2_moe ? "Qwen2-MoE"
         : c.qwen2     ? "Qwen2"
         : c.mixtral   ? "Mixtral"
         : c.mistral   ? "Mistral"
                       : "Llama";
}

std::vector<std::string> TakeHfLlamaDims(const HfLlamaConfig& hf, ModelConfig& model) {
  std::vector<std::string> taken;
  const auto take = [&](const char* key, auto& field, auto value) {
    if (field == value) return;
    taken.push_back(
        fmt::format("model.{}: {} from config.json (the YAML's {})", key, value, field));
    field = value;
  };
  // A Mixtral without its window is a Llama with experts (Baton's Mistral is a window), as
  // DimsOfHfLlama has it.
  const ModelPreset preset = hf.qwen2   ? ModelPreset::kQwen2
                             : hf.qwen3 ? ModelPreset::kQwen3
                             : hf.mistral && (!hf.mixtral || hf.sliding_window > 0)
                                 ? ModelPreset::kMistral
                                 : ModelPreset::kLlama;
  if (model.preset != preset) {
    taken.push_back(fmt::format("model.preset: {} from config.json (the YAML's {})", Name(preset),
                                Name(model.preset)));
    model.preset = preset;
  }
  take("vocab_size", model.vocab_size, hf.vocab_size);
  take("width", model.width, hf.hidden_size);
  take("num_layers", model.num_layers, static_cast<int>(hf.num_hidden_layers));
  take("num_heads", model.num_heads, static_cast<int>(hf.num_attention_heads));
  take("num_kv_heads", model.num_kv_heads, hf.num_key_value_heads);
  take("head_dim", model.head_dim, hf.head_dim);
  take("intermediate_size", model.intermediate_size, hf.intermediate_size);
  take("rms_norm_eps", model.rms_norm_eps, hf.rms_norm_eps);
  take("sliding_window", model.sliding_window, hf.sliding_window);
  take("rope_theta", model.rope_theta, hf.rope.theta);
  take("rope_scaling.factor", model.rope_scaling_factor, hf.rope.factor);
  if (hf.rope.factor > 0.0) {
    take("rope_scaling.low_freq_factor", model.rope_scaling_low_freq_factor,
         hf.rope.low_freq_factor);
    take("rope_scaling.high_freq_factor", model.rope_scaling_high_freq_factor,
         hf.rope.high_freq_factor);
    take("rope_scaling.original_context", model.rope_scaling_original_context,
         hf.rope.original_context);
  }
  const TieEmbeddings tie = hf.tie_word_embeddings ? TieEmbeddings::kTied : TieEmbeddings::kUntied;
  const bool yaml_tied = model.tie_embeddings == TieEmbeddings::kTied;  // auto: Llama's untied
  if (yaml_tied != hf.tie_word_embeddings) {
    taken.push_back(fmt::format("model.tie_embeddings: {} from config.json (the YAML's {})",
                                hf.tie_word_embeddings, yaml_tied));
  }
  if (model.tie_embeddings != tie) {
    model.tie_embeddings = tie;
  }
  if (model.context > hf.max_position_embeddings) {
    take("context", model.context, hf.max_position_embeddings);
  }
  // The experts (Mixtral, Qwen2-MoE: checkpoint/safetensors_moe.h), or none. The router's
  // losses, capacity and bias rate are training choices and stay the YAML's.
  const MoeDims& e = hf.moe;
  MoeConfig& moe = model.moe;
  take("moe.num_experts", moe.num_experts, int64_t{e.num_experts});
  if (e.enabled()) {
    take("moe.top_k", moe.top_k, int64_t{e.top_k});
    take("moe.expert_intermediate_size", moe.expert_intermediate_size, int64_t{e.expert_hidden});
    take("moe.shared_experts", moe.shared_experts, int64_t{e.shared_experts});
    if (e.shared_experts > 0) {
      take("moe.shared_expert_intermediate_size", moe.shared_expert_intermediate_size,
           int64_t{e.shared_hidden});
    }
    take("moe.shared_expert_gate", moe.shared_expert_gate, e.shared_gate);
    take("moe.first_dense_layers", moe.first_dense_layers, int64_t{e.first_dense});
    take("moe.every", moe.every, int64_t{e.every});
    if (moe.router != MoeRouter::kSoftmaxTopk) {  // both folders' routers are softmax, then top k
      taken.push_back(fmt::format("model.moe.router: {} from config.json (the YAML's {})",
                                  Name(MoeRouter::kSoftmaxTopk), Name(moe.router)));
      moe.router = MoeRouter::kSoftmaxTopk;
    }
    take("moe.norm_topk_prob", moe.norm_topk_prob, e.norm_topk_prob);
  }
  return taken;
}
}  // namespace

// The files the config names, checked before anything is planned or started (a missing one was
// found only inside the workers, once per stage, without naming the key). A Hugging Face folder
// as model.init_from (what `baton export` writes, or a hub download) is read through its
// model.safetensors.
Config WithHfLlamaModel(Config config) {
  const std::string& init = config.model.init_from;
  if (init.empty() || !IsHfLlamaFolder(init)) return config;
  // Read here once, so that a folder that is not a Llama Baton can load fails before planning.
  const HfLlamaFolder folder = HfLlamaFolder::Open(init);
  for (const std::string& line : TakeHfLlamaDims(folder.config(), config.model)) {
    spdlog::info("model.init_from {}: {}", init, line);
  }
  try {
    Validate(config);  // config.json's sizes against the YAML's bounds (model.num_layers <= 4096)
  } catch (const Error& e) {
    BATON_FAIL("{}/config.json describes a model Baton cannot take: {}", init, e.what());
  }
  ValidateHfLlamaFolder(folder, DimsOf(config.model));
  std::set<std::string> files;
  for (const auto& [tensor, file] : folder.weight_map()) files.insert(file);
  spdlog::info("model.init_from {}: a Hugging Face {} in {} weight file(s)", init,
               ModelName(folder.config()), files.size());
  return config;
}

}  // namespace baton
