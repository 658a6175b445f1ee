#include "worker/run_data.h"

#include <fmt/format.h>

#include "core/error.h"

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

// What the held-out data is called in messages.
std::string EvalSource(const DataConfig& data) {
  if (!data.eval_path.empty()) return data.eval_path;
  return fmt::format("the last {} of {} (data.eval_fraction)", data.eval_fraction, data.path);
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

}  // namespace

RunData OpenRunData(const Config& config) {
  const DataConfig& data = config.data;
  const int64_t seq_len = SequenceLength(config);
  const TokenFormat format = ToTokenFormat(data.format);
  TokenDataset whole = TokenDataset::Open(data.path, format, config.model.vocab_size, seq_len);
  if (!data.eval_path.empty()) {
    return {std::move(whole),
            TokenDataset::Open(data.eval_path, format, config.model.vocab_size, seq_len)};
  }
  if (data.eval_fraction > 0.0) {
    const TrainEvalSplit split = SplitFor(data, whole.size(), seq_len);
    TokenDataset train = whole.Slice(0, split.train_tokens, data.path);
    TokenDataset eval = whole.Slice(split.train_tokens, whole.size(), EvalSource(data));
    return {std::move(train), std::move(eval)};
  }
  return {std::move(whole), std::nullopt};
}

int64_t EvalBatchesFor(const Config& config) {
  const DataConfig& data = config.data;
  if (!HasEvalData(data)) return 0;
  const int64_t seq_len = SequenceLength(config);
  const TokenFormat format = ToTokenFormat(data.format);
  const int64_t tokens = !data.eval_path.empty()
                             ? CountTokens(data.eval_path, format)
                             : SplitFor(data, CountTokens(data.path, format), seq_len).eval_tokens;
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
