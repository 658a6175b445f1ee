// GPT-2 name mapping, import, validation and export helpers (see safetensors_gpt2.h).
#include "checkpoint/safetensors_gpt2.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/files.h"

namespace baton {
namespace {

// Parameters of block h.{i}, by the name after "h.{i}." (docs/model.md).
constexpr const char* kBlockParams[] = {
    "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
    "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
// Buffers Hugging Face stores in some GPT-2 files: the causal mask and its fill value.
constexpr const char* kBlockBuffers[] = {"attn.bias", "attn.masked_bias"};
constexpr const char* kTopLevelParams[] = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"};

bool Contains(const auto& list, const std::string& name) {
  return std::any_of(std::begin(list), std::end(list),
                     [&](const char* entry) { return name == entry; });
}

std::string StripPrefix(const std::string& name) {
  const size_t n = std::strlen(kHfGpt2Prefix);
  return name.compare(0, n, kHfGpt2Prefix) == 0 ? name.substr(n) : name;
}

// "h.12.ln_1.weight" -> (12, "ln_1.weight"); block -1 for other names.
std::pair<int, std::string> SplitBlockName(const std::string& name) {
  if (name.rfind("h.", 0) != 0) return {-1, name};
  const size_t dot = name.find('.', 2);
  int block = -1;
  const char* first = name.data() + 2;
  const char* last = name.data() + (dot == std::string::npos ? name.size() : dot);
  const auto [end, error] = std::from_chars(first, last, block);
  if (error != std::errc() || end != last || dot == std::string::npos || first == last) {
    return {-1, name};
  }
  return {block, name.substr(dot + 1)};
}

void CheckShape(const SafetensorsFile& file, const std::string& name, const Shape& expected) {
  const SafetensorsEntry* entry = FindGpt2Tensor(file, name);
  BATON_CHECK(entry != nullptr, "{}: no tensor {} (nor {})", file.path(), Gpt2HfName(name), name);
  BATON_CHECK(entry->shape == expected, "{}: tensor {} has shape {}; the model needs {}",
              file.path(), entry->name, ToString(entry->shape), ToString(expected));
}

void CheckLmHeadIsTied(const SafetensorsFile& file) {
  const SafetensorsEntry* head = file.Find("lm_head.weight");
  if (head == nullptr) return;
  const SafetensorsEntry* wte = FindGpt2Tensor(file, "wte.weight");
  const bool equal =
      wte != nullptr && wte->dtype == head->dtype && wte->shape == head->shape &&
      std::equal(file.Bytes(*wte).begin(), file.Bytes(*wte).end(), file.Bytes(*head).begin());
  BATON_CHECK(equal, "{}: lm_head.weight differs from wte.weight; Baton ties the two", file.path());
}

}  // namespace

std::string Gpt2HfName(const std::string& baton_name) { return kHfGpt2Prefix + baton_name; }

const SafetensorsEntry* FindGpt2Tensor(const SafetensorsFile& file, const std::string& baton_name) {
  const SafetensorsEntry* prefixed = file.Find(Gpt2HfName(baton_name));
  const SafetensorsEntry* plain = file.Find(baton_name);
  BATON_CHECK(prefixed == nullptr || plain == nullptr, "{}: holds both {} and {}", file.path(),
              prefixed != nullptr ? prefixed->name : "", baton_name);
  return prefixed != nullptr ? prefixed : plain;
}

void LoadParamsFromSafetensors(const SafetensorsFile& file, const std::vector<ParamTensors>& params,
                               Backend& backend) {
  std::set<const void*> loaded;  // a tied copy sharing the embedding's storage is loaded once
  for (const ParamTensors& p : params) {
    if (!loaded.insert(p.value.raw()).second) continue;
    const SafetensorsEntry* entry = FindGpt2Tensor(file, p.name);
    BATON_CHECK(entry != nullptr, "{}: no tensor {} (nor {}) for parameter {}{}", file.path(),
                Gpt2HfName(p.name), p.name, p.name,
                p.tied ? " (the LM head's tied copy of wte)" : "");
    Tensor value = p.value;  // handles: the copies land in the param's storage
    Tensor scale = p.scale;
    CopyWeightTo(file, entry->name, value, scale, backend);  // quantised for an INT8 param
  }
  for (const ParamTensors& p : params) {
    if (!p.master.defined() || !loaded.insert(p.master.raw()).second) continue;
    const SafetensorsEntry* entry = FindGpt2Tensor(file, p.name);
    BATON_CHECK(entry != nullptr, "{}: no tensor for parameter {}", file.path(), p.name);
    Tensor master = p.master;
    file.CopyTo(entry->name, master, backend);
  }
}

std::vector<std::string> Gpt2ParamNames(int num_layers) {
  std::vector<std::string> names = {"wte.weight", "wpe.weight"};
  for (int i = 0; i < num_layers; ++i) {
    for (const char* param : kBlockParams) names.push_back(fmt::format("h.{}.{}", i, param));
  }
  names.insert(names.end(), {"ln_f.weight", "ln_f.bias"});
  return names;
}

std::string StoredGpt2Name(const std::string& name, const ModelDims& dims) {
  const auto [block, rest] = SplitBlockName(name);
  if (block < 0) return name;
  const bool attention = rest.starts_with("ln_1.") || rest.starts_with("attn.");
  const bool shared = attention ? dims.share_attention : dims.share_mlp;
  const int holder = shared ? dims.share_leader(block) : block;
  return fmt::format("h.{}.{}", holder, rest);
}

namespace {
bool IsLowRank(const std::string& rest, const ModelDims& dims) {
  if (rest == "attn.c_attn.weight" || rest == "attn.c_proj.weight") return dims.low_rank_attn > 0;
  if (rest == "mlp.c_fc.weight" || rest == "mlp.c_proj.weight") return dims.low_rank_mlp > 0;
  return false;
}
}  // namespace

std::vector<std::string> StoredGpt2ParamNames(const ModelDims& dims) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const std::string& name : Gpt2ParamNames(dims.num_layers)) {
    const std::string stored = StoredGpt2Name(name, dims);
    if (!seen.insert(stored).second) continue;
    if (IsLowRank(SplitBlockName(stored).second, dims)) {
      names.push_back(stored + "_u");
      names.push_back(stored + "_v");
    } else {
      names.push_back(stored);
    }
  }
  return names;
}

