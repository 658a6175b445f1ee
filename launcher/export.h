// `baton export CHECKPOINT OUT`: a checkpoint as a Hugging Face GPT-2 folder that
// `transformers` loads whole: model.safetensors + config.json (checkpoint/checkpoint_export.h)
// and, when the checkpoint's config has data.tokenizer, the tokenizer beside them.
//
// The tokenizer's files are copied under the names Hugging Face looks for (tokenizer.json, or
// vocab.json + merges.txt), with a tokenizer_config.json (GPT2Tokenizer, model_max_length =
// model.context, <|endoftext|> as bos/eos/unk when the vocabulary has it), and config.json's
// bos/eos ids are that token's id, so pipeline("text-generation", model=OUT) works. The config
// is the one the checkpoint stores; its data.tokenizer path is read as written there (relative
// to the working directory), and --set data.tokenizer=PATH points elsewhere.
#pragma once

#include <string>
#include <vector>

namespace baton {

struct ExportOptions {
  std::string checkpoint;  // a step dir, checkpoints root or output dir
  std::string output;      // the folder to write
  std::string dtype = "f32";
  std::vector<std::string> overrides;  // --set for the stored config (e.g. data.tokenizer=...)
};

// Writes the folder; returns the exit code.
int ExportCommand(const ExportOptions& options);

}  // namespace baton
