// Export of a training checkpoint as a Hugging Face GPT-2 or Llama directory (model.safetensors +
// config.json), whatever partition wrote it: the per-layer files are merged, no model is built.
//
// This is what `baton export` runs: GPT2LMHeadModel.from_pretrained(out_dir) (gpt preset) or
// LlamaForCausalLM.from_pretrained(out_dir) (llama preset, dense) then loads the weights. Only
// those graphs (embedding, block.0 .. block.{L-1}, head) have a Hugging Face form.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "checkpoint/checkpoint.h"
#include "core/dtype.h"

namespace baton {

// Writes <out_dir>/model.safetensors in `dtype` (f32, f16 or bf16) and <out_dir>/config.json:
// WriteHfGpt2Config with `end_of_text_id` as its bos/eos id when given, or for a Llama
// WriteHfLlamaConfig with `begin_of_text_id` as bos and `end_of_text_id` as eos. For f32 output a
// 16-bit run's fp32 master weights are exported, not the rounded params. Host memory: the whole
// model in `dtype` when it differs from the stored dtype. (The tokenizer is the launcher's:
// launcher/export.h.)
void ExportCheckpointToHf(const CheckpointReader& checkpoint, const std::string& out_dir,
                          DType dtype = DType::kF32,
                          std::optional<int64_t> end_of_text_id = std::nullopt,
                          std::optional<int64_t> begin_of_text_id = std::nullopt);

}  // namespace baton
