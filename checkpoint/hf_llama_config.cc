// Hugging Face Llama-family config.json: reading, checking and writing it (see hf_llama_config.h).
#include "checkpoint/hf_llama_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/safetensors_gpt2.h"
#include "checkpoint/safetensors_moe.h"
#include "core/error.h"
#include "core/files.h"
#include "core/json_fields.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// A size config.json gives (layers, heads, widths, positions): a positive integer that fits the
// int ModelDims holds, so that nothing narrows on the way (2^32 + 2 layers were 2).
constexpr int64_t kMaxSize = std::numeric_limits<int>::max();

int64_t Size(const JsonField& field) { return field.Int(1, kMaxSize); }

// The Hugging Face model types Baton loads as Llama blocks: model_type and architecture.
struct HfType {
  const char* model_type;
  const char* causal_lm;
};
constexpr HfType kLlamaType{"llama", "LlamaForCausalLM"};
constexpr HfType kQwen2Type{"qwen2", "Qwen2ForCausalLM"};
constexpr HfType kMistralType{"mistral", "MistralForCausalLM"};
constexpr HfType kMixtralType{"mixtral", "MixtralForCausalLM"};
constexpr HfType kQwen2MoeType{"qwen2_moe", "Qwen2MoeForCausalLM"};
constexpr HfType kQwen3Type{"qwen3", "Qwen3ForCausalLM"};
constexpr HfType kQwen3MoeType{"qwen3_moe", "Qwen3MoeForCausalLM"};
constexpr const HfType* kHfTypes[] = {&kLlamaType,    &kQwen2Type, &kMistralType, &kMixtralType,
                                      &kQwen2MoeType, &kQwen3Type, &kQwen3MoeType};

// Whether config.json claims `type`: its model_type, or an architectures list holding its causal
// LM. Lenient about the other fields' types: ReadHfLlamaConfig checks them all.
bool Claims(const Json& config, const HfType& type) {
  if (!config.is_object()) return false;
  const auto model_type = config.find("model_type");
  if (model_type != config.end() && *model_type == type.model_type) return true;
  const auto architectures = config.find("architectures");
  return architectures != config.end() && architectures->is_array() &&
         std::find(architectures->begin(), architectures->end(), Json(type.causal_lm)) !=
             architectures->end();
}

// model_type "llama", "qwen2" or "mistral", or model_type absent (or null) with architectures
// holding exactly one of LlamaForCausalLM, Qwen2ForCausalLM and MistralForCausalLM. Returns the
// type it is.
const HfType& CheckIsLlama(const JsonField& config) {
  const std::optional<std::string> model_type = config["model_type"].OptionalString();
  const JsonField architectures = config["architectures"];
  const HfType* named = nullptr;  // by architectures (each entry's type checked)
  bool two = false;
  if (architectures.present()) {
    for (size_t i = 0; i < architectures.Array().json().size(); ++i) {
      const std::string architecture = architectures[i].String();
      for (const HfType* type : kHfTypes) {
        if (architecture != type->causal_lm) continue;
        two |= named != nullptr && named != type;
        named = type;
      }
    }
  }
  if (model_type) {
    for (const HfType* type : kHfTypes) {
      if (*model_type == type->model_type) return *type;
    }
    config["model_type"].Fail(
        fmt::format("\"{}\", not \"llama\", \"qwen2\" or \"mistral\": not a Hugging Face Llama "
                    "(LlamaForCausalLM), Qwen2 or Mistral",
                    *model_type));
  }
  if (two) {
    config["architectures"].Fail(
        "names two of LlamaForCausalLM, Qwen2ForCausalLM and MistralForCausalLM, and there is no "
        "model_type");
  }
  if (named == nullptr) {
    config.Fail(fmt::format(
        "neither model_type \"llama\", \"qwen2\" or \"mistral\" nor architectures holding "
        "\"LlamaForCausalLM\", \"Qwen2ForCausalLM\" or \"MistralForCausalLM\" "
        "(architectures: {}): not a Hugging Face Llama",
        architectures.json().dump()));
  }
  return *named;
}

