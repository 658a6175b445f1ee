#include "launcher/generate.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "core/error.h"
#include "core/units.h"
#include "data/tokenizer.h"
#include "kernels/backend_factory.h"
#include "launcher/sampling.h"
#include "model/decode.h"
#include "model/from_config.h"
#include "worker/stage_model.h"
#include "worker/stage_tensors.h"

namespace baton {
namespace {

// The prompt's tokens. An empty prompt starts a new document: <|endoftext|> (as between training
// files) when the tokenizer has it, else a newline.
std::vector<int32_t> PromptTokens(const std::string& prompt,
                                  const std::optional<Tokenizer>& tokenizer) {
  std::vector<int32_t> tokens;
  if (tokenizer.has_value()) {
    const std::optional<uint32_t> end_of_text = tokenizer->TokenId(kEndOfText);
    std::vector<uint32_t> ids = tokenizer->Encode(prompt);
    if (ids.empty())
      ids = end_of_text.has_value() ? std::vector{*end_of_text} : tokenizer->Encode("\n");
    tokens.assign(ids.begin(), ids.end());
    spdlog::info("prompt: {} tokens ({}, {} tokens)", tokens.size(),
                 tokenizer->files().front().path, tokenizer->vocab_size());
  } else {
    tokens.assign(prompt.begin(), prompt.end());
    for (int32_t& t : tokens) t &= 0xff;  // bytes, whatever char's signedness
    if (tokens.empty()) tokens.push_back('\n');
  }
  return tokens;
}

// The generation loop: options.tokens draws, each from the decoder's logits for every token so
// far (only the first drawn_vocab ids); returns them. Timed from the prefill to the last draw,
// into `result` with the caches' size.
std::vector<uint32_t> SampleTokens(const GenerateOptions& options, Decoder& decoder,
                                   std::vector<int32_t> tokens, int64_t drawn_vocab,
                                   GenerateResult& result) {
  SplitMix64 rng(options.seed);
  std::vector<uint32_t> generated;
  const Clock::time_point begin = Clock::now();
  for (int n = 0; n < options.tokens; ++n) {
    std::vector<float> logits = decoder.NextLogits(tokens);
    logits.resize(static_cast<size_t>(drawn_vocab));
    const int next = SampleToken(logits, options.sampling, rng);
    tokens.push_back(next);
    generated.push_back(static_cast<uint32_t>(next));
  }
  result.seconds = Seconds(Clock::now() - begin);
  result.tokens = options.tokens;
  result.kv_cache_bytes = decoder.cache_bytes();
  return generated;
}

// The text of `generated` as it continues `prompt`: the decoded whole less the decoded prompt.
// A byte-level BPE decodes token by token, so that is Decode(generated); a SentencePiece model
// drops the leading "▁" of what it decodes first (the dummy prefix), which would glue the first
// new word to the prompt. Where the prompt's text is not a prefix of the whole's (a byte-fallback
// character cut between the two), Decode(generated).
std::string Continuation(const Tokenizer& tokenizer, const std::vector<int32_t>& prompt,
                         const std::vector<uint32_t>& generated) {
  if (!tokenizer.sentencepiece()) return tokenizer.Decode(generated);
  std::vector<uint32_t> all(prompt.begin(), prompt.end());
  const std::string head = tokenizer.Decode(all);
  all.insert(all.end(), generated.begin(), generated.end());
  const std::string whole = tokenizer.Decode(all);
  if (whole.starts_with(head)) return whole.substr(head.size());
  return tokenizer.Decode(generated);
}

}  // namespace

GenerateResult Generate(const GenerateOptions& options) {
  BATON_CHECK(options.tokens >= 0, "--tokens {}: must be >= 0", options.tokens);
  CheckSamplingOptions(options.sampling);
  const CheckpointReader checkpoint = CheckpointReader::Open(options.checkpoint);
  const Config config = ParseConfigString(checkpoint.state().config.dump(2),
                                          checkpoint.step_dir() + "/state.json", options.overrides);
  const ModelDims dims = DimsOf(config.model);
  const std::vector<LayerSpec> graph = GraphOf(config.model);
  checkpoint.CheckCompatible(dims, graph);
  std::optional<Tokenizer> tokenizer;
  if (!config.data.tokenizer.empty()) {
    tokenizer.emplace(Tokenizer::Load(config.data.tokenizer));  // parsing checked it fits
  } else {
    BATON_CHECK(dims.vocab_size == 256,
                "this model has {} tokens and its config no data.tokenizer; generate reads and "
                "prints bytes, which needs a byte-level model (vocab_size 256)",
                dims.vocab_size);
  }
  // Only the tokenizer's ids are drawn: rows past them (a vocabulary padded to a round size)
  // have no text.
  const int64_t drawn_vocab = tokenizer.has_value() ? tokenizer->vocab_size() : dims.vocab_size;

  MemoryLedger ledger;
  std::unique_ptr<Backend> backend =
      MakeBackend(DeviceForLocalRank(config.device.type, 0), ledger, config.device.threads);
  const DType dtype = config.precision.dtype;
  const int num_layers = static_cast<int>(graph.size());
  // Inference: no optimizer state (loading passes over what the checkpoint stores of it).
  const bool int8_weights = config.model.weights == WeightFormat::kInt8;
  StageModel model(graph, dims, {{0, num_layers - 1}}, /*rank=*/0, /*num_stages=*/1,
                   ChunkLayout::kLoop, *backend, dtype, dtype, config.train.seed, int8_weights,
                   /*inference=*/true);
  checkpoint.LoadLayers(CheckpointTensors(model, nullptr), *backend);
  spdlog::info("generating from {} (step {}, {}{} on {})", checkpoint.step_dir(), checkpoint.step(),
               ToString(dims), int8_weights ? ", INT8 weights" : "", backend->device().ToString());

  std::vector<Layer*> layers;
  for (auto& [index, layer] : model.layers()) layers.push_back(layer);
  const auto make_decoder = [&] {
    // The caches hold the attention window's positions (model.sliding_window, else the
    // context); rotary ones slide past them.
    const int window = static_cast<int>(dims.attention_window(dims.context));
    return options.kv_cache ? MakeCachedDecoder(layers, *backend, window, !dims.learned_positions())
                            : MakeWindowDecoder(layers, *backend, dims.context);
  };
  // Rotary positions with the cache slide it: the whole prompt is read, each token over the
  // context - 1 before it (model/decode.h). Otherwise only the last window is.
  const bool sliding = options.kv_cache && !dims.learned_positions();
  const std::vector<int32_t> prompt = PromptTokens(options.prompt, tokenizer);
  if (prompt.size() > static_cast<size_t>(dims.context) && sliding) {
    const int64_t window = dims.attention_window(dims.context);
    spdlog::warn(
        "the prompt's {} tokens exceed the model's context of {}: each token attends over the "
        "{} before it (sliding-window attention with the key-value cache), so the prompt's "
        "first {} tokens reach the continuation only through the tokens after them",
        prompt.size(), dims.context, window - 1, prompt.size() - window);
  } else if (prompt.size() > static_cast<size_t>(dims.context)) {
    spdlog::warn(
        "the prompt's {} tokens exceed the model's context of {}: the model reads only the last "
        "{} (the first {} are not seen), and each new token slides that window on",
        prompt.size(), dims.context, dims.context, prompt.size() - dims.context);
  }
  GenerateResult result;
  if (options.tokens > 0) {
    // Warm-up, untimed: the prompt and one token more through a decoder that is then dropped.
    // The backend's GEMM library generates its kernels on first use in a process (oneDNN: about
    // 20 ms for the prompt's shapes), a start-up cost that would otherwise count as generation.
    const Clock::time_point begin = Clock::now();
    const std::unique_ptr<Decoder> warm = make_decoder();
    std::vector<int32_t> sequence = prompt;
    warm->NextLogits(sequence);
    sequence.push_back(sequence.back());
    warm->NextLogits(sequence);
    result.warmup_seconds = Seconds(Clock::now() - begin);
  }
  const std::unique_ptr<Decoder> decoder = make_decoder();
  const std::vector<uint32_t> generated =
      SampleTokens(options, *decoder, prompt, drawn_vocab, result);
  if (tokenizer.has_value()) {
    result.text = Continuation(*tokenizer, prompt, generated);
  } else {
    for (const uint32_t id : generated) result.text.push_back(static_cast<char>(id));  // bytes
  }
  return result;
}

int GenerateCommand(const GenerateOptions& options, std::ostream& out) {
  const GenerateResult result = Generate(options);
  spdlog::info("generated {} tokens in {:.3f} s: {:.0f} tokens/s ({}; untimed warm-up {:.3f} s)",
               result.tokens, result.seconds, result.tokens_per_second(),
               options.kv_cache
                   ? fmt::format("KV cache, {} as activations", FormatBytes(result.kv_cache_bytes))
                   : "no KV cache: the window recomputed for every token",
               result.warmup_seconds);
  out << options.prompt << result.text << "\n";
  return 0;
}

}  // namespace baton