Shape Gpt2ParamShape(const std::string& name, const ModelDims& dims) {
  const int64_t v = dims.vocab_size, t = dims.context, c = dims.width;
  if (name == "wte.weight") return {v, c};
  if (name == "wpe.weight") return {t, c};
  if (name == "ln_f.weight" || name == "ln_f.bias") return {c};
  const auto [block, rest] = SplitBlockName(name);
  BATON_CHECK(block >= 0, "{} is not a GPT-2 parameter", name);
  std::string base = rest;
  int factor = 0;  // 1: U, 2: V
  if (base.ends_with("_u") || base.ends_with("_v")) {
    factor = base.ends_with("_u") ? 1 : 2;
    base.resize(base.size() - 2);
  }
  const std::map<std::string, Shape> shapes = {{"ln_1.weight", {c}},
                                               {"ln_1.bias", {c}},
                                               {"ln_2.weight", {c}},
                                               {"ln_2.bias", {c}},
                                               {"attn.c_attn.weight", {c, 3 * c}},
                                               {"attn.c_attn.bias", {3 * c}},
                                               {"attn.c_proj.weight", {c, c}},
                                               {"attn.c_proj.bias", {c}},
                                               {"mlp.c_fc.weight", {c, 4 * c}},
                                               {"mlp.c_fc.bias", {4 * c}},
                                               {"mlp.c_proj.weight", {4 * c, c}},
                                               {"mlp.c_proj.bias", {c}}};
  const auto it = shapes.find(base);
  BATON_CHECK(it != shapes.end() && (factor == 0 || it->second.size() == 2),
              "{} is not a GPT-2 parameter", name);
  if (factor == 0) return it->second;
  const int64_t rank = base.starts_with("attn.") ? dims.low_rank_attn : dims.low_rank_mlp;
  BATON_CHECK(rank > 0, "{}: the model has no low rank for {}", name, base);
  return factor == 1 ? Shape{it->second[0], rank} : Shape{rank, it->second[1]};
}