// rms_norm_eps: in (0, 1) as the YAML's model.rms_norm_eps, and a normal f32, which is what
// Baton's RMSNorm holds (1e-300 became 0 there).
double ReadNormEps(const JsonField& field) {
  const double eps = field.OptionalNumber().value_or(1e-6);
  if (!(eps > 0.0 && eps < 1.0)) field.Fail(fmt::format("{} is not in (0, 1)", eps));
  if (eps < std::numeric_limits<float>::min()) {
    field.Fail(fmt::format(
        "{} is below the smallest normal f32 ({}): Baton's RMSNorm holds epsilon as an f32, "
        "where it would be 0 or lose its precision",
        eps, std::numeric_limits<float>::min()));
  }
  return eps;
}

// A token id: absent or null, an integer, or a list of them (Llama 3 Instruct's eos ids), which
// is not kept (nullopt), so not written back on export.
std::optional<int64_t> ReadTokenId(const JsonField& field) {
  constexpr int64_t kMaxId = std::numeric_limits<int64_t>::max();
  if (!field.present()) return std::nullopt;
  if (field.json().is_array()) {
    for (size_t i = 0; i < field.json().size(); ++i) field[i].Int(0, kMaxId);
    return std::nullopt;
  }
  if (!field.json().is_number_integer()) {
    field.Fail(fmt::format("expected an integer or a list of integers, got {}",
                           DescribeJson(field.json())));
  }
  return field.Int(0, kMaxId);
}

RopeConfig ReadRope(const JsonField& config) {
  RopeConfig rope;
  rope.theta = config["rope_theta"].OptionalNumber().value_or(10000.0);
  if (!(rope.theta > 0.0)) config["rope_theta"].Fail(fmt::format("{} is not positive", rope.theta));
  const JsonField scaling = config["rope_scaling"];
  if (!scaling.present()) return rope;
  scaling.Object();
  const std::optional<std::string> rope_type = scaling["rope_type"].OptionalString();
  const std::string type = rope_type ? *rope_type : scaling["type"].OptionalString().value_or("");
  BATON_CHECK(type == "llama3",
              "{}: rope_scaling of rope_type \"{}\": Baton's rotary positions know only Llama 3's "
              "(\"llama3\") scaling",
              config.where(), type);
  rope.factor = scaling["factor"].OptionalNumber().value_or(0.0);
  rope.low_freq_factor = scaling["low_freq_factor"].OptionalNumber().value_or(1.0);
  rope.high_freq_factor = scaling["high_freq_factor"].OptionalNumber().value_or(4.0);
  rope.original_context =
      scaling["original_max_position_embeddings"].OptionalInt(1, kMaxSize).value_or(8192);
  BATON_CHECK(rope.factor > 0.0 && rope.high_freq_factor > rope.low_freq_factor,
              "{}: rope_scaling {} needs factor > 0 and high_freq_factor > low_freq_factor",
              config.where(), scaling.json().dump());
  return rope;
}

// A float such as norm_eps written as its shortest decimal (1e-05, not 9.99999974737875e-06).
double ShortestDouble(float value) { return std::stod(fmt::format("{}", value)); }

}  // namespace

