// `baton export CHECKPOINT OUT`: a checkpoint as a Hugging Face folder that `transformers` loads
// whole: model.safetensors + config.json (checkpoint/checkpoint_export.h; a GPT2LMHeadModel for
// the gpt preset, a LlamaForCausalLM for llama) and, when the checkpoint's config has
// data.tokenizer, the tokenizer beside them.
//
// The tokenizer's files are copied under the names Hugging Face looks for (tokenizer.json, or
// vocab.json + merges.txt), with a tokenizer_config.json (PreTrainedTokenizerFast for a
// tokenizer.json, else GPT2Tokenizer; model_max_length = model.context; bos/eos: GPT-2's
// <|endoftext|>, or Llama 3's <|begin_of_text|> and <|end_of_text|> when the vocabulary has them),
// and config.json's bos/eos ids are those tokens' ids, so pipeline("text-generation", model=OUT)
// works. The model (and model_max_length) is the checkpoint manifest's; of the config state.json
// stores, which is informational, export reads only data.tokenizer, as written there (relative to
// the working directory; a wrong type is an error naming the file and the key), and
// --set data.tokenizer=PATH (the only --set export takes) points elsewhere.
#pragma once

#include <string>
#include <vector>

namespace baton {

struct ExportOptions {
  std::string checkpoint;  // a step dir, checkpoints root or output dir
  std::string output;      // the folder to write
  std::string dtype = "f32";
  std::vector<std::string> overrides;  // --set data.tokenizer=PATH (nothing else)
};

// Writes the folder; returns the exit code.
int ExportCommand(const ExportOptions& options);

}  // namespace baton
