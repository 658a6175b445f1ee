// `baton generate CHECKPOINT --prompt TEXT`: sampled continuations of a prompt from a trained
// checkpoint.
//
// The whole model runs in this one process (one stage holding every layer, whatever the stage
// count the checkpoint was trained with: its files are per layer), on the checkpoint's device
// type unless --set says otherwise. Each new token recomputes the context window (the last
// model.context tokens; no key-value cache): meant for models that fit one device.
//
// Sampling: logits / temperature, restricted to the top_k largest (0 = all), softmax, then one
// draw from a 64-bit generator seeded with `seed` (temperature 0: the argmax). The same
// checkpoint, prompt and options give the same text.
//
// Tokens: when the checkpoint's config has data.tokenizer, the prompt is encoded with it, only
// its ids are drawn (a model's vocabulary may be padded past them) and the continuation is
// decoded with it; byte-level models (vocab_size 256, no tokenizer) read the prompt's bytes and
// print bytes.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace baton {

struct GenerateOptions {
  std::string checkpoint;  // a step dir, checkpoints root or output dir
  std::string prompt;
  int tokens = 200;          // new tokens to sample
  double temperature = 0.8;  // >= 0; 0 = greedy
  int top_k = 40;            // 0 = every token
  uint64_t seed = 1;
  std::vector<std::string> overrides;  // --set for the config (e.g. device.type=cpu)
};

// Returns the generated continuation (without the prompt).
std::string Generate(const GenerateOptions& options);
// The command: prints prompt + continuation to `out`; returns the exit code.
int GenerateCommand(const GenerateOptions& options, std::ostream& out);

}  // namespace baton
