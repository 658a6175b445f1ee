// Hugging Face Llama-family config.json (LlamaForCausalLM and the models Baton loads as Llama
// blocks: Qwen2, Mistral, Mixtral, Qwen2-MoE, Qwen3, Qwen3-MoE): what Baton reads from one, checks
// in it and writes, and the model dims it describes. See docs/safetensors.md, "config.json"; the
// weights themselves are safetensors_llama.h's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "model/dims.h"

namespace baton {

// The fields of a Hugging Face LlamaConfig (config.json) that Baton reads and writes. Every size
// is in [1, INT_MAX] (ReadHfLlamaConfig refuses others), so it narrows to ModelDims' ints as is.
struct HfLlamaConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;  // C
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // config.json's head_dim where it is not hidden_size / num_attention_heads
  int64_t intermediate_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;  // rope_theta and rope_scaling (rope_type llama3; factor 0 = none)
  bool tie_word_embeddings = false;
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> eos_token_id;
  bool qwen2 = false;          // model_type qwen2 (Qwen2ForCausalLM): q, k and v have biases
  bool mistral = false;        // model_type mistral (MistralForCausalLM)
  int64_t sliding_window = 0;  // Mistral's; 0 = none (null in config.json)
  // Mixtures of experts (checkpoint/safetensors_moe.h): model_type mixtral (MixtralForCausalLM,
  // Mistral's attention) or qwen2_moe (Qwen2MoeForCausalLM, Qwen2's), and their experts.
  bool mixtral = false;
  bool qwen2_moe = false;
  // Qwen3 (model_type qwen3, Qwen3ForCausalLM: Llama's attention with q_norm / k_norm, no
  // biases) and Qwen3-MoE (qwen3_moe, Qwen3MoeForCausalLM: its experts, no shared one).
  bool qwen3 = false;
  bool qwen3_moe = false;
  MoeDims moe;
};

// Reads and checks `path` (a config.json): model_type "llama", or model_type absent (or null) and
// an architectures entry "LlamaForCausalLM"; or a Qwen2 the same way (model_type "qwen2",
// Qwen2ForCausalLM: biases on q, k and v, use_sliding_window false) or a Mistral (model_type
// "mistral", MistralForCausalLM: sliding_window null or a window); hidden_act silu; for a
// Llama no attention_bias or mlp_bias;
// head_dim any even size (Qwen3's differ from hidden_size / num_attention_heads, which must
// then divide only when head_dim is absent); rope_scaling null or of rope_type
// llama3; rms_norm_eps in (0, 1) and a normal f32. Every field read has its type checked and
// every size its range (core/json_fields.h); each refusal names the file and the key path.
HfLlamaConfig ReadHfLlamaConfig(const std::string& path);
// Whether `dir` is a Hugging Face folder whose config.json claims a Llama or a Qwen2: model_type
// "llama" / "qwen2" or an architectures entry "LlamaForCausalLM" / "Qwen2ForCausalLM" (it may
// still fail ReadHfLlamaConfig's checks).
bool IsHfLlamaFolder(const std::string& dir);

// The dims of a model built from `config` (preset llama, or qwen2), with `context` positions.
ModelDims DimsOfHfLlama(const HfLlamaConfig& config, int64_t context);

// <dir>/config.json for LlamaForCausalLM.from_pretrained(dir) (Qwen2ForCausalLM for a Qwen2):
// every HfLlamaConfig field from `dims`, max_position_embeddings = context, head_dim, hidden_act
// silu, no biases (a Qwen2: q/k/v biases, no sliding window), torch_dtype `dtype`, and bos/eos ids
// when given. Written atomically.
void WriteHfLlamaConfig(const std::string& dir, const ModelDims& dims, DType dtype,
                        std::optional<int64_t> bos_token_id = std::nullopt,
                        std::optional<int64_t> eos_token_id = std::nullopt);

}  // namespace baton
