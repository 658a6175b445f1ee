// Llama name mapping, Hugging Face folders, import and export (see safetensors_llama.h).
#include "checkpoint/safetensors_llama.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/safetensors_gpt2.h"
#include "checkpoint/safetensors_moe.h"
#include "core/error.h"
#include "core/files.h"
#include "core/json_fields.h"
#include "kernels/quantize.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kIndexFileName = "model.safetensors.index.json";

// ---- config.json

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

// ---- names

// "h.12.ln_1.weight" -> (12, "ln_1.weight"); block -1 for other names.
std::pair<int, std::string> SplitBlock(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0) return {-1, name};
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return {-1, name};
  int block = -1;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + dot;
  const auto [end, error] = std::from_chars(first, last, block);
  if (error != std::errc() || end != last || first == last) return {-1, name};
  return {block, name.substr(dot + 1)};
}

std::string HfLayer(int block, const char* rest) {
  return fmt::format("model.layers.{}.{}", block, rest);
}

DType DTypeOfEntry(const SafetensorsFile& file, const SafetensorsEntry& entry) {
  if (entry.dtype == "F32") return DType::kF32;
  if (entry.dtype == "F16") return DType::kF16;
  if (entry.dtype == "BF16") return DType::kBF16;
  BATON_FAIL("{}: tensor {} is {}; Llama weights must be F32, F16 or BF16", file.path(), entry.name,
             entry.dtype);
}

// Part `part` of the folder as f32 (its file's shape), checked: present, the expected shape,
// finite.
std::vector<float> ReadPart(HfLlamaFolder& folder, const HfLlamaPart& part,
                            const std::string& baton_name) {
  const SafetensorsFile* file = folder.FileOf(part.name);
  BATON_CHECK(
      file != nullptr, "{}: no tensor {} for parameter {} (the folder's {} lists none)",
      folder.dir(), part.name, baton_name,
      fs::exists(fs::path(folder.dir()) / kIndexFileName) ? kIndexFileName : kHfWeightsFileName);
  const SafetensorsEntry* entry = file->Find(part.name);
  BATON_CHECK(entry != nullptr, "{}: no tensor {}, though {} says it is there", file->path(),
              part.name, kIndexFileName);
  BATON_CHECK(entry->shape == part.shape,
              "{}: tensor {} has shape {}; the model (config.json's dims) needs {}", file->path(),
              part.name, ToString(entry->shape), ToString(part.shape));
  const DType dtype = DTypeOfEntry(*file, *entry);
  CheckFinite(*file, *entry);
  const std::span<const std::byte> bytes = file->Bytes(*entry);
  std::vector<std::byte> aligned(bytes.begin(), bytes.end());  // the file's may be unaligned
  std::vector<float> values(bytes.size() / SizeOf(dtype));
  ConvertFloats(aligned.data(), dtype, values.data(), DType::kF32, values.size());
  return values;
}

// Where the transposed parts of a parameter of `shape` lie: a block (an expert's (in, out) of a
// stacked parameter; the whole value otherwise) of rows x cols, and each part's first column in
// it, the columns starting over with each expert.
struct PartPlacement {
  int64_t rows = 0, cols = 0;
  int64_t block = 0;   // the part's block's first element
  int64_t column = 0;  // the part's first column in it
};
class PartPlacer {
 public:
  explicit PartPlacer(const Shape& shape)
      : rows_(shape.size() == 3 ? shape[1] : shape[0]),
        cols_(shape.size() >= 2 ? shape.back() : 1) {}
  // The next transposed part's placement.
  PartPlacement Next(const HfLlamaPart& part) {
    if (part.expert != expert_) {
      expert_ = part.expert;
      column_ = 0;
    }
    const PartPlacement at{rows_, cols_, std::max(0, part.expert) * rows_ * cols_, column_};
    column_ += part.shape[0];
    return at;
  }

 private:
  int64_t rows_, cols_;
  int expert_ = -1;
  int64_t column_ = 0;
};

// The experts [first, end) of a stacked parameter that a load reads; the others stay zero.
struct ExpertRange {
  int64_t first = 0, end = std::numeric_limits<int64_t>::max();
  bool Holds(int expert) const { return expert < 0 || (expert >= first && expert < end); }
};

