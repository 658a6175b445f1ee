// TensorBoard event files: the framing and the Event encoding read back by a decoder written
// here from the format's definition (tests/tensorboard_check.py reads them with TensorBoard's).
#include "launcher/tensorboard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/hash.h"
#include "core/temp_dir.h"
#include "launcher/step_metrics.h"

namespace baton {
namespace {

uint32_t Masked(std::string_view bytes) {
  const uint32_t crc = Crc32c(bytes.data(), bytes.size());
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

template <typename T>
T Fixed(std::string_view bytes, size_t at) {
  T value;
  EXPECT_LE(at + sizeof(T), bytes.size());
  std::memcpy(&value, bytes.data() + at, sizeof(T));
  return value;
}

// The records of a TFRecord file, each framing checked.
std::vector<std::string> Records(const std::string& bytes) {
  std::vector<std::string> records;
  size_t at = 0;
  while (at < bytes.size()) {
    const std::string_view length_bytes(bytes.data() + at, 8);
    const uint64_t length = Fixed<uint64_t>(bytes, at);
    EXPECT_EQ(Fixed<uint32_t>(bytes, at + 8), Masked(length_bytes));
    const std::string data = bytes.substr(at + 12, length);
    EXPECT_EQ(Fixed<uint32_t>(bytes, at + 12 + length), Masked(data));
    records.push_back(data);
    at += 16 + length;
  }
  return records;
}

uint64_t Varint(std::string_view bytes, size_t& at) {
  uint64_t value = 0;
  for (int shift = 0;; shift += 7) {
    const auto byte = static_cast<uint8_t>(bytes.at(at++));
    value |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) return value;
  }
}

// A decoded Event: its wall time, step, file_version and scalars.
struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::map<std::string, float> scalars;
};

// Calls fn(field, wire, at, length) for every field of a message; length for wire type 2.
template <typename Fn>
void Fields(std::string_view bytes, Fn fn) {
  size_t at = 0;
  while (at < bytes.size()) {
    const uint64_t key = Varint(bytes, at);
    const int field = static_cast<int>(key >> 3);
    const int wire = static_cast<int>(key & 7);
    size_t length = 0;
    if (wire == 2) length = Varint(bytes, at);
    const size_t start = at;
    if (wire == 0) {
      fn(field, wire, start, Varint(bytes, at));
      continue;
    }
    fn(field, wire, start, length);
    at += wire == 1 ? 8 : wire == 5 ? 4 : length;
  }
}

Event Decode(const std::string& bytes) {
  Event event;
  Fields(bytes, [&](int field, int wire, size_t at, uint64_t value) {
    if (field == 1 && wire == 1) event.wall_time = Fixed<double>(bytes, at);
    if (field == 2 && wire == 0) event.step = static_cast<int64_t>(value);
    if (field == 3 && wire == 2) event.file_version = bytes.substr(at, value);
    if (field != 5 || wire != 2) return;
    const std::string summary = bytes.substr(at, value);
    Fields(summary, [&](int, int, size_t v_at, uint64_t v_length) {
      const std::string v = summary.substr(v_at, v_length);
      std::string tag;
      float simple = NAN;
      Fields(v, [&](int f, int w, size_t a, uint64_t l) {
        if (f == 1 && w == 2) tag = v.substr(a, l);
        if (f == 2 && w == 5) simple = Fixed<float>(v, a);
      });
      event.scalars[tag] = simple;
    });
  });
  return event;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

TEST(TensorBoardTest, AnEventRoundTripsThroughItsRecord) {
  const std::string event = EncodeScalarEvent(1.5e9, 300, {{"loss", 2.25f}, {"lr", 6e-4f}});
  const std::vector<std::string> records = Records(FrameRecord(event));
  ASSERT_EQ(records.size(), 1u);
  const Event decoded = Decode(records[0]);
  EXPECT_EQ(decoded.wall_time, 1.5e9);
  EXPECT_EQ(decoded.step, 300);
  EXPECT_EQ(decoded.scalars, (std::map<std::string, float>{{"loss", 2.25f}, {"lr", 6e-4f}}));
  EXPECT_EQ(Decode(EncodeFileVersionEvent(7.0)).file_version, "brain.Event:2");
}

TEST(TensorBoardTest, TheMetricsLogWritesEveryStepsScalarsAfterTheFileVersion) {
  const TempDir temp("baton-tensorboard");
  {
    MetricsLog log(temp.path(), /*append=*/false, /*tensorboard=*/true);
    for (int64_t s = 1; s <= 2; ++s) {
      JobStep step;
      step.step = s;
      step.head.loss = 5.0 - static_cast<double>(s);
      step.head.metrics = {{"lr", 1e-3}, {"grad_norm", 0.5}, {"tokens_per_s", 1000.0}};
      if (s == 2) step.head.metrics["eval_loss"] = 3.5;
      step.memory_peak = {{0, {{"total", 3 << 20}}}, {1, {{"total", 1 << 20}}}};
      step.rank_keys = {{0, "stage0"}, {1, "stage1"}};
      log.Write(step);
    }
    JobStep nan_loss;  // a stage that holds no head has a NaN loss: left out
    nan_loss.step = 3;
    nan_loss.head.loss = std::nan("");
    log.Write(nan_loss);
  }
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(temp / "tensorboard")) {
    files.push_back(entry.path().string());
  }
  ASSERT_EQ(files.size(), 1u);
  EXPECT_NE(files[0].find("events.out.tfevents."), std::string::npos);
  const std::vector<std::string> records = Records(ReadAll(files[0]));
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(Decode(records[0]).file_version, "brain.Event:2");
  const Event second = Decode(records[2]);
  EXPECT_EQ(second.step, 2);
  EXPECT_EQ(second.scalars.at("loss"), 3.0f);
  EXPECT_EQ(second.scalars.at("eval_loss"), 3.5f);
  EXPECT_EQ(second.scalars.at("memory_peak/stage0"), 3.0f);  // MiB
  EXPECT_EQ(second.scalars.at("memory_peak/stage1"), 1.0f);
  EXPECT_EQ(Decode(records[1]).scalars.count("eval_loss"), 0u);
  EXPECT_TRUE(Decode(records[3]).scalars.empty());
  EXPECT_GT(second.wall_time, 1.6e9);
}

}  // namespace
}  // namespace baton
