// GPT-2 weights in and out: Baton's parameters <-> Hugging Face GPT-2 safetensors files.
//
// Baton's Param names are Hugging Face GPT-2 names without the "transformer." prefix
// ("wte.weight", "h.3.attn.c_attn.weight", "ln_f.bias"), in the same Conv1D [in, out] layout, so
// the mapping is a prefix: files written by GPT2LMHeadModel.save_pretrained() say
// "transformer.wte.weight"; the hub's own gpt2 checkpoint (saved from GPT2Model) says
// "wte.weight". Import accepts both; export writes the prefixed form with metadata
// {"format": "pt"}, which transformers requires. The LM head is tied to wte: it is not stored, and
// on import the head's tied copy is filled from wte. Known non-parameter buffers
// ("h.{i}.attn.bias", "h.{i}.attn.masked_bias") are ignored; a stored "lm_head.weight" must equal
// wte. See docs/safetensors.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/layer_tensors.h"
#include "checkpoint/safetensors.h"
#include "kernels/backend.h"
#include "model/dims.h"

namespace baton {

inline constexpr const char* kHfGpt2Prefix = "transformer.";

// "wte.weight" -> "transformer.wte.weight".
std::string Gpt2HfName(const std::string& baton_name);
// The tensor of `file` holding Baton parameter `baton_name` (prefixed or not); null when absent.
// Throws when the file holds both spellings.
const SafetensorsEntry* FindGpt2Tensor(const SafetensorsFile& file, const std::string& baton_name);

// Fills every param's value from `file`, converting the file's dtype to the param's
// (f32/f16/bf16), and each defined master from the file's values (not from the rounded 16-bit
// param); moments are left alone. Tied copies take wte; storage shared by two params is filled
// once. A missing tensor or a shape mismatch is an error naming the file and the tensor. Loads
// only the params given: one pipeline rank loads its own layers. (model.init_from: the worker's
// InitFromSafetensors, worker/stage_tensors.h, passes its params with their masters.)
void LoadParamsFromSafetensors(const SafetensorsFile& file, const std::vector<ParamTensors>& params,
                               Backend& backend);

// Baton's names of every parameter of a GPT-2 with `num_layers` blocks: wte, wpe, the blocks'
// h.{i}.* in order, ln_f (the tied LM head has no name of its own).
std::vector<std::string> Gpt2ParamNames(int num_layers);

// Where a checkpoint of a model with `dims` keeps GPT-2 parameter `name` (one of
// Gpt2ParamNames): a shared block's (model.share) under its group's first block's name; a
// low-rank weight as "<the name>_u" and "<the name>_v", its factors (returned without the
// suffix; the caller looks for them when the name itself is not stored).
std::string StoredGpt2Name(const std::string& name, const ModelDims& dims);
// The names a checkpoint of a GPT-2 with `dims` stores its parameters under, each once.
std::vector<std::string> StoredGpt2ParamNames(const ModelDims& dims);
// The shape of a GPT-2 parameter (one of Gpt2ParamNames; linears as [in, out], as Hugging Face's
// Conv1D keeps them) or of a stored name (StoredGpt2ParamNames: a low-rank factor "<name>_u" is
// [in, R], "<name>_v" [R, out], R the model's low rank for it). Throws for another name.
Shape Gpt2ParamShape(const std::string& name, const ModelDims& dims);

// Checks that `file` describes a GPT-2 with these dims as a whole: wte (V,C) and wpe (maxT,C)
// present, blocks h.0 .. h.{L-1} and no others, no tensor Baton does not know. A pipeline rank
// only sees its own layers' names, so rank 0 (or the launcher) runs this once for the whole model.
void ValidateGpt2File(const SafetensorsFile& file, const ModelDims& dims);

// Export of parameters held in one process: tied copies skipped, names prefixed, values only. The
// tensors share the params' storage.
NamedTensors Gpt2ExportTensors(const std::vector<ParamTensors>& params);

// <dir>/model.safetensors and <dir>/config.json from parameters held in one process (a one-rank
// run, or tests): what GPT2LMHeadModel.from_pretrained(dir) loads.
void ExportHfGpt2(const std::string& dir, const std::vector<ParamTensors>& params,
                  const ModelDims& dims, Backend& backend);

// <dir>/config.json: the minimal Hugging Face GPT2Config that GPT2LMHeadModel.from_pretrained(dir)
// needs to load <dir>/model.safetensors (gelu_new, layer_norm_epsilon 1e-5, tied embeddings, no
// dropout). `dtype` is what model.safetensors holds (torch_dtype). bos_token_id and eos_token_id
// are `end_of_text_id` when given (the tokenizer's <|endoftext|>), else vocab_size - 1 (GPT-2's
// 50256). Written atomically.
void WriteHfGpt2Config(const std::string& dir, const ModelDims& dims, DType dtype = DType::kF32,
                       std::optional<int64_t> end_of_text_id = std::nullopt);

inline constexpr const char* kHfWeightsFileName = "model.safetensors";
// The metadata transformers requires of a safetensors file: {"format": "pt"}.
SafetensorsMetadata HfMetadata();

}  // namespace baton
