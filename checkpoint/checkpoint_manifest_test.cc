// Checkpoint metadata tests: entries, training state and manifest survive their JSON forms
// exactly; malformed input is refused with its source named.
#include "checkpoint/checkpoint_manifest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

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
  EXPECT_FALSE(ToJson(m).at("model").at("llama").contains("head_dim"));  // written as before
  CheckpointManifest apart = m;  // a head size set apart from the width (Qwen3's head_dim)
  apart.dims.head_size = 128;
  EXPECT_EQ(ToJson(apart).at("model").at("llama").at("head_dim"), 128);
  EXPECT_EQ(ManifestFromJson(ToJson(apart), "manifest.json").dims, apart.dims);
  CheckpointManifest qwen3 = apart;
  qwen3.dims.family = ModelFamily::kQwen3;
  EXPECT_EQ(ToJson(qwen3).at("model").at("llama").at("family"), "qwen3");
  EXPECT_EQ(ManifestFromJson(ToJson(qwen3), "manifest.json").dims, qwen3.dims);
  CheckpointManifest gpt = m;
  gpt.dims = {50257, 1024, 12, 12, 768};
  const nlohmann::json json = ToJson(gpt);
  EXPECT_FALSE(json.at("model").contains("llama"));  // GPT-2 manifests are written as before
  EXPECT_EQ(ManifestFromJson(json, "manifest.json").dims, gpt.dims);
  // Experts: every choice of model.moe comes back, and a Llama without them reads as before.
  EXPECT_FALSE(ToJson(m).at("model").contains("moe"));
  CheckpointManifest moe = m;
  moe.dims.moe = {8,     2,    512,  1,   256, true, 1, 2, MoeDims::Router::kTopkSoftmax,
                  false, 0.01, 1e-3, 1.25};
  EXPECT_EQ(ManifestFromJson(ToJson(moe), "manifest.json").dims, moe.dims);
  CheckpointManifest sigmoid = moe;
  sigmoid.dims.moe.router = MoeDims::Router::kSigmoidBias;
  sigmoid.dims.moe.aux_loss_coef = 0.0;
  sigmoid.dims.moe.bias_update_rate = 0.001;
  EXPECT_EQ(ManifestFromJson(ToJson(sigmoid), "manifest.json").dims, sigmoid.dims);
  nlohmann::json before = ToJson(moe);  // written before sigmoid_bias: no update rate
  before["model"]["moe"].erase("bias_update_rate");
  EXPECT_EQ(ManifestFromJson(before, "manifest.json").dims.moe.bias_update_rate, 0.0);
  nlohmann::json bad = ToJson(moe);
  bad["model"]["moe"]["router"] = "sinkhorn";
  EXPECT_THROW(ManifestFromJson(bad, "manifest.json"), Error);
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
              ::testing::HasSubstr("x/manifest.json: model.width: 4294968064 is out of range "
                                   "[-2147483648, 2147483647]"));
  nlohmann::json fraction = ToJson(SmallManifest());
  fraction["model"]["num_heads"] = 12.5;
  EXPECT_THAT(ManifestError(fraction),
              ::testing::HasSubstr("model.num_heads: expected an integer, got number 12.5"));
  nlohmann::json version = ToJson(SmallManifest());
  version["version"] = (uint64_t{1} << 32) + 1;
  EXPECT_THAT(ManifestError(version),
              ::testing::HasSubstr("x/manifest.json: version 4294967297 is not supported"));
  nlohmann::json negative = ToJson(SmallManifest());
  negative["files"][0]["bytes"] = -1;
  EXPECT_THAT(ManifestError(negative),
              ::testing::HasSubstr("files[0].bytes: -1 is out of range [0, "));
  nlohmann::json layer = ToJson(SmallManifest());
  layer["files"][0]["layer"] = uint64_t{1} << 32;
  EXPECT_THAT(ManifestError(layer), ::testing::HasSubstr("x/manifest.json: files[0].layer: "));
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
  EXPECT_THAT(error("scale", 0.0), ::testing::HasSubstr("x/state.json: loss_scaler.scale: must be "
                                                        "a positive number, got 0"));
  EXPECT_THAT(error("scale", -2.0), ::testing::HasSubstr("x/state.json: loss_scaler.scale"));
  EXPECT_THAT(error("clean_steps", -1),
              ::testing::HasSubstr("x/state.json: loss_scaler.clean_steps: -1 is out of range"));
  EXPECT_THAT(
      error("skipped_steps", 0.5),
      ::testing::HasSubstr("loss_scaler.skipped_steps: expected an integer, got number 0.5"));
  // JSON has no NaN: the value an editor leaves is a string, named by its key.
  EXPECT_EQ(error("scale", "NaN"),
            "x/state.json: loss_scaler.scale: expected a number, got string \"NaN\"");
}

