#include "launcher/generate.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "core/error.h"
#include "core/files.h"
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
  } else {
    tokens.assign(prompt.begin(), prompt.end());
    for (int32_t& t : tokens) t &= 0xff;  // bytes, whatever char's signedness
    if (tokens.empty()) tokens.push_back('\n');
  }
  return tokens;
}

// The prompts of --prompts FILE: one per line (a final newline ends the last; "\r\n" is read
// as "\n"); empty lines are skipped. `lines` gets each prompt's line number.
std::vector<std::string> ReadPrompts(const std::string& path, std::vector<int>& lines) {
  BATON_CHECK(FileExists(path), "--prompts {}: no such file", path);
  const std::string text = ReadFileToString(path);
  std::vector<std::string> prompts;
  size_t begin = 0;
  for (int line = 1; begin < text.size(); ++line) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string prompt = text.substr(begin, end - begin);
    if (prompt.ends_with('\r')) prompt.pop_back();
    if (!prompt.empty()) {
      prompts.push_back(std::move(prompt));
      lines.push_back(line);
    }
    begin = end + 1;
  }
  BATON_CHECK(!prompts.empty(),
              "--prompts {} holds no prompt (one per line; empty lines are skipped)", path);
  return prompts;
}

// Prompt i's generator: seeded with --seed for the first (so a file's first prompt continues as
// --prompt does), with SplitMix64(seed + i)'s first output for the others.
uint64_t PromptSeed(uint64_t seed, size_t i) { return i == 0 ? seed : SplitMix64(seed + i).Next(); }