HfLlamaConfig ReadHfLlamaConfig(const std::string& path) {
  const Json json = ParseJsonFile(path);
  const JsonField config = JsonField(json, path).Object();
  HfLlamaConfig c;
  const HfType& type = CheckIsLlama(config);
  c.mixtral = &type == &kMixtralType;
  c.qwen2_moe = &type == &kQwen2MoeType;
  c.qwen2 = &type == &kQwen2Type || c.qwen2_moe;    // Qwen2-MoE's attention is Qwen2's
  c.mistral = &type == &kMistralType || c.mixtral;  // Mixtral's is Mistral's
  c.qwen3_moe = &type == &kQwen3MoeType;
  c.qwen3 = &type == &kQwen3Type || c.qwen3_moe;  // Qwen3-MoE's attention is Qwen3's
  const std::string act = config["hidden_act"].OptionalString().value_or("silu");
  BATON_CHECK(act == "silu", "{}: hidden_act \"{}\": Baton's Llama MLP is SwiGLU (silu)", path,
              act);
  if (c.qwen2 || c.qwen3) {
    // Qwen2's and Qwen3's sliding window is off in every released model (use_sliding_window
    // false); Baton's attention is causal over the whole sequence.
    BATON_CHECK(!config["use_sliding_window"].OptionalBool().value_or(false),
                "{}: use_sliding_window is true: Baton's Qwen2 and Qwen3 attend over the whole "
                "sequence; this model cannot be loaded",
                path);
    if (c.qwen3) {
      BATON_CHECK(!config["attention_bias"].OptionalBool().value_or(false),
                  "{}: attention_bias is true: Baton's Qwen3 has no biases; this model cannot be "
                  "loaded",
                  path);
    }
  } else if (c.mistral) {
    c.sliding_window = config["sliding_window"].OptionalInt(1, kMaxSize).value_or(0);
  } else {
    for (const char* bias : {"attention_bias", "mlp_bias"}) {
      BATON_CHECK(!config[bias].OptionalBool().value_or(false),
                  "{}: {} is true: Baton's Llama has no biases; this model cannot be loaded", path,
                  bias);
    }
  }
  c.vocab_size = Size(config["vocab_size"]);
  c.hidden_size = Size(config["hidden_size"]);
  c.num_hidden_layers = Size(config["num_hidden_layers"]);
  c.num_attention_heads = Size(config["num_attention_heads"]);
  c.num_key_value_heads =
      config["num_key_value_heads"].OptionalInt(1, kMaxSize).value_or(c.num_attention_heads);
  c.intermediate_size = Size(config["intermediate_size"]);
  c.max_position_embeddings = Size(config["max_position_embeddings"]);
  c.rms_norm_eps = ReadNormEps(config["rms_norm_eps"]);
  c.rope = ReadRope(config);
  c.tie_word_embeddings = config["tie_word_embeddings"].OptionalBool().value_or(false);
  c.bos_token_id = ReadTokenId(config["bos_token_id"]);
  c.eos_token_id = ReadTokenId(config["eos_token_id"]);
  const std::optional<int64_t> given_head_dim = config["head_dim"].OptionalInt(1, kMaxSize);
  BATON_CHECK(given_head_dim || c.hidden_size % c.num_attention_heads == 0,
              "{}: hidden_size {} is not a multiple of num_attention_heads {}", path, c.hidden_size,
              c.num_attention_heads);
  if (given_head_dim && *given_head_dim * c.num_attention_heads != c.hidden_size) {
    BATON_CHECK(*given_head_dim % 2 == 0,
                "{}: head_dim {} is odd: rotary positions turn pairs of a head's channels", path,
                *given_head_dim);
    c.head_dim = *given_head_dim;  // NH x head_dim query columns, not hidden_size
  }
  BATON_CHECK(c.num_attention_heads % c.num_key_value_heads == 0,
              "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", path,
              c.num_attention_heads, c.num_key_value_heads);
  if (c.mixtral || c.qwen2_moe || c.qwen3_moe) ReadHfMoeConfig(config, c);
  return c;
}

bool IsHfLlamaFolder(const std::string& dir) {
  std::error_code error;
  const fs::path config = fs::path(dir) / "config.json";
  if (!fs::is_regular_file(config, error)) return false;
  try {
    const Json json = ParseJsonFile(config.string());
    return std::any_of(std::begin(kHfTypes), std::end(kHfTypes),
                       [&](const HfType* type) { return Claims(json, *type); });
  } catch (const std::exception&) {
    return false;  // not JSON: not a Llama folder (an error reading it names the file later)
  }
}

ModelDims DimsOfHfLlama(const HfLlamaConfig& config, int64_t context) {
  ModelDims dims;
  // A Mixtral without its window is a Llama with experts (Baton's Mistral is a window).
  dims.family = config.qwen2   ? ModelFamily::kQwen2
                : config.qwen3 ? ModelFamily::kQwen3
                : config.mistral && (!config.mixtral || config.sliding_window > 0)
                    ? ModelFamily::kMistral
                    : ModelFamily::kLlama;
  dims.moe = config.moe;
  dims.sliding_window = static_cast<int>(config.sliding_window);
  dims.vocab_size = static_cast<int>(config.vocab_size);
  dims.context = static_cast<int>(context);
  dims.num_layers = static_cast<int>(config.num_hidden_layers);
  dims.num_heads = static_cast<int>(config.num_attention_heads);
  dims.num_kv_heads = static_cast<int>(config.num_key_value_heads);
  dims.head_size = static_cast<int>(config.head_dim);
  dims.width = static_cast<int>(config.hidden_size);
  dims.mlp_hidden = static_cast<int>(config.intermediate_size);
  dims.norm_eps = static_cast<float>(config.rms_norm_eps);
  dims.rope = config.rope;
  dims.tie_embeddings = config.tie_word_embeddings;
  return dims;
}

