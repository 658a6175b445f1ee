// Mixtral and Qwen2-MoE experts in Hugging Face folders (see safetensors_moe.h).
#include "checkpoint/safetensors_moe.h"

#include <fmt/format.h>

#include <limits>

#include "core/error.h"

namespace baton {
namespace {

constexpr int64_t kMaxSize = std::numeric_limits<int>::max();

int Size(const JsonField& field) { return static_cast<int>(field.Int(1, kMaxSize)); }

std::string Layer(int block, const std::string& rest) {
  return fmt::format("model.layers.{}.{}", block, rest);
}

}  // namespace

void ReadHfMoeConfig(const JsonField& config, HfLlamaConfig& c) {
  MoeDims& moe = c.moe;
  if (c.mixtral) {
    moe.num_experts = Size(config["num_local_experts"]);
    moe.expert_hidden = static_cast<int>(c.intermediate_size);
  } else {
    moe.num_experts = Size(config["num_experts"]);
    moe.expert_hidden = Size(config["moe_intermediate_size"]);
    if (c.qwen2_moe) {  // Qwen3-MoE has no shared expert
      moe.shared_experts = 1;
      moe.shared_hidden = Size(config["shared_expert_intermediate_size"]);
      moe.shared_gate = true;
    }
    const int step =
        static_cast<int>(config["decoder_sparse_step"].OptionalInt(1, kMaxSize).value_or(1));
    moe.every = step;
    moe.first_dense = step - 1;  // layer i is sparse when (i + 1) % step == 0
    moe.norm_topk_prob = config["norm_topk_prob"].OptionalBool().value_or(false);
    if (const JsonField only = config["mlp_only_layers"]; only.present()) {
      if (!only.Array().json().empty()) {
        only.Fail(only.json().dump() +
                  ": Baton's experts sit in every decoder_sparse_step-th layer, with no dense "
                  "exceptions");
      }
    }
  }
  moe.top_k = Size(config["num_experts_per_tok"]);
  if (moe.top_k > moe.num_experts) {
    config["num_experts_per_tok"].Fail(
        fmt::format("{} exceeds the {} experts", moe.top_k, moe.num_experts));
  }
  moe.aux_loss_coef = config["router_aux_loss_coef"].OptionalNumber().value_or(0.001);
}

std::vector<HfLlamaPart> MoeHfParts(int block, const std::string& rest, const ModelDims& dims) {
  const MoeDims& moe = dims.moe;
  const int64_t c = dims.width, e_count = moe.num_experts, i = moe.expert_hidden;
  const bool mixtral = !dims.qwen2() && !dims.qwen3();
  const std::string mlp = mixtral ? "block_sparse_moe." : "mlp.";
  if (rest == "mlp.router.weight") return {{Layer(block, mlp + "gate.weight"), {e_count, c}, true}};
  std::vector<HfLlamaPart> parts;
  if (rest == "mlp.experts.c_fc.weight" || rest == "mlp.experts.c_proj.weight") {
    const bool fc = rest == "mlp.experts.c_fc.weight";
    for (int e = 0; e < moe.num_experts; ++e) {
      const std::string expert = fmt::format("{}experts.{}.", mlp, e);
      if (fc) {
        parts.push_back(
            {Layer(block, expert + (mixtral ? "w1" : "gate_proj") + ".weight"), {i, c}, true, e});
        parts.push_back(
            {Layer(block, expert + (mixtral ? "w3" : "up_proj") + ".weight"), {i, c}, true, e});
      } else {
        parts.push_back(
            {Layer(block, expert + (mixtral ? "w2" : "down_proj") + ".weight"), {c, i}, true, e});
      }
    }
    return parts;
  }
  const int64_t s = moe.shared_width();
  if (moe.shared_experts > 0 && rest == "mlp.shared.c_fc.weight") {
    return {{Layer(block, "mlp.shared_expert.gate_proj.weight"), {s, c}, true},
            {Layer(block, "mlp.shared_expert.up_proj.weight"), {s, c}, true}};
  }
  if (moe.shared_experts > 0 && rest == "mlp.shared.c_proj.weight") {
    return {{Layer(block, "mlp.shared_expert.down_proj.weight"), {c, s}, true}};
  }
  if (moe.shared_gate && rest == "mlp.shared_gate.weight") {
    return {{Layer(block, "mlp.shared_expert_gate.weight"), {1, c}, true}};
  }
  BATON_FAIL("h.{}.{} is not a parameter of this model's experts ({})", block, rest,
             ToString(dims));
}

std::vector<std::string> MoeParamRests(const ModelDims& dims) {
  std::vector<std::string> rests = {"mlp.router.weight", "mlp.experts.c_fc.weight",
                                    "mlp.experts.c_proj.weight"};
  if (dims.moe.shared_experts > 0) {
    rests.insert(rests.end(), {"mlp.shared.c_fc.weight", "mlp.shared.c_proj.weight"});
  }
  if (dims.moe.shared_gate) rests.push_back("mlp.shared_gate.weight");
  return rests;
}

namespace {

// The keys Qwen2-MoE's and Qwen3-MoE's configs share.
void AddQwenMoeKeys(const MoeDims& moe, nlohmann::ordered_json& config) {
  config["num_experts"] = moe.num_experts;
  config["num_experts_per_tok"] = moe.top_k;
  config["moe_intermediate_size"] = moe.expert_hidden;
  config["decoder_sparse_step"] = moe.every;
  config["mlp_only_layers"] = nlohmann::ordered_json::array();
  config["norm_topk_prob"] = moe.norm_topk_prob;
  config["output_router_logits"] = false;
  config["router_aux_loss_coef"] = moe.aux_loss_coef;
}

}  // namespace

void AddHfMoeConfig(const ModelDims& dims, nlohmann::ordered_json& config) {
  const MoeDims& moe = dims.moe;
  BATON_CHECK(moe.router == MoeDims::Router::kSoftmaxTopk,
              "Hugging Face's Mixtral and Qwen2-MoE route by softmax then top k "
              "(model.moe.router softmax_topk), not {}",
              RouterName(moe.router));
  if (dims.qwen3()) {
    BATON_CHECK(moe.shared_experts == 0 && moe.first_dense == moe.every - 1,
                "a Qwen3-MoE (Qwen3MoeForCausalLM) has no shared expert and experts in layers "
                "decoder_sparse_step - 1, 2 decoder_sparse_step - 1, ...; this model is {}",
                ToString(dims));
    config["architectures"] = {"Qwen3MoeForCausalLM"};
    config["model_type"] = "qwen3_moe";
    AddQwenMoeKeys(moe, config);
    return;
  }
  if (!dims.qwen2()) {
    BATON_CHECK(
        moe.shared_experts == 0 && moe.first_dense == 0 && moe.every == 1 && moe.norm_topk_prob,
        "a Mixtral (MixtralForCausalLM) has experts in every layer, no shared ones, and "
        "renormalised weights; this model is {}",
        ToString(dims));
    for (const char* key : {"attention_bias", "mlp_bias", "pretraining_tp"}) config.erase(key);
    config["architectures"] = {"MixtralForCausalLM"};
    config["model_type"] = "mixtral";
    config["intermediate_size"] = moe.expert_hidden;
    config["num_local_experts"] = moe.num_experts;
    config["num_experts_per_tok"] = moe.top_k;
    config["output_router_logits"] = false;
    config["router_aux_loss_coef"] = moe.aux_loss_coef;
    config["router_jitter_noise"] = 0.0;
    if (!config.contains("sliding_window")) config["sliding_window"] = nullptr;
    return;
  }
  BATON_CHECK(moe.shared_experts == 1 && moe.shared_gate && moe.first_dense == moe.every - 1,
              "a Qwen2-MoE (Qwen2MoeForCausalLM) has one gated shared expert and experts in layers "
              "decoder_sparse_step - 1, 2 decoder_sparse_step - 1, ...; this model is {}",
              ToString(dims));
  config["architectures"] = {"Qwen2MoeForCausalLM"};
  config["model_type"] = "qwen2_moe";
  AddQwenMoeKeys(moe, config);
  config["shared_expert_intermediate_size"] = moe.shared_hidden;
}

}  // namespace baton
