#include "launcher/export.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_export.h"
#include "core/error.h"
#include "core/files.h"
#include "core/json_fields.h"
#include "data/tokenizer.h"

namespace baton {
namespace {

constexpr std::string_view kLlama3BeginOfText = "<|begin_of_text|>";

// The special tokens of a tokenizer that export names: GPT-2's <|endoftext|> as bos and eos, or
// Llama 3's <|begin_of_text|> and <|end_of_text|>. Empty when the vocabulary lacks them.
struct SpecialTokens {
  std::string bos, eos;
  std::optional<int64_t> bos_id, eos_id;
};

SpecialTokens SpecialTokensOf(const Tokenizer& tokenizer) {
  SpecialTokens special;
  const auto set = [&](std::string_view token, std::string& text, std::optional<int64_t>& id) {
    if (const std::optional<uint32_t> found = tokenizer.TokenId(token); found.has_value()) {
      text = token;
      id = *found;
    }
  };
  set(kEndOfText, special.bos, special.bos_id);
  set(kEndOfText, special.eos, special.eos_id);
  set(kLlama3BeginOfText, special.bos, special.bos_id);
  set(kLlama3EndOfText, special.eos, special.eos_id);
  if (tokenizer.sentencepiece()) {  // Llama 2's and Mistral's control pieces
    set("<s>", special.bos, special.bos_id);
    set("</s>", special.eos, special.eos_id);
  }
  return special;
}

// What AutoTokenizer reads besides the vocabulary: the class, the context, the special tokens.
// A tokenizer.json loads as PreTrainedTokenizerFast (Llama 3's class), vocab.json + merges.txt
// as GPT2Tokenizer, a SentencePiece tokenizer.model as LlamaTokenizer (Llama 2's and Mistral's,
// adding no <s> of its own: Baton trains ordinary text).
void WriteTokenizerConfig(const std::string& dir, const Tokenizer& tokenizer, int64_t context) {
  const SpecialTokens special = SpecialTokensOf(tokenizer);
  const auto token = [](const std::string& text) {
    return text.empty() ? nlohmann::json(nullptr) : nlohmann::json(text);
  };
  const bool fast = tokenizer.files().front().hf_name == "tokenizer.json";
  nlohmann::ordered_json config = {
      {"tokenizer_class", fast                        ? "PreTrainedTokenizerFast"
                          : tokenizer.sentencepiece() ? "LlamaTokenizer"
                                                      : "GPT2Tokenizer"},
      {"model_max_length", context},
      {"add_prefix_space", tokenizer.add_prefix_space()},
      {"bos_token", token(special.bos)},
      {"eos_token", token(special.eos)}};
  if (tokenizer.sentencepiece()) {
    config.erase("add_prefix_space");  // the model's add_dummy_prefix decides
    config["unk_token"] = tokenizer.TokenId("<unk>") ? nlohmann::json("<unk>") : nullptr;
    config["add_bos_token"] = false;
    config["add_eos_token"] = false;
  } else if (!fast) {
    config["unk_token"] = token(special.eos);
  }
  WriteFileAtomically((std::filesystem::path(dir) / "tokenizer_config.json").string(),
                      config.dump(2) + "\n");
}

// The tokenizer to copy beside the model: --set data.tokenizer=PATH, else the data.tokenizer of
// the config state.json stores (the one field of it export reads: the checkpoint records the
// tokenizer nowhere else; the model comes from the manifest), else none (byte-level).
std::optional<std::string> TokenizerPath(const CheckpointReader& checkpoint,
                                         const std::vector<std::string>& overrides) {
  constexpr std::string_view kKey = "data.tokenizer=";
  std::optional<std::string> path;
  for (const std::string& set : overrides) {
    BATON_CHECK(set.starts_with(kKey),
                "--set {}: baton export takes only --set data.tokenizer=PATH (the model is the "
                "checkpoint's, from its manifest)",
                set);
    path = set.substr(kKey.size());
  }
  if (!path.has_value()) {
    const nlohmann::json state = {{"config", checkpoint.state().config}};
    path = JsonField(state,
                     checkpoint.step_dir() + "/" + kStateFileName)["config"]["data"]["tokenizer"]
               .OptionalString();
  }
  if (path.has_value() && path->empty()) return std::nullopt;  // "": byte-level
  return path;
}

}  // namespace

int ExportCommand(const ExportOptions& options) {
  const CheckpointReader checkpoint = CheckpointReader::Open(options.checkpoint);
  std::optional<Tokenizer> tokenizer;
  if (const std::optional<std::string> path = TokenizerPath(checkpoint, options.overrides)) {
    tokenizer.emplace(Tokenizer::Load(*path));
    BATON_CHECK(tokenizer->vocab_size() <= checkpoint.dims().vocab_size,
                "data.tokenizer {}: {} tokens, more than the checkpoint's model has "
                "(vocab_size {}): not the tokenizer it was trained with",
                *path, tokenizer->vocab_size(), checkpoint.dims().vocab_size);
  }
  SpecialTokens special;
  if (tokenizer.has_value()) special = SpecialTokensOf(*tokenizer);
  ExportCheckpointToHf(checkpoint, options.output, ParseDType(options.dtype), special.eos_id,
                       special.bos_id);
  if (tokenizer.has_value()) {
    CopyTokenizerFiles(*tokenizer, options.output);
    WriteTokenizerConfig(options.output, *tokenizer, checkpoint.dims().context);
    spdlog::info("exported to {} with the tokenizer {} ({} tokens)", options.output,
                 tokenizer->files().front().path, tokenizer->vocab_size());
  } else {
    spdlog::info("exported to {} (byte-level: no tokenizer)", options.output);
  }
  return 0;
}

}  // namespace baton