// The step counts describe the checkpoint's steps: more skipped steps than steps resumed, then
// stopped with "optimizer steps are 1-based, got -4", naming neither the file nor the key.
TEST(CheckpointManifestTest, TrainingStateRefusesStepCountsPastItsStep) {
  TrainingState state;
  state.step = 20;
  state.loss_scaler = {65536.0, 5, 3};
  const auto error = [&](int64_t clean, int64_t skipped) {
    nlohmann::json j = ToJson(state);
    j["loss_scaler"]["clean_steps"] = clean;
    j["loss_scaler"]["skipped_steps"] = skipped;
    try {
      TrainingStateFromJson(j, "x/state.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error(0, 25),
            "x/state.json: loss_scaler.skipped_steps: 25 is more than the checkpoint's 20 steps "
            "(each skipped one is one of them)");
  EXPECT_THAT(error(18, 3), ::testing::HasSubstr("x/state.json: loss_scaler.clean_steps: 18 with "
                                                 "skipped_steps 3 is more than the checkpoint's "
                                                 "20 steps"));
  EXPECT_EQ(error(17, 3), "(no error)");  // every step skipped or clean since the last skip
  EXPECT_EQ(error(0, 20), "(no error)");  // every step skipped
}

// lr_segments decide where the run ends: a segment that ends at 2^63 - 1 trained towards an ETA
// of 712 billion hours. Each must start by the checkpoint's step and end within kMaxTrainSteps.
TEST(CheckpointManifestTest, LrSegmentsPastTheRunsBoundsAreRefusedNamingTheSegment) {
  TrainingState state;
  state.step = 20;
  const auto error = [&](const char* segments) {
    nlohmann::json j = ToJson(state);
    j["lr_segments"] = nlohmann::json::parse(segments);
    try {
      TrainingStateFromJson(j, "x/state.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error("[[0, 9223372036854775807]]"),
            "x/state.json: lr_segments[0]: [0, 9223372036854775807] must end after it starts and "
            "at most at step 1000000000");
  EXPECT_THAT(error("[[0, 100], [30, 200]]"),
              ::testing::HasSubstr("x/state.json: lr_segments[1]: [30, 200] starts after this "
                                   "checkpoint's step 20"));
  EXPECT_THAT(error("[[0, 100], [\"20\", 200]]"),
              ::testing::HasSubstr("x/state.json: lr_segments[1][0]: expected an integer, got "
                                   "string \"20\""));
  EXPECT_EQ(error("[[0, 10], [10, 30], [20, 1000000000]]"), "(no error)");
}

// Every field of state.json read with the wrong type is named by the file and its key path,
// never by nlohmann's "[json.exception.type_error.302] ...".
TEST(CheckpointManifestTest, TrainingStateTypeErrorsNameTheKeyPath) {
  TrainingState state;
  state.step = 3;
  Rng rng(5);
  state.rng = rng.state();
  const auto error = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = ToJson(state);
    edit(j);
    try {
      TrainingStateFromJson(j, "x/state.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](auto& j) { j["step"] = "3"; }, "x/state.json: step: expected an integer"},
      {[](auto& j) { j["data"]["seed"] = -1; }, "x/state.json: data.seed: expected an integer in"},
      {[](auto& j) { j["data"] = 5; }, "x/state.json: data: expected an object, got number 5"},
      {[](auto& j) { j.erase("loss_scaler"); },
       "x/state.json: loss_scaler: missing; expected an object"},
      {[](auto& j) { j["rng"]["has_spare"] = "yes"; },
       "x/state.json: rng.has_spare: expected a boolean, got string \"yes\""},
      {[](auto& j) { j["rng"]["s"][2] = 7; }, "x/state.json: rng.s[2]: expected a string"},
      {[](auto& j) { j["rng"]["spare_bits"] = "12"; },
       "x/state.json: rng.spare_bits: expected 16 hex digits, got string \"12\""},
      {[](auto& j) {
         j["lr_segments"] = {{0, 10}, 5};
       },
       "x/state.json: lr_segments[1]: expected [from, to], got number 5"},
  };
  for (const auto& [edit, expected] : cases) {
    const std::string message = error(edit);
    EXPECT_THAT(message, ::testing::HasSubstr(expected));
    EXPECT_THAT(message, ::testing::Not(::testing::HasSubstr("json.exception")));
  }
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
