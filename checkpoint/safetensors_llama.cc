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

// The experts a param's split keeps: all of them unless a stacked parameter is cut along them
// (over an expert group, or folded over tensor ranks); a part that is not an expert's is read
// whatever the cut (ExpertRange::Holds).
ExpertRange ExpertsKept(const TensorSplit& split) {
  if (!split.cut() || split.dim != 0) return {};
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

}  // namespace baton