void WriteHfLlamaConfig(const std::string& dir, const ModelDims& dims, DType dtype,
                        std::optional<int64_t> bos_token_id, std::optional<int64_t> eos_token_id) {
  Validate(dims);
  BATON_CHECK(dims.llama(), "a Hugging Face Llama config needs a Llama, not {}", ToString(dims));
  for (const std::optional<int64_t>& id : {bos_token_id, eos_token_id}) {
    BATON_CHECK(!id || (*id >= 0 && *id < dims.vocab_size),
                "token id {} is outside the model's {} tokens", *id, dims.vocab_size);
  }
  const Json rope_scaling =
      dims.rope.factor > 0.0
          ? Json{{"rope_type", "llama3"},
                 {"factor", dims.rope.factor},
                 {"low_freq_factor", dims.rope.low_freq_factor},
                 {"high_freq_factor", dims.rope.high_freq_factor},
                 {"original_max_position_embeddings", dims.rope.original_context}}
          : Json(nullptr);
  const auto id_or_null = [](std::optional<int64_t> id) { return id ? Json(*id) : Json(nullptr); };
  const HfType& type = dims.qwen2()     ? kQwen2Type
                       : dims.qwen3()   ? kQwen3Type
                       : dims.mistral() ? kMistralType
                                        : kLlamaType;
  nlohmann::ordered_json config = {{"architectures", {type.causal_lm}},
                                   {"model_type", type.model_type},
                                   {"vocab_size", dims.vocab_size},
                                   {"hidden_size", dims.width},
                                   {"intermediate_size", dims.hidden()},
                                   {"num_hidden_layers", dims.num_layers},
                                   {"num_attention_heads", dims.num_heads},
                                   {"num_key_value_heads", dims.kv_heads()},
                                   {"head_dim", dims.head_dim()},
                                   {"hidden_act", "silu"},
                                   {"max_position_embeddings", dims.context},
                                   {"rms_norm_eps", ShortestDouble(dims.norm_eps)},
                                   {"rope_theta", dims.rope.theta},
                                   {"rope_scaling", rope_scaling},
                                   {"tie_word_embeddings", dims.tie_embeddings},
                                   {"attention_bias", false},
                                   {"mlp_bias", false},
                                   {"attention_dropout", 0.0},
                                   {"initializer_range", 0.02},
                                   {"pretraining_tp", 1},
                                   {"use_cache", true},
                                   {"bos_token_id", id_or_null(bos_token_id)},
                                   {"eos_token_id", id_or_null(eos_token_id)},
                                   {"torch_dtype", HfTorchDType(dtype)}};
  if (dims.mistral()) {
    // MistralConfig's own keys: no biases to name, and its window (null: none).
    config.erase("attention_bias");
    config.erase("mlp_bias");
    config.erase("pretraining_tp");
    config["sliding_window"] = dims.sliding_window > 0 ? Json(dims.sliding_window) : Json(nullptr);
  }
  if (dims.qwen2()) {
    // Qwen2Config's own keys: biases on q, k and v are its architecture (no attention_bias key),
    // and its sliding window stays off.
    config.erase("attention_bias");
    config.erase("mlp_bias");
    config.erase("pretraining_tp");
    config["use_sliding_window"] = false;
    config["sliding_window"] = nullptr;
    config["max_window_layers"] = dims.num_layers;
  }
  if (dims.qwen3()) {
    // Qwen3Config's own keys: attention_bias (false), the sliding window off.
    config.erase("mlp_bias");
    config.erase("pretraining_tp");
    config["use_sliding_window"] = false;
    config["sliding_window"] = nullptr;
    config["max_window_layers"] = dims.num_layers;
  }
  if (dims.moe.enabled()) AddHfMoeConfig(dims, config);
  MakeDirectories(dir);
  WriteFileAtomically((fs::path(dir) / "config.json").string(), config.dump(2) + "\n");
}

}  // namespace baton
