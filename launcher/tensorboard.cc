#include "launcher/tensorboard.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/files.h"
#include "core/hash.h"
#include "core/units.h"
#include "launcher/step_metrics.h"

namespace baton {
namespace {

void PutVarint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

template <typename T>
void PutFixed(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out.append(bytes, sizeof(T));
}

// Field `number` with wire type `wire`: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
void PutTag(std::string& out, int number, int wire) {
  PutVarint(out, static_cast<uint64_t>(number) << 3 | static_cast<uint64_t>(wire));
}

void PutBytes(std::string& out, int number, std::string_view bytes) {
  PutTag(out, number, 2);
  PutVarint(out, bytes.size());
  out.append(bytes);
}

uint32_t MaskedCrc(std::string_view bytes) {
  const uint32_t crc = Crc32c(bytes.data(), bytes.size());
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

}  // namespace

std::string EncodeScalarEvent(double wall_time, int64_t step,
                              const std::vector<std::pair<std::string, float>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    PutBytes(v, 1, tag);  // Summary.Value.tag
    PutTag(v, 2, 5);      // Summary.Value.simple_value (float)
    PutFixed(v, value);
    PutBytes(summary, 1, v);  // Summary.value
  }
  std::string event;
  PutTag(event, 1, 1);  // Event.wall_time (double)
  PutFixed(event, wall_time);
  PutTag(event, 2, 0);  // Event.step (int64)
  PutVarint(event, static_cast<uint64_t>(step));
  PutBytes(event, 5, summary);  // Event.summary
  return event;
}

std::string EncodeFileVersionEvent(double wall_time) {
  std::string event;
  PutTag(event, 1, 1);
  PutFixed(event, wall_time);
  PutBytes(event, 3, "brain.Event:2");  // Event.file_version
  return event;
}

std::string FrameRecord(std::string_view data) {
  std::string record;
  std::string length;
  PutFixed(length, static_cast<uint64_t>(data.size()));
  record += length;
  PutFixed(record, MaskedCrc(length));
  record.append(data);
  PutFixed(record, MaskedCrc(data));
  return record;
}

TensorBoardLog::TensorBoardLog(const std::string& dir) {
  MakeDirectories(dir);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const double now = WallSeconds();
  path_ = fmt::format("{}/events.out.tfevents.{}.{}.{}", dir, static_cast<int64_t>(now), host,
                      getpid());
  fd_ = OpenOutputFile(path_, OutputMode::kReplace);  // never through a planted link
  Append(FrameRecord(EncodeFileVersionEvent(now)));
}

TensorBoardLog::~TensorBoardLog() {
  if (fd_ >= 0) close(fd_);
}

void TensorBoardLog::Write(const JobStep& step) {
  std::vector<std::pair<std::string, float>> scalars;
  const auto add = [&](const std::string& tag, double value) {
    if (std::isfinite(value)) scalars.emplace_back(tag, static_cast<float>(value));
  };
  const WorkerReport& head = step.head;
  add("loss", head.loss);
  for (const char* key : {"eval_loss", "lr", "grad_norm", "tokens_per_s", "loss_scale"}) {
    const auto it = head.metrics.find(key);
    if (it != head.metrics.end()) add(key, it->second);
  }
  for (const auto& [rank, peaks] : step.memory_peak) {
    const auto key = step.rank_keys.find(rank);
    const auto total = peaks.find("total");
    if (total == peaks.end()) continue;
    add("memory_peak/" + (key != step.rank_keys.end() ? key->second : fmt::format("stage{}", rank)),
        static_cast<double>(total->second) / (1024.0 * 1024.0));
  }
  Append(FrameRecord(EncodeScalarEvent(WallSeconds(), step.step, scalars)));
}

void TensorBoardLog::Append(const std::string& record) {
  WriteAll(fd_, record.data(), record.size(), path_);
}

}  // namespace baton