// The experts a param's split keeps (all of them unless it is cut over an expert group).
ExpertRange ExpertsKept(const TensorSplit& split) {
  if (!split.cut() || split.over != SplitOver::kExperts) return {};
  const auto [first, size] = PartRanges(split).front();
  return {first, first + size};
}

// Baton's f32 value of `baton_name`: its parts side by side by columns (per expert when stacked);
// of a stacked parameter only the `experts` are read (their shards opened).
std::vector<float> AssembleParam(HfLlamaFolder& folder, const std::string& baton_name,
                                 const ModelDims& dims, ExpertRange experts = {}) {
  const Shape shape = LlamaParamShape(baton_name, dims);
  std::vector<float> dense(static_cast<size_t>(NumElements(shape)));
  PartPlacer placer(shape);
  size_t offset = 0;  // of vector parts, one after the other
  for (const HfLlamaPart& part : LlamaHfParts(baton_name, dims)) {
    if (!experts.Holds(part.expert)) {
      if (part.transposed) {
        placer.Next(part);
      } else {
        offset += static_cast<size_t>(NumElements(part.shape));
      }
      continue;
    }
    const std::vector<float> values = ReadPart(folder, part, baton_name);
    if (!part.transposed) {
      std::copy(values.begin(), values.end(), dense.begin() + static_cast<ptrdiff_t>(offset));
      offset += values.size();
      continue;
    }
    const PartPlacement at = placer.Next(part);
    const int64_t out = part.shape[0];  // nn.Linear (out, in = rows)
    for (int64_t j = 0; j < out; ++j) {
      for (int64_t r = 0; r < at.rows; ++r) {
        dense[static_cast<size_t>(at.block + r * at.cols + at.column + j)] =
            values[static_cast<size_t>(j * at.rows + r)];
      }
    }
  }
  return dense;
}

}  // namespace

// ---- config.json

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

// ---- the folder

HfLlamaFolder HfLlamaFolder::Open(const std::string& dir) {
  HfLlamaFolder folder;
  folder.dir_ = dir;
  folder.config_ = ReadHfLlamaConfig((fs::path(dir) / "config.json").string());
  const fs::path index = fs::path(dir) / kIndexFileName;
  std::error_code error;
  if (fs::is_regular_file(index, error)) {
    const Json json = ParseJsonFile(index.string());
    const JsonField weight_map = JsonField(json, index.string()).Object()["weight_map"].Object();
    for (const auto& [name, file] : weight_map.json().items()) {
      const std::string file_name = weight_map[name].String();
      if (fs::path(file_name).filename() != file_name) {
        weight_map[name].Fail(fmt::format("\"{}\" is not a file in the folder", file_name));
      }
      folder.weight_map_.emplace(name, file_name);
    }
    return folder;
  }
  const fs::path single = fs::path(dir) / kHfWeightsFileName;
  BATON_CHECK(fs::is_regular_file(single, error), "{}: neither {} nor {}", dir, kIndexFileName,
              kHfWeightsFileName);
  auto file = std::make_unique<SafetensorsFile>(SafetensorsFile::Open(single.string()));
  for (const SafetensorsEntry& entry : file->entries()) {
    folder.weight_map_.emplace(entry.name, kHfWeightsFileName);
  }
  folder.files_.emplace(kHfWeightsFileName, std::move(file));
  return folder;
}

const SafetensorsFile* HfLlamaFolder::FileOf(const std::string& hf_name) {
  const auto it = weight_map_.find(hf_name);
  if (it == weight_map_.end()) return nullptr;
  auto& file = files_[it->second];
  if (file == nullptr) {
    const fs::path path = fs::path(dir_) / it->second;
    std::error_code error;
    BATON_CHECK(fs::is_regular_file(path, error), "{}: {} lists {} in {}, which is missing", dir_,
                kIndexFileName, hf_name, it->second);
    file = std::make_unique<SafetensorsFile>(SafetensorsFile::Open(path.string()));
  }
  return file.get();
}

std::vector<std::string> HfLlamaFolder::opened_files() const {
  std::vector<std::string> names;
  for (const auto& [name, file] : files_) {
    if (file != nullptr) names.push_back(name);
  }
  return names;
}

// ---- names and shapes

