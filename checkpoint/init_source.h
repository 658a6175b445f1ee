// model.init_from, resolved in one place: what the path names and the file or folder to read.
// The launcher resolves it before any worker starts (launcher/run.cc CheckNamedFiles: a Llama
// folder's config.json then decides the model, a Hugging Face GPT-2 folder becomes its weights
// file), and the worker dispatches on the same resolution of the path it is given
// (job/worker_main.cc LoadInitialState), so the two cannot disagree. docs/safetensors.md.
#pragma once

#include <string>

namespace baton {

struct InitSource {
  enum class Kind {
    kNone,           // model.init_from empty: a fresh initialisation
    kCheckpoint,     // a Baton checkpoint (its weights; fresh optimizer state)
    kHfLlamaFolder,  // a Hugging Face Llama folder (config.json, safetensors shards)
    kGpt2File,       // a GPT-2 safetensors file (a Hugging Face GPT-2 folder's model.safetensors)
  };
  Kind kind = Kind::kNone;
  std::string path;  // what to read
};

// Resolves `init_from` ("" gives kNone). A folder is a Hugging Face Llama when its config.json
// says so, else a Baton checkpoint (a step folder, a checkpoints root or an output dir), else a
// Hugging Face folder read through its model.safetensors; anything else is a GPT-2 file. Throws
// baton::Error naming `config_path` and model.init_from when a folder is none of these (with
// `llama_preset`, a folder whose config.json is not a Llama's is named as such).
InitSource ResolveInitSource(const std::string& init_from, const std::string& config_path,
                             bool llama_preset);

}  // namespace baton
