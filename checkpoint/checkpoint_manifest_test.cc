// Checkpoint metadata tests: entries, training state and manifest survive their JSON forms
// exactly; malformed input is refused with its source named.
#include "checkpoint/checkpoint_manifest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"

namespace baton {
namespace {

TEST(CheckpointManifestTest, FileEntriesSurviveTheTripToRankZero) {
  const std::vector<CheckpointFileEntry> entries = {
      {"layer-0.safetensors", 1234, 0xfedcba9876543210ull, 0, 0},
      {"layer-7.safetensors", 0, 0, 7, 3},
      {"state.json", 99, 42, -1, -1}};
  EXPECT_EQ(DecodeFileEntries(EncodeFileEntries(entries)), entries);
  EXPECT_THROW(DecodeFileEntries("{\"name\": 1}"), Error);
  EXPECT_THROW(DecodeFileEntries(R"([{"name":"../x","bytes":1,"fnv1a64":"0000000000000000"}])"),
               Error);
  EXPECT_THROW(DecodeFileEntries(R"([{"name":"x","bytes":1,"fnv1a64":"12"}])"), Error);
}

TEST(CheckpointManifestTest, TrainingStateRoundTripsBitExactly) {
  TrainingState state;
  state.step = 123;
  state.seed = std::numeric_limits<uint64_t>::max();
  state.loss_scaler = {std::nextafter(65536.0, 0.0), 17, 2};
  Rng rng(5);
  rng.NextNormal();  // leaves a spare normal
  state.rng = rng.state();
  state.config = {{"train", {{"steps", 200}}}};
  const TrainingState back =
      TrainingStateFromJson(nlohmann::json::parse(ToJson(state).dump()), "state.json");
  EXPECT_EQ(back.step, 123);
  EXPECT_EQ(back.seed, state.seed);
  EXPECT_EQ(back.loss_scaler.scale, state.loss_scaler.scale);
  EXPECT_EQ(back.loss_scaler.clean, 17);
  EXPECT_EQ(back.loss_scaler.skipped, 2);
  ASSERT_TRUE(back.rng.has_value());
  Rng a(0), b(0);
  a.set_state(*state.rng);
  b.set_state(*back.rng);
  EXPECT_EQ(a.NextNormal(), b.NextNormal());  // the spare came back
  EXPECT_EQ(a.NextU64(), b.NextU64());
  EXPECT_EQ(back.config, state.config);
  EXPECT_EQ(ToJson(state)["data"]["next_step"], 124);
  EXPECT_TRUE(back.lr_segments.empty());
  EXPECT_FALSE(ToJson(state).contains("lr_segments"));
}

TEST(CheckpointManifestTest, LrExtensionsRoundTripAndOutOfOrderOnesAreRefused) {
  TrainingState state;
  state.step = 150;
  state.lr_segments = {{0, 100}, {100, 160}, {150, 400}};
  const nlohmann::json j = ToJson(state);
  EXPECT_EQ(TrainingStateFromJson(j, "state.json").lr_segments, state.lr_segments);
  for (const char* bad : {"[[0, 100], [100, 90]]", "[[0, 100], [100, 160], [100, 200]]",
                          "[[0, 100], [100]]", "{}", "[[5, 100]]", "[[0, 0]]"}) {
    nlohmann::json broken = j;
    broken["lr_segments"] = nlohmann::json::parse(bad);
    EXPECT_THROW(
        {
          try {
            TrainingStateFromJson(broken, "state.json");
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("lr_segments"), std::string::npos) << e.what();
            throw;
          }
        },
        Error)
        << bad;
  }
}

TEST(CheckpointManifestTest, ManifestRoundTripsAndRefusesOtherFormats) {
  CheckpointManifest m;
  m.step = 8;
  m.dims = {50257, 1024, 12, 12, 768};
  m.layer_names = {"embedding", "block.0", "head"};
  m.files = {{"layer-0.safetensors", 10, 11, 0, 0}, {"state.json", 5, 6, -1, -1}};
  const CheckpointManifest back = ManifestFromJson(ToJson(m), "manifest.json");
  EXPECT_EQ(back.step, 8);
  EXPECT_EQ(back.dims, m.dims);
  EXPECT_EQ(back.layer_names, m.layer_names);
  EXPECT_EQ(back.files, m.files);

  nlohmann::json other = ToJson(m);
  other["version"] = 2;
  EXPECT_THAT([&] { ManifestFromJson(other, "x/manifest.json"); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("x/manifest.json: version 2")));
  EXPECT_THROW(ManifestFromJson(nlohmann::json::object(), "m"), Error);
}

TEST(CheckpointManifestTest, LlamaDimsRoundTripAndAGptManifestReadsAsGpt) {
  CheckpointManifest m;
  m.step = 3;
  m.dims = {128256, 8192, 16, 32, 2048};
  m.dims.family = ModelFamily::kLlama;
  m.dims.num_kv_heads = 8;
  m.dims.mlp_hidden = 8192;
  m.dims.norm_eps = 1e-5f;
  m.dims.rope = {500000.0, 32.0, 1.0, 4.0, 8192};
  m.dims.tie_embeddings = false;
  m.layer_names = {"embedding", "block.0", "head"};
  const CheckpointManifest back = ManifestFromJson(ToJson(m), "manifest.json");
  EXPECT_EQ(back.dims, m.dims);
  EXPECT_TRUE(back.dims.llama());
  CheckpointManifest gpt = m;
  gpt.dims = {50257, 1024, 12, 12, 768};
  const nlohmann::json json = ToJson(gpt);
  EXPECT_FALSE(json.at("model").contains("llama"));  // GPT-2 manifests are written as before
  EXPECT_EQ(ManifestFromJson(json, "manifest.json").dims, gpt.dims);
}

CheckpointManifest SmallManifest() {
  CheckpointManifest m;
  m.step = 8;
  m.dims = {50257, 1024, 12, 12, 768};
  m.layer_names = {"embedding", "block.0", "head"};
  m.files = {{"layer-0.safetensors", 10, 11, 0, 0}, {"state.json", 5, 6, -1, -1}};
  return m;
}

std::string ManifestError(const nlohmann::json& json) {
  try {
    ManifestFromJson(json, "x/manifest.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// nlohmann's get<int>() narrows silently: a width of 2^32 + 768 read as 768 would pass the
// compatibility check with a width-768 model. (Found by tests/checkpoint_fuzz_test.)
TEST(CheckpointManifestTest, NumbersThatDoNotFitTheirFieldAreRefusedNotNarrowed) {
  nlohmann::json wide = ToJson(SmallManifest());
  wide["model"]["width"] = (uint64_t{1} << 32) + 768;
  EXPECT_THAT(ManifestError(wide),
              ::testing::HasSubstr("x/manifest.json: model.width must be an integer in "
                                   "[-2147483648, 2147483647], got 4294968064"));
  nlohmann::json fraction = ToJson(SmallManifest());
  fraction["model"]["num_heads"] = 12.5;
  EXPECT_THAT(ManifestError(fraction), ::testing::HasSubstr("model.num_heads must be an integer"));
  nlohmann::json version = ToJson(SmallManifest());
  version["version"] = (uint64_t{1} << 32) + 1;
  EXPECT_THAT(ManifestError(version), ::testing::HasSubstr("x/manifest.json: version must be"));
  nlohmann::json negative = ToJson(SmallManifest());
  negative["files"][0]["bytes"] = -1;
  EXPECT_THAT(ManifestError(negative),
              ::testing::HasSubstr("the bytes of layer-0.safetensors must be an integer in [0, "));
  nlohmann::json layer = ToJson(SmallManifest());
  layer["files"][0]["layer"] = uint64_t{1} << 32;
  EXPECT_THAT(ManifestError(layer), ::testing::HasSubstr("the layer of layer-0.safetensors"));
}

// `baton export` reads the dims without a run's model to compare them with: they must describe a
// model (positive sizes, width a multiple of heads), and an error names the manifest.
TEST(CheckpointManifestTest, ManifestOfAnImpossibleModelIsRefusedNamingIt) {
  nlohmann::json zero = ToJson(SmallManifest());
  zero["model"]["context"] = 0;
  EXPECT_THAT(ManifestError(zero), ::testing::HasSubstr("x/manifest.json: model: "));
  EXPECT_THAT(ManifestError(zero), ::testing::HasSubstr("context must be positive, got 0"));
  nlohmann::json heads = ToJson(SmallManifest());
  heads["model"]["num_heads"] = 7;
  EXPECT_THAT(ManifestError(heads), ::testing::HasSubstr("x/manifest.json: model: "));
}

TEST(CheckpointManifestTest, TrainingStateRefusesALossScalerTheTrainerCannotUse) {
  TrainingState state;
  state.step = 3;
  state.loss_scaler = {65536.0, 2, 0};
  const auto error = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json j = ToJson(state);
    j["loss_scaler"][key] = value;
    try {
      TrainingStateFromJson(j, "x/state.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_THAT(error("scale", 0.0), ::testing::HasSubstr("x/state.json: loss_scaler.scale must be "
                                                        "a positive number, got 0"));
  EXPECT_THAT(error("scale", -2.0), ::testing::HasSubstr("x/state.json: loss_scaler.scale"));
  EXPECT_THAT(error("clean_steps", -1), ::testing::HasSubstr("x/state.json: loss_scaler's step"));
  EXPECT_THAT(error("skipped_steps", 0.5),
              ::testing::HasSubstr("loss_scaler.skipped_steps must be an integer"));
}

TEST(CheckpointManifestTest, StepDirectoryNames) {
  EXPECT_EQ(StepDirName(40), "step-40");
  EXPECT_EQ(ParseStepDirName("step-40"), 40);
  EXPECT_EQ(ParseStepDirName("step-"), std::nullopt);
  EXPECT_EQ(ParseStepDirName("step-4x"), std::nullopt);
  EXPECT_EQ(ParseStepDirName("step-40.tmp"), std::nullopt);
  EXPECT_EQ(ParseStepDirName("latest"), std::nullopt);
  EXPECT_EQ(LayerFileName(3), "layer-3.safetensors");
  EXPECT_EQ(CheckpointsRoot("out"), "out/checkpoints");
}

}  // namespace
}  // namespace baton