std::vector<HfLlamaPart> LlamaHfParts(const std::string& baton_name, const ModelDims& dims) {
  const int64_t v = dims.vocab_size, c = dims.width, h = dims.hidden();
  const int64_t q = int64_t{dims.num_heads} * dims.head_dim();
  const int64_t kv = int64_t{dims.kv_heads()} * dims.head_dim();
  if (baton_name == "wte.weight") return {{"model.embed_tokens.weight", {v, c}, false}};
  if (baton_name == "ln_f.weight") return {{"model.norm.weight", {c}, false}};
  if (baton_name == "lm_head.weight") return {{"lm_head.weight", {v, c}, false}};
  const auto [block, rest] = SplitBlock(baton_name, "h.");
  BATON_CHECK(block >= 0 && block < dims.num_layers, "{} is not a parameter of this Llama ({})",
              baton_name, ToString(dims));
  if (rest == "ln_1.weight") return {{HfLayer(block, "input_layernorm.weight"), {c}, false}};
  if (rest == "ln_2.weight") {
    return {{HfLayer(block, "post_attention_layernorm.weight"), {c}, false}};
  }
  if (dims.moe_block(block) && rest.starts_with("mlp.")) return MoeHfParts(block, rest, dims);
  if (rest == "attn.c_attn.weight") {
    return {{HfLayer(block, "self_attn.q_proj.weight"), {q, c}, true},
            {HfLayer(block, "self_attn.k_proj.weight"), {kv, c}, true},
            {HfLayer(block, "self_attn.v_proj.weight"), {kv, c}, true}};
  }
  if (rest == "attn.c_attn.bias" && dims.spec().qkv_bias) {
    return {{HfLayer(block, "self_attn.q_proj.bias"), {q}, false},
            {HfLayer(block, "self_attn.k_proj.bias"), {kv}, false},
            {HfLayer(block, "self_attn.v_proj.bias"), {kv}, false}};
  }
  if (rest == "attn.c_proj.weight")
    return {{HfLayer(block, "self_attn.o_proj.weight"), {c, q}, true}};
  if (dims.spec().qk_norm && (rest == "attn.q_norm.weight" || rest == "attn.k_norm.weight")) {
    return {{HfLayer(block, ("self_attn." + rest.substr(5)).c_str()), {dims.head_dim()}, false}};
  }
  if (rest == "mlp.c_fc.weight") {
    return {{HfLayer(block, "mlp.gate_proj.weight"), {h, c}, true},
            {HfLayer(block, "mlp.up_proj.weight"), {h, c}, true}};
  }
  if (rest == "mlp.c_proj.weight") return {{HfLayer(block, "mlp.down_proj.weight"), {c, h}, true}};
  BATON_FAIL("{} is not a parameter of this Llama ({})", baton_name, ToString(dims));
}

// A parameter's parts are either nn.Linear weights side by side by columns (transposed), or
// vectors one after the other (a norm's weight, the table of an embedding: one part; a Qwen2's
// q, k and v biases: three); a stacked expert parameter is its experts' blocks of the first kind.
Shape LlamaParamShape(const std::string& baton_name, const ModelDims& dims) {
  const std::vector<HfLlamaPart> parts = LlamaHfParts(baton_name, dims);
  if (parts.front().expert >= 0) {
    Shape shape = {parts.back().expert + 1, parts.front().shape[1], 0};
    for (const HfLlamaPart& part : parts) {
      if (part.expert == parts.front().expert) shape[2] += part.shape[0];
    }
    return shape;
  }
  if (parts.size() == 1 && !parts.front().transposed) return parts.front().shape;
  if (!parts.front().transposed) {
    Shape shape = {0};
    for (const HfLlamaPart& part : parts) shape[0] += part.shape.at(0);
    return shape;
  }
  Shape shape = {parts.front().shape[1], 0};
  for (const HfLlamaPart& part : parts) shape[1] += part.shape[0];
  return shape;
}