void ValidateGpt2File(const SafetensorsFile& file, const ModelDims& dims) {
  const int64_t v = dims.vocab_size, t = dims.context, c = dims.width;
  CheckShape(file, "wte.weight", {v, c});
  CheckShape(file, "wpe.weight", {t, c});
  CheckLmHeadIsTied(file);
  std::set<int> blocks;
  for (const SafetensorsEntry& entry : file.entries()) {
    if (entry.name == "lm_head.weight") continue;
    const std::string name = StripPrefix(entry.name);
    if (Contains(kTopLevelParams, name)) continue;
    const auto [block, rest] = SplitBlockName(name);
    BATON_CHECK(block >= 0 && (Contains(kBlockParams, rest) || Contains(kBlockBuffers, rest)),
                "{}: tensor {} is not a GPT-2 parameter Baton knows", file.path(), entry.name);
    BATON_CHECK(block < dims.num_layers,
                "{}: tensor {} belongs to block {} but the model has {} blocks (h.0 .. h.{})",
                file.path(), entry.name, block, dims.num_layers, dims.num_layers - 1);
    blocks.insert(block);
  }
  for (int i = 0; i < dims.num_layers; ++i) {
    BATON_CHECK(blocks.count(i) == 1, "{}: no tensor for block h.{} of {}", file.path(), i,
                dims.num_layers);
  }
}

NamedTensors Gpt2ExportTensors(const std::vector<ParamTensors>& params) {
  NamedTensors tensors;
  for (const ParamTensors& p : params) {
    if (p.tied) continue;
    tensors.emplace_back(Gpt2HfName(p.name), p.value);
  }
  return tensors;
}

SafetensorsMetadata HfMetadata() { return {{"format", "pt"}}; }

void ExportHfGpt2(const std::string& dir, const std::vector<ParamTensors>& params,
                  const ModelDims& dims, Backend& backend) {
  MakeDirectories(dir);
  WriteSafetensors((std::filesystem::path(dir) / kHfWeightsFileName).string(),
                   Gpt2ExportTensors(params), HfMetadata(), &backend);
  DType dtype = DType::kF32;
  for (const ParamTensors& p : params) dtype = p.value.dtype();
  WriteHfGpt2Config(dir, dims, dtype);
}

void WriteHfGpt2Config(const std::string& dir, const ModelDims& dims, DType dtype,
                       std::optional<int64_t> end_of_text_id) {
  Validate(dims);
  const int64_t end_of_text = end_of_text_id.value_or(dims.vocab_size - 1);
  BATON_CHECK(end_of_text >= 0 && end_of_text < dims.vocab_size,
              "end-of-text id {} is outside the model's {} tokens", end_of_text, dims.vocab_size);
  const nlohmann::ordered_json config = {{"architectures", {"GPT2LMHeadModel"}},
                                         {"model_type", "gpt2"},
                                         {"vocab_size", dims.vocab_size},
                                         {"n_positions", dims.context},
                                         {"n_ctx", dims.context},
                                         {"n_embd", dims.width},
                                         {"n_layer", dims.num_layers},
                                         {"n_head", dims.num_heads},
                                         {"n_inner", nullptr},
                                         {"activation_function", "gelu_new"},
                                         {"layer_norm_epsilon", 1e-5},
                                         {"initializer_range", 0.02},
                                         {"resid_pdrop", 0.0},
                                         {"embd_pdrop", 0.0},
                                         {"attn_pdrop", 0.0},
                                         {"scale_attn_weights", true},
                                         {"tie_word_embeddings", true},
                                         {"bos_token_id", end_of_text},
                                         {"eos_token_id", end_of_text},
                                         {"torch_dtype", HfTorchDType(dtype)}};
  MakeDirectories(dir);
  WriteFileAtomically((std::filesystem::path(dir) / "config.json").string(), config.dump(2) + "\n");
}

}  // namespace baton
