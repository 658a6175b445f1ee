// Llama weights in and out: Baton's Llama parameters <-> a Hugging Face LlamaForCausalLM folder
// (config.json, and model.safetensors or model-0000k-of-0000n.safetensors shards listed by
// model.safetensors.index.json). See docs/safetensors.md, "Llama".
//
// Hugging Face keeps nn.Linear weights as (out, in); Baton's are Conv1D (in, out), y = x @ W, so
// every projection is transposed, and Baton's fused matrices are Hugging Face's side by side by
// columns: c_attn = [q_proj^T | k_proj^T | v_proj^T], c_fc = [gate_proj^T | up_proj^T]. Rotary
// positions use Hugging Face's rotate_half layout (kernels/rope.h), so q_proj and k_proj need no
// permutation. No tensor is converted otherwise: an f32 export and import are bit for bit.
//
// A folder's shards are opened on first use: a pipeline rank reads only the files holding its own
// parameters; ValidateHfLlamaFolder checks the whole model from config.json and the index alone.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/hf_llama_config.h"
#include "checkpoint/layer_tensors.h"
#include "checkpoint/safetensors.h"
#include "kernels/backend.h"
#include "model/dims.h"

namespace baton {

// An open folder: config.json read, the index (or the single file's header) read; shards mapped
// on first use and kept open. Move-only; not thread-safe.
class HfLlamaFolder {
 public:
  static HfLlamaFolder Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const HfLlamaConfig& config() const { return config_; }
  // Tensor name -> the file (in dir) holding it.
  const std::map<std::string, std::string>& weight_map() const { return weight_map_; }
  // The file holding `hf_name`, opened on first use; null when the index lists no such tensor.
  const SafetensorsFile* FileOf(const std::string& hf_name);
  // The file names opened so far, sorted.
  std::vector<std::string> opened_files() const;

 private:
  std::string dir_;
  HfLlamaConfig config_;
  std::map<std::string, std::string> weight_map_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;  // by file name
};

// One Hugging Face tensor a Baton parameter is made of: its name, its shape in the file, and
// whether Baton holds its transpose (an nn.Linear weight).
struct HfLlamaPart {
  std::string name;
  Shape shape;
  bool transposed = false;
  // A stacked expert parameter (E, in, out): the expert whose (in, out) block this part is in,
  // its parts side by side within it; -1 for every other parameter.
  int expert = -1;
};

// The Hugging Face tensors Baton parameter `baton_name` is made of, left to right by columns
// ("h.3.attn.c_attn.weight" -> q_proj, k_proj, v_proj of model.layers.3; a Qwen2's
// "h.3.attn.c_attn.bias" -> their biases, one after the other). Throws for a name that is not a
// parameter of this Llama or Qwen2.
std::vector<HfLlamaPart> LlamaHfParts(const std::string& baton_name, const ModelDims& dims);
// Baton's shape of a Llama parameter: (in, out) for a projection.
Shape LlamaParamShape(const std::string& baton_name, const ModelDims& dims);
// Baton's names of every parameter of a Llama (or Qwen2) with `dims`: wte, the blocks' h.{i}.* in
// order (a Qwen2's attn.c_attn.bias after its weight), ln_f, and lm_head when the head is untied.
std::vector<std::string> LlamaParamNames(const ModelDims& dims);

// Checks the whole folder against `dims` without reading a shard: config.json's dims are the
// model's, and the index lists exactly the model's tensors (lm_head.weight only when untied;
// model.layers.0 .. L-1; any bias but a Qwen2's q/k/v biases, any other tensor refused;
// rotary_emb.inv_freq buffers and a tied model's stored lm_head.weight ignored, as transformers
// ignores them).
void ValidateHfLlamaFolder(const HfLlamaFolder& folder, const ModelDims& dims);

// Fills each param (and its defined master, from the file's values) of one rank from the folder,
// opening only the shards its tensors are in. Shapes are checked against `dims` and every tensor
// for NaN/Inf, each error naming the file and the tensor; the dtype is converted (INT8 params are
// quantised). Tied copies take model.embed_tokens.weight.
void LoadLlamaParamsFromHf(HfLlamaFolder& folder, const ModelDims& dims,
                           const std::vector<ParamTensors>& params, Backend& backend);

// The Hugging Face tensors of parameter `baton_name` (LlamaHfParts) from its value `dense`,
// f32 on the host, each converted to `dtype`.
NamedTensors LlamaHfTensorsOf(const std::string& baton_name, const Tensor& dense,
                              const ModelDims& dims, DType dtype, Allocator& allocator);

// <dir>/model.safetensors (metadata {"format": "pt"}) and <dir>/config.json from a whole model's
// parameters held in one process (f32, on the host; tied copies skipped).
void ExportHfLlama(const std::string& dir, const std::vector<ParamTensors>& params,
                   const ModelDims& dims, Backend& backend);

}  // namespace baton