std::vector<std::string> LlamaParamNames(const ModelDims& dims) {
  std::vector<std::string> names = {"wte.weight"};
  for (int i = 0; i < dims.num_layers; ++i) {
    for (const char* rest :
         {"ln_1.weight", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
          "attn.q_norm.weight", "attn.k_norm.weight", "ln_2.weight"}) {
      if (std::string_view(rest) == "attn.c_attn.bias" && !dims.spec().qkv_bias) continue;
      if (std::string_view(rest).ends_with("_norm.weight") && !dims.spec().qk_norm) continue;
      names.push_back(fmt::format("h.{}.{}", i, rest));
    }
    const std::vector<std::string> mlp =
        dims.moe_block(i) ? MoeParamRests(dims)
                          : std::vector<std::string>{"mlp.c_fc.weight", "mlp.c_proj.weight"};
    for (const std::string& rest : mlp) names.push_back(fmt::format("h.{}.{}", i, rest));
  }
  names.push_back("ln_f.weight");
  if (!dims.tie_embeddings) names.push_back("lm_head.weight");
  return names;
}

// ---- import

void ValidateHfLlamaFolder(const HfLlamaFolder& folder, const ModelDims& dims) {
  const std::string config_path = (fs::path(folder.dir()) / "config.json").string();
  const ModelDims expected = DimsOfHfLlama(folder.config(), dims.context);
  ModelDims compared = dims;  // what config.json does not describe, and defaults spelled out
  compared.share_group = expected.share_group;
  compared.share_attention = expected.share_attention;
  compared.share_mlp = expected.share_mlp;
  compared.num_kv_heads = dims.kv_heads();
  compared.mlp_hidden = dims.hidden();
  // The router's losses and capacity are training choices config.json does not hold; a Mixtral's
  // intermediate_size is its experts' width (no layer is dense).
  compared.moe.aux_loss_coef = expected.moe.aux_loss_coef;
  compared.moe.z_loss_coef = expected.moe.z_loss_coef;
  compared.moe.capacity_factor = expected.moe.capacity_factor;
  if (dims.moe.shared_experts == 0) compared.moe.shared_hidden = expected.moe.shared_hidden;
  if (expected.moe.enabled() && expected.moe.first_dense == 0 && expected.moe.every == 1) {
    compared.mlp_hidden = expected.mlp_hidden;
  }
  BATON_CHECK(compared == expected,
              "{}: describes a Llama {} (kv heads {}, intermediate {}, tied {}), but the model is "
              "{} (kv heads {}, intermediate {}, tied {})",
              config_path, ToString(expected), expected.kv_heads(), expected.hidden(),
              expected.tie_embeddings, ToString(dims), dims.kv_heads(), dims.hidden(),
              dims.tie_embeddings);
  std::set<std::string> wanted;
  for (const std::string& name : LlamaParamNames(dims)) {
    for (const HfLlamaPart& part : LlamaHfParts(name, dims)) wanted.insert(part.name);
  }
  for (const auto& [name, file] : folder.weight_map()) {
    if (wanted.count(name) == 1) continue;
    const auto [block, rest] = SplitBlock(name, "model.layers.");
    if (rest.ends_with("rotary_emb.inv_freq")) continue;  // a buffer older transformers saved
    if (name == "lm_head.weight" && dims.tie_embeddings) continue;  // transformers ties it
    BATON_CHECK(!name.ends_with(".bias"), "{}/{}: tensor {} is a bias; {}", folder.dir(), file,
                name,
                dims.qwen2() ? "Baton's Qwen2 has biases on q, k and v only"
                             : "Baton's Llama has no biases");
    BATON_CHECK(block < 0 || block < dims.num_layers,
                "{}/{}: tensor {} belongs to layer {} but the model has {} (model.layers.0 .. {})",
                folder.dir(), file, name, block, dims.num_layers, dims.num_layers - 1);
    BATON_FAIL("{}/{}: tensor {} is not a Llama parameter Baton knows", folder.dir(), file, name);
  }
  for (const std::string& name : wanted) {
    BATON_CHECK(
        folder.weight_map().count(name) == 1, "{}: no tensor {} in the folder's {}", folder.dir(),
        name,
        fs::exists(fs::path(folder.dir()) / kIndexFileName) ? kIndexFileName : kHfWeightsFileName);
  }
}

