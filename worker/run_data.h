// A run's token streams as its config names them (docs/data.md): the training stream, and the
// held-out stream evaluation reads (data.eval_path, or the tail fraction data.eval_fraction of
// the training stream, which training then never samples from).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "config/config.h"
#include "data/data.h"

namespace baton {

struct RunData {
  TokenDataset train;
  std::optional<TokenDataset> eval;  // when the config names held-out data
};

// What the held-out data is called in messages: data.eval_path, or "the last F of PATH
// (data.eval_fraction)".
std::string EvalSource(const DataConfig& data);

// Opens (reads or maps) the streams; errors name the file.
RunData OpenRunData(const Config& config);

// How many batches of train.batch_size windows one evaluation reads: train.eval_batches, or
// every whole batch the held-out data holds when that is 0. Counted from file sizes, without
// reading the data; an error naming the source and its counts when the held-out data is too
// short for one batch or for eval_batches of them. 0 when the config names no held-out data.
int64_t EvalBatchesFor(const Config& config);

}  // namespace baton
