// The config's protobuf form: every schema key has its field, and configs survive the trip.
#include "config/config_proto.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "config/config_schema.h"
#include "core/error.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

Config RoundTrip(const Config& config) {
  pb::RunConfig message;
  ToProto(config, &message);
  return FromProto(message);
}

std::string FromProtoError(const pb::RunConfig& message) {
  try {
    FromProto(message);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for " << message.ShortDebugString();
  return "";
}

TEST(ConfigProtoTest, EverySchemaKeyHasItsFieldAndNoFieldIsExtra) {
  const google::protobuf::Descriptor* root = pb::RunConfig::descriptor();
  const auto sections = config_internal::SchemaKeys();
  EXPECT_EQ(root->field_count(), static_cast<int>(sections.size()));
  for (const auto& [section, keys] : sections) {
    const google::protobuf::FieldDescriptor* field = root->FindFieldByName(section);
    ASSERT_NE(field, nullptr) << section;
    const google::protobuf::Descriptor* message = field->message_type();
    ASSERT_NE(message, nullptr) << section;
    EXPECT_EQ(message->field_count(), static_cast<int>(keys.size())) << section;
    for (const std::string& key : keys) {
      EXPECT_NE(message->FindFieldByName(ProtoFieldName(key)), nullptr) << section << "." << key;
    }
  }
}

TEST(ConfigProtoTest, ShippedConfigsComeBackEqual) {
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(BATON_SOURCE_DIR "/configs")) {
    if (entry.path().extension() != ".yaml") continue;
    const Config config = LoadConfig(entry.path().string());
    EXPECT_EQ(RoundTrip(config), config) << entry.path();
    ++seen;
  }
  EXPECT_GE(seen, 3);
}

TEST(ConfigProtoTest, EveryKindOfFieldComesBackEqual) {
  Config config = ParseConfigString(
      "model: {preset: custom, layers: [embedding, block, mlp_block, head]}\n"
      "data: {path: corpus.bin, format: bin, seq_len: 64}\n"
      "train: {seed: 18446744073709551, lr_schedule: constant, beta2: 0.999}\n"
      "parallel: {stages: 2, schedule: zb-h1, checkpoint: 'every:2', timeout_s: 2.5}\n"
      "precision: {dtype: fp16}\n"
      "output: {report: r.json, checkpoint_every: 7}\n",
      "x.yaml");
  EXPECT_EQ(RoundTrip(config), config);
  config.parallel.checkpoint = CheckpointPolicy::Selective();
  EXPECT_EQ(RoundTrip(config), config);
}

TEST(ConfigProtoTest, OutOfRangeValueNamesItsKey) {
  pb::RunConfig message;
  ToProto(ParseConfigString("data: {path: c.txt}\n", "x.yaml"), &message);
  message.mutable_train()->set_steps(0);
  EXPECT_THAT(FromProtoError(message), HasSubstr("train.steps"));
}

TEST(ConfigProtoTest, UnknownChoiceNamesItsKey) {
  pb::RunConfig message;
  ToProto(ParseConfigString("data: {path: c.txt}\n", "x.yaml"), &message);
  message.mutable_parallel()->set_schedule("2f2b");
  EXPECT_THAT(FromProtoError(message), HasSubstr("parallel.schedule: '2f2b'"));
}

}  // namespace
}  // namespace baton
