// `baton generate CHECKPOINT --prompt TEXT`: sampled continuations of a prompt from a trained
// checkpoint; `--prompts FILE --batch N`: of every prompt of a file (one per line), decoded N at a
// time as one batch (model/decode.h: each row's logits are its prompt's alone up to rounding, the
// linears run the N rows at once), printed as one JSON object per prompt and line,
// {"prompt": ..., "continuation": ...}, in the file's order.
//
// The whole model runs in this one process (one stage holding every layer, whatever the stage
// count the checkpoint was trained with: its files are per layer), on the checkpoint's device
// type unless --set says otherwise: meant for models that fit one device.
//
// Key-value cache (the default; model/decode.h): the prompt is prefilled once, then each new
// token runs every layer on its one position, attending over the cached keys and values of the
// earlier ones. Once prompt + continuation exceed model.context: learned absolute positions
// (GPT-2) make the window slide, every cached key change, and each further token recompute the
// whole window (a fresh prefill), as without the cache; rotary positions (Llama) keep the cache,
// dropping its oldest position per new token (sliding-window attention of width model.context,
// model/decode.h), at the speed of a token inside the context. `kv_cache = false`
// (--no-kv-cache) recomputes the window (the last model.context tokens) for every token. Both
// give the same logits up to float rounding while the sequence fits the context (and past it
// for learned positions), so the same text but where two tokens' logits tie to within it; past
// the context a rotary model's two modes differ by design.
//
// Sampling (launcher/sampling.h): logits / temperature, restricted to the top_k largest (0 =
// all), softmax, the nucleus of top_p, then one draw from a 64-bit generator seeded with `seed`
// (temperature 0: the argmax). The same checkpoint, prompt and options give the same text. Each
// prompt of a file draws from its own generator, the first seeded with `seed` (so it continues as
// --prompt does), prompt i with SplitMix64(seed + i)'s first output: a prompt's text depends on
// neither the batch size nor the other prompts (but where rounding differences between batch
// shapes decide a tie of two tokens' logits).
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

#include "launcher/sampling.h"

namespace baton {

struct GenerateOptions {
  std::string checkpoint;  // a step dir, checkpoints root or output dir
  std::string prompt;
  std::string prompts_file;  // --prompts: one prompt per line, instead of `prompt`
  int batch = 1;             // prompts of the file decoded together
  int tokens = 200;          // new tokens to sample
  SamplingOptions sampling;  // temperature, top_k, top_p
  uint64_t seed = 1;
  std::vector<std::string> overrides;  // --set for the config (e.g. device.type=cpu)
  bool kv_cache = true;                // false: recompute the window for every token
};

struct GenerateResult {
  std::vector<std::string> prompts;  // as given (one, or the file's)
  std::vector<std::string> texts;    // each prompt's continuation, without the prompt
  int64_t tokens = 0;                // new tokens generated, every prompt's
  double seconds = 0;                // wall time of the generation loop, prompt prefill included
  // The untimed warm-up before it: the prompt and one token more through a decoder that is then
  // dropped (the GEMM library's kernel generation, once per process).
  double warmup_seconds = 0;
  int64_t kv_cache_bytes = 0;  // what the caches of one batch held (activations); 0 without them
  // tokens / seconds (docs/outputs.md, "baton generate"); 0 when nothing was timed.
  double tokens_per_second() const { return seconds > 0 ? tokens / seconds : 0.0; }
};

GenerateResult Generate(const GenerateOptions& options);
// The command: prints prompt + continuation (or a file's JSON lines) to `out` and the speed to
// the log ("generated 200 tokens in 0.21 s: 952 tokens/s (KV cache, ...)"); returns the exit
// code.
int GenerateCommand(const GenerateOptions& options, std::ostream& out);

}  // namespace baton