// The generation loop over a batch of prompts (prompts[b] is the file's prompt first + b):
// options.tokens draws per row, each from the decoder's logits for every token of that row so
// far (only the first drawn_vocab ids), with the row's own generator. Returns each row's draws;
// adds its time (from the prefill to the last draw), tokens and the caches' size to `result`.
std::vector<std::vector<uint32_t>> SampleTokens(const GenerateOptions& options, Decoder& decoder,
                                                std::vector<std::vector<int32_t>> sequences,
                                                size_t first, int64_t drawn_vocab,
                                                GenerateResult& result) {
  std::vector<SplitMix64> rngs;
  for (size_t b = 0; b < sequences.size(); ++b) {
    rngs.emplace_back(PromptSeed(options.seed, first + b));
  }
  std::vector<std::vector<uint32_t>> generated(sequences.size());
  const Clock::time_point begin = Clock::now();
  for (int n = 0; n < options.tokens; ++n) {
    std::vector<std::vector<float>> logits = decoder.NextLogitsBatch(sequences);
    for (size_t b = 0; b < sequences.size(); ++b) {
      logits[b].resize(static_cast<size_t>(drawn_vocab));
      const int next = SampleToken(logits[b], options.sampling, rngs[b]);
      sequences[b].push_back(next);
      generated[b].push_back(static_cast<uint32_t>(next));
    }
  }
  result.seconds += Seconds(Clock::now() - begin);
  result.tokens += static_cast<int64_t>(options.tokens) * static_cast<int64_t>(sequences.size());
  result.kv_cache_bytes = std::max(result.kv_cache_bytes, decoder.cache_bytes());
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
  BATON_CHECK(options.batch >= 1, "--batch {}: must be >= 1", options.batch);
  BATON_CHECK(options.batch == 1 || !options.prompts_file.empty(),
              "--batch {} needs --prompts FILE (one prompt per line)", options.batch);
  BATON_CHECK(options.prompt.empty() || options.prompts_file.empty(),
              "--prompt and --prompts {}: give one or the other", options.prompts_file);
  CheckSamplingOptions(options.sampling);
  GenerateResult result;
  std::vector<int> lines;  // of the prompts in the file
  result.prompts = options.prompts_file.empty() ? std::vector{options.prompt}
                                                : ReadPrompts(options.prompts_file, lines);
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
  std::vector<std::vector<int32_t>> prompts;
  size_t fewest = SIZE_MAX, most = 0;
  for (size_t i = 0; i < result.prompts.size(); ++i) {
    const std::vector<int32_t>& prompt =
        prompts.emplace_back(PromptTokens(result.prompts[i], tokenizer));
    fewest = std::min(fewest, prompt.size());
    most = std::max(most, prompt.size());
    const std::string where =
        lines.empty() ? "" : fmt::format("{}:{}: ", options.prompts_file, lines[i]);
    if (prompt.size() > static_cast<size_t>(dims.context) && sliding) {
      const int64_t window = dims.attention_window(dims.context);
      spdlog::warn(
          "{}the prompt's {} tokens exceed the model's context of {}: each token attends over "
          "the {} before it (sliding-window attention with the key-value cache), so the prompt's "
          "first {} tokens reach the continuation only through the tokens after them",
          where, prompt.size(), dims.context, window - 1, prompt.size() - window);
    } else if (prompt.size() > static_cast<size_t>(dims.context)) {
      spdlog::warn(
          "{}the prompt's {} tokens exceed the model's context of {}: the model reads only the "
          "last {} (the first {} are not seen), and each new token slides that window on",
          where, prompt.size(), dims.context, dims.context, prompt.size() - dims.context);
    }
  }
  const std::string source =
      tokenizer.has_value()
          ? fmt::format("{}, {} tokens", tokenizer->files().front().path, tokenizer->vocab_size())
          : "bytes";
  if (lines.empty()) {
    spdlog::info("prompt: {} tokens ({})", prompts[0].size(), source);
  } else {
    spdlog::info("{} prompts from {}: {} to {} tokens ({}), {} at a time", prompts.size(),
                 options.prompts_file, fewest, most, source, options.batch);
  }
  // The prompts in batches of --batch, in the file's order.
  const auto batch_of = [&](size_t first) {
    const size_t end = std::min(prompts.size(), first + static_cast<size_t>(options.batch));
    return std::vector<std::vector<int32_t>>(prompts.begin() + static_cast<std::ptrdiff_t>(first),
                                             prompts.begin() + static_cast<std::ptrdiff_t>(end));
  };
  if (options.tokens > 0) {
    // Warm-up, untimed: the first batch's prompts and one token more through a decoder that is
    // then dropped. The backend's GEMM library generates its kernels on first use in a process
    // (oneDNN: about 20 ms for the prompt's shapes), a start-up cost that would otherwise count
    // as generation.
    const Clock::time_point begin = Clock::now();
    const std::unique_ptr<Decoder> warm = make_decoder();
    std::vector<std::vector<int32_t>> sequences = batch_of(0);
    warm->NextLogitsBatch(sequences);
    for (std::vector<int32_t>& sequence : sequences) sequence.push_back(sequence.back());
    warm->NextLogitsBatch(sequences);
    result.warmup_seconds = Seconds(Clock::now() - begin);
  }
  for (size_t first = 0; first < prompts.size(); first += static_cast<size_t>(options.batch)) {
    const std::vector<std::vector<int32_t>> sequences = batch_of(first);
    const std::unique_ptr<Decoder> decoder = make_decoder();
    const std::vector<std::vector<uint32_t>> generated =
        SampleTokens(options, *decoder, sequences, first, drawn_vocab, result);
    for (size_t b = 0; b < generated.size(); ++b) {
      std::string& text = result.texts.emplace_back();
      if (tokenizer.has_value()) {
        text = Continuation(*tokenizer, sequences[b], generated[b]);
      } else {
        for (const uint32_t id : generated[b]) text.push_back(static_cast<char>(id));  // bytes
      }
    }
  }
  return result;
}

int GenerateCommand(const GenerateOptions& options, std::ostream& out) {
  const GenerateResult result = Generate(options);
  const std::string prompts =
      options.prompts_file.empty()
          ? ""
          : fmt::format("{} prompts, {} at a time; ", result.prompts.size(), options.batch);
  spdlog::info("generated {} tokens in {:.3f} s: {:.0f} tokens/s ({}{}; untimed warm-up {:.3f} s)",
               result.tokens, result.seconds, result.tokens_per_second(), prompts,
               options.kv_cache
                   ? fmt::format("KV cache, {} as activations", FormatBytes(result.kv_cache_bytes))
                   : "no KV cache: the window recomputed for every token",
               result.warmup_seconds);
  if (options.prompts_file.empty()) {
    out << options.prompt << result.texts.front() << "\n";
    return 0;
  }
  // One JSON object per prompt and line, in the file's order. Text that is not valid UTF-8 (a
  // byte-level model's bytes, a character cut by the last token) has its bad bytes replaced.
  for (size_t i = 0; i < result.prompts.size(); ++i) {
    const nlohmann::ordered_json line = {{"prompt", result.prompts[i]},
                                         {"continuation", result.texts[i]}};
    out << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return 0;
}

}  // namespace baton
