// TensorBoard event files (output.tensorboard): the launcher's per-step scalars, written as the
// steps complete, beside metrics.jsonl (docs/outputs.md, "TensorBoard").
//
// The format, as TensorBoard reads it: a file `events.out.tfevents.<unix time>.<host>` of
// TFRecords (little-endian u64 length, its masked CRC-32C, the bytes, their masked CRC-32C), each
// a serialized tensorflow.Event: the first carries file_version "brain.Event:2", every other one
// a wall time, a step and a Summary of scalar values (tag, simple_value). The protobuf is
// encoded here by hand: five fields of two small messages.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace baton {

struct JobStep;

// One Event's bytes: {wall_time, step, summary {value {tag, simple_value}}...}.
std::string EncodeScalarEvent(double wall_time, int64_t step,
                              const std::vector<std::pair<std::string, float>>& scalars);
// The first Event of a file: {wall_time, file_version: "brain.Event:2"}.
std::string EncodeFileVersionEvent(double wall_time);
// One TFRecord around `data`.
std::string FrameRecord(std::string_view data);

// Appends events to a new file under `dir` (created if needed). Throws naming the path when it
// cannot be written. Not thread-safe.
class TensorBoardLog {
 public:
  explicit TensorBoardLog(const std::string& dir);
  ~TensorBoardLog();
  TensorBoardLog(const TensorBoardLog&) = delete;
  TensorBoardLog& operator=(const TensorBoardLog&) = delete;

  // The step's scalars: loss, eval_loss (when evaluated), lr, grad_norm, tokens_per_s,
  // loss_scale, and every rank's peak memory in MiB as memory_peak/<rank key> ("stage1",
  // "stage1_replica0"); non-finite values are left out.
  void Write(const JobStep& step);
  const std::string& path() const { return path_; }

 private:
  void Append(const std::string& record);
  std::string path_;
  int fd_ = -1;
};

}  // namespace baton
