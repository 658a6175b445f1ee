#include "launcher/export.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_export.h"
#include "config/config.h"
#include "core/files.h"
#include "data/tokenizer.h"

namespace baton {
namespace {

// What AutoTokenizer reads besides the vocabulary: the class, the context, the special tokens.
void WriteTokenizerConfig(const std::string& dir, const Tokenizer& tokenizer, int64_t context) {
  const nlohmann::json end_of_text = tokenizer.TokenId(kEndOfText).has_value()
                                         ? nlohmann::json(std::string(kEndOfText))
                                         : nlohmann::json(nullptr);
  const nlohmann::ordered_json config = {{"tokenizer_class", "GPT2Tokenizer"},
                                         {"model_max_length", context},
                                         {"add_prefix_space", tokenizer.add_prefix_space()},
                                         {"bos_token", end_of_text},
                                         {"eos_token", end_of_text},
                                         {"unk_token", end_of_text}};
  WriteFileAtomically((std::filesystem::path(dir) / "tokenizer_config.json").string(),
                      config.dump(2) + "\n");
}

}  // namespace

int ExportCommand(const ExportOptions& options) {
  const CheckpointReader checkpoint = CheckpointReader::Open(options.checkpoint);
  std::optional<Tokenizer> tokenizer;
  int64_t context = 0;
  if (!checkpoint.state().config.is_null()) {  // a checkpoint stores its run's config
    const Config config =
        ParseConfigString(checkpoint.state().config.dump(2), checkpoint.step_dir() + "/state.json",
                          options.overrides);
    if (!config.data.tokenizer.empty()) tokenizer.emplace(Tokenizer::Load(config.data.tokenizer));
    context = config.model.context;
  }
  std::optional<int64_t> end_of_text;
  if (tokenizer.has_value() && tokenizer->TokenId(kEndOfText).has_value()) {
    end_of_text = *tokenizer->TokenId(kEndOfText);
  }
  ExportCheckpointToHf(checkpoint, options.output, ParseDType(options.dtype), end_of_text);
  if (tokenizer.has_value()) {
    CopyTokenizerFiles(*tokenizer, options.output);
    WriteTokenizerConfig(options.output, *tokenizer, context);
    spdlog::info("exported to {} with the tokenizer {} ({} tokens)", options.output,
                 tokenizer->files().front().path, tokenizer->vocab_size());
  } else {
    spdlog::info("exported to {} (byte-level: no tokenizer)", options.output);
  }
  return 0;
}

}  // namespace baton
