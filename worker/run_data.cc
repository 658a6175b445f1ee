#include "worker/run_data.h"

#include <fmt/format.h>

#include <optional>

#include "core/error.h"
#include "data/tokenizer.h"

namespace baton {
namespace {

TokenFormat ToTokenFormat(DataFormat format) {
  switch (format) {
    case DataFormat::kAuto:
      return TokenFormat::kAuto;
    case DataFormat::kText:
      return TokenFormat::kText;
    case DataFormat::kBin:
      return TokenFormat::kBin;
  }
  BATON_FAIL("unknown data format {}", static_cast<int>(format));
}

// The tail of the training stream that is held out, checked to hold one window.
TrainEvalSplit SplitFor(const DataConfig& data, int64_t num_tokens, int64_t seq_len) {
  const TrainEvalSplit split = SplitTail(num_tokens, data.eval_fraction);
  if (split.eval_tokens < seq_len + 1 || split.train_tokens < seq_len + 1) {
    BATON_FAIL(
        "data.eval_fraction {} of {}'s {} tokens leaves {} for training and {} held out; each "
        "needs at least seq_len + 1 = {}",
        data.eval_fraction, data.path, num_tokens, split.train_tokens, split.eval_tokens,
        seq_len + 1);
  }
  return split;
}

// data.tokenizer, loaded when some source is text (a .bin already holds its ids).
std::optional<Tokenizer> TokenizerFor(const DataConfig& data, TokenFormat format) {
  const auto is_text = [&](const std::string& path) {
    return !path.empty() && ResolveTokenFormat(path, format) == TokenFormat::kText;
  };
  if (data.tokenizer.empty() || !(is_text(data.path) || is_text(data.eval_path))) {
    return std::nullopt;
  }
  return Tokenizer::Load(data.tokenizer);
}

}  // namespace

std::string EvalSource(const DataConfig& data) {
  if (!data.eval_path.empty()) return data.eval_path;
  return fmt::format("the last {} of {} (data.eval_fraction)", data.eval_fraction, data.path);
}

RunData OpenRunData(const Config& config) {
  const DataConfig& data = config.data;
  const int64_t seq_len = SequenceLength(config);
  const TokenFormat format = ToTokenFormat(data.format);
  const std::optional<Tokenizer> tokenizer = TokenizerFor(data, format);
  const Tokenizer* encoder = tokenizer ? &*tokenizer : nullptr;
  TokenDataset whole =
      TokenDataset::Open(data.path, format, config.model.vocab_size, seq_len, encoder);
  if (!data.eval_path.empty()) {
    return {std::move(whole),
            TokenDataset::Open(data.eval_path, format, config.model.vocab_size, seq_len, encoder)};
  }
  if (data.eval_fraction > 0.0) {
    const TrainEvalSplit split = SplitFor(data, whole.size(), seq_len);
    TokenDataset train = whole.Slice(0, split.train_tokens, data.path);
    TokenDataset eval = whole.Slice(split.train_tokens, whole.size(), EvalSource(data));
    return {std::move(train), std::move(eval)};
  }
  return {std::move(whole), std::nullopt};
}

namespace {

// Tokens `path` holds: from file sizes, or by encoding text when there is a tokenizer.
int64_t TokensIn(const std::string& path, TokenFormat format, const Tokenizer* tokenizer) {
  if (tokenizer != nullptr && ResolveTokenFormat(path, format) == TokenFormat::kText) {
    return static_cast<int64_t>(ReadTextTokens(path, tokenizer).size());
  }
  return CountTokens(path, format);
}

}  // namespace

int64_t EvalBatchesFor(const Config& config) {
  const DataConfig& data = config.data;
  if (!HasEvalData(data)) return 0;
  const int64_t seq_len = SequenceLength(config);
  const TokenFormat format = ToTokenFormat(data.format);
  const std::optional<Tokenizer> tokenizer = TokenizerFor(data, format);
  const Tokenizer* encoder = tokenizer ? &*tokenizer : nullptr;
  const int64_t tokens =
      !data.eval_path.empty()
          ? TokensIn(data.eval_path, format, encoder)
          : SplitFor(data, TokensIn(data.path, format, encoder), seq_len).eval_tokens;
  const int64_t windows = NumEvalWindows(tokens, seq_len);
  const int64_t whole_batches = windows / config.train.batch_size;
  const int64_t wanted = config.train.eval_batches == 0 ? whole_batches : config.train.eval_batches;
  if (whole_batches < 1 || wanted > whole_batches) {
    BATON_FAIL(
        "held-out data {}: {} tokens make {} windows of {} (seq_len), {} whole batch(es) of {} "
        "(train.batch_size); {}",
        EvalSource(data), tokens, windows, seq_len, whole_batches, config.train.batch_size,
        config.train.eval_batches == 0
            ? std::string("evaluation needs at least one")
            : fmt::format("train.eval_batches asks for {}", config.train.eval_batches));
  }
  return wanted;
}

}  // namespace baton
