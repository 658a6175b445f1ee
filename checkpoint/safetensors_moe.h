// Mixtures of experts in Hugging Face folders (docs/safetensors.md, "Mixtral and Qwen2-MoE"): the
// experts' part of config.json and the experts' tensors of MixtralForCausalLM
// (block_sparse_moe.gate, experts.{e}.w1/w2/w3) and Qwen2MoeForCausalLM (mlp.gate,
// mlp.experts.{e}.gate_proj/up_proj/down_proj, mlp.shared_expert.*, mlp.shared_expert_gate), on
// top of the Llama import and export (checkpoint/safetensors_llama.h), which calls these.
//
// Baton stacks an MoE block's experts: mlp.experts.c_fc.weight (E, C, 2I) holds expert e's
// [w1^T | w3^T] (gate, up) as block e, mlp.experts.c_proj.weight (E, I, C) its w2^T; the router
// mlp.router.weight (C, E) is gate.weight^T.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/safetensors_llama.h"
#include "core/json_fields.h"
#include "model/dims.h"

namespace baton {

// Reads the experts of a Mixtral (num_local_experts, num_experts_per_tok, router_aux_loss_coef;
// each expert intermediate_size wide; every layer sparse) or a Qwen2-MoE (num_experts,
// num_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size with its gate,
// decoder_sparse_step, norm_topk_prob, router_aux_loss_coef; mlp_only_layers must be empty) into
// c.moe, by c.mixtral / c.qwen2_moe; each refusal names the file and the key.
void ReadHfMoeConfig(const JsonField& config, HfLlamaConfig& c);

// The Hugging Face tensors of MoE block `block`'s MLP parameter `rest` ("mlp.router.weight",
// "mlp.experts.c_fc.weight", ...), as LlamaHfParts gives them; throws for another name.
std::vector<HfLlamaPart> MoeHfParts(int block, const std::string& rest, const ModelDims& dims);

// Baton's names (after "h.{i}.") of an MoE block's MLP parameters, in parameter order.
std::vector<std::string> MoeParamRests(const ModelDims& dims);

// The experts' keys of a config.json written for `dims` (model_type and architectures included):
// Mixtral's for experts without shared ones in every block, Softmax-top-k renormalised; Qwen2-MoE's
// for a Qwen2 block's experts with one gated shared expert in blocks every-1, 2 every-1, ...
// Throws, naming the choice, for experts neither describes.
void AddHfMoeConfig(const ModelDims& dims, nlohmann::ordered_json& config);

}  // namespace baton