void LoadLlamaParamsFromHf(HfLlamaFolder& folder, const ModelDims& dims,
                           const std::vector<ParamTensors>& params, Backend& backend) {
  BATON_CHECK(dims.llama() && dims.low_rank_attn == 0 && dims.low_rank_mlp == 0,
              "{}: a Hugging Face Llama loads into a dense Llama, not {}", folder.dir(),
              ToString(dims));
  std::set<const void*> loaded;  // storage shared by two params is filled once
  for (const ParamTensors& p : params) {
    const bool value = loaded.insert(p.value.raw()).second;
    const bool master = p.master.defined() && loaded.insert(p.master.raw()).second;
    if (!value && !master) continue;
    const Shape shape = LlamaParamShape(p.name, dims);
    BATON_CHECK(p.value.shape() == shape, "parameter {} is {}, but the Llama's is {}", p.name,
                ToString(p.value.shape()), ToString(shape));
    // A member of an expert group keeps its own experts (StateLayout::InitValues).
    std::vector<float> dense = AssembleParam(folder, p.name, dims, ExpertsKept(p.split));
    const Tensor host = Tensor::Wrap(dense.data(), shape, DType::kF32);
    if (value && p.value.dtype() == DType::kI8) {
      const int64_t rows = shape.at(0), cols = shape.at(1);
      std::vector<int8_t> codes(dense.size());
      std::vector<float> scales(static_cast<size_t>(cols));
      QuantizeColumnsInt8(dense.data(), rows, cols, codes.data(), scales.data());
      Tensor target = p.value, scale = p.scale;
      backend.Copy(Tensor::Wrap(codes.data(), shape, DType::kI8), target);
      backend.Copy(Tensor::Wrap(scales.data(), {cols}, DType::kF32), scale);
    } else if (value) {
      Tensor target = p.value;
      backend.Copy(host, target);  // rounds to a 16-bit param's dtype
    }
    if (master) {
      Tensor target = p.master;
      backend.Copy(host, target);
    }
    backend.Synchronize();  // `dense` must outlive an asynchronous copy
  }
}

// ---- export

NamedTensors LlamaHfTensorsOf(const std::string& baton_name, const Tensor& dense,
                              const ModelDims& dims, DType dtype, Allocator& allocator) {
  BATON_CHECK(dense.dtype() == DType::kF32 && dense.shape() == LlamaParamShape(baton_name, dims),
              "parameter {}: {} is not its f32 value {}", baton_name, dense.ToString(),
              ToString(LlamaParamShape(baton_name, dims)));
  const float* in = dense.data<float>();
  NamedTensors tensors;
  PartPlacer placer(dense.shape());
  int64_t offset = 0;  // of vector parts, one after the other
  for (const HfLlamaPart& part : LlamaHfParts(baton_name, dims)) {
    std::vector<float> values(static_cast<size_t>(NumElements(part.shape)));
    if (part.transposed) {
      const PartPlacement at = placer.Next(part);
      const int64_t out = part.shape[0];
      for (int64_t j = 0; j < out; ++j) {
        for (int64_t r = 0; r < at.rows; ++r) {
          values[static_cast<size_t>(j * at.rows + r)] = in[at.block + r * at.cols + at.column + j];
        }
      }
    } else {
      std::copy(in + offset, in + offset + static_cast<int64_t>(values.size()), values.begin());
      offset += static_cast<int64_t>(values.size());
    }
    Tensor t = Tensor::Empty(allocator, part.shape, dtype, MemCategory::kWorkspace);
    ConvertFloats(values.data(), DType::kF32, t.raw(), dtype, values.size());
    tensors.emplace_back(part.name, std::move(t));
  }
  return tensors;
}

void ExportHfLlama(const std::string& dir, const std::vector<ParamTensors>& params,
                   const ModelDims& dims, Backend& backend) {
  NamedTensors tensors;
  for (const ParamTensors& p : params) {
    if (p.tied) continue;
    BATON_CHECK(p.value.dtype() == DType::kF32 && p.value.device().is_cpu(),
                "ExportHfLlama takes f32 host params; {} is {}", p.name, p.value.ToString());
    for (auto& t : LlamaHfTensorsOf(p.name, p.value, dims, DType::kF32, backend.allocator())) {
      tensors.push_back(std::move(t));
    }
  }
  MakeDirectories(dir);
  WriteSafetensors((fs::path(dir) / kHfWeightsFileName).string(), tensors, HfMetadata(), &backend);
  WriteHfLlamaConfig(dir, dims, DType::kF32);
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
