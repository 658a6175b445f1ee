// `baton plan` in process: the tables for a config that plans, and errors that name the config.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/files.h"
#include "core/temp_dir.h"
#include "launcher/run.h"

namespace baton {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string PlanError(const PlanOptions& options) {
  std::ostringstream out;
  try {
    PlanCommand(options, out);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The config loads (each value is in range) but cannot be planned: the error names the file the
// values came from, not only the planner's view of them.
TEST(PlanCommandTest, AConfigThatCannotBePlannedIsAnErrorNamingTheConfigFile) {
  test_util::TempDir dir;
  PlanOptions options;
  options.config.path = dir / "deep.yaml";
  std::ofstream(options.config.path) << "model:\n  num_layers: 2\ndata:\n  path: x.txt\n"
                                        "parallel:\n  stages: 8\n";
  const std::string error = PlanError(options);
  EXPECT_THAT(error, StartsWith(options.config.path + ": plan: "));
  EXPECT_THAT(error, HasSubstr("cannot cut a 4-layer graph into 8 pipeline parts"));

  options.config.overrides = {"parallel.stages=2"};
  std::ostringstream out;
  EXPECT_EQ(PlanCommand(options, out), 0);
  EXPECT_THAT(out.str(), HasSubstr("stage"));
}

// A Hugging Face Llama folder as model.init_from: plan sees the model its config.json describes
// (tests/fixtures/llama-hf: vocab 96, width 32, 2 layers, 4 heads over 2, SwiGLU 48, untied),
// whatever the YAML's dims, as run and eval do.
TEST(PlanCommandTest, AHuggingFaceLlamaFolderGivesTheModel) {
  test_util::TempDir dir;
  PlanOptions options;
  options.config.path = dir / "from-hf.yaml";
  std::ofstream(options.config.path) << "model:\n  init_from: " BATON_SOURCE_DIR
                                        "/tests/fixtures/llama-hf\n  context: 16\n"
                                        "data:\n  path: x.bin\nparallel:\n  stages: 2\n";
  options.format = "json";
  std::ostringstream out;
  ASSERT_EQ(PlanCommand(options, out), 0);
  const nlohmann::json plan = nlohmann::json::parse(out.str());
  // wte 96x32; per block ln 32, c_attn 32x64, c_proj 32x32, ln 32, c_fc 32x96, c_proj 48x32;
  // ln_f 32 and lm_head 96x32.
  EXPECT_EQ(plan.at("parameters").get<int64_t>(), 96 * 32 + 2 * 7744 + 32 + 96 * 32);
}

// A copy of tests/fixtures/llama-hf in `dir`, its config.json edited by `edit`; and a YAML
// config at dir/from-hf.yaml that starts from it.
PlanOptions EditedHfFolder(const test_util::TempDir& dir,
                           const std::function<void(nlohmann::json&)>& edit) {
  namespace fs = std::filesystem;
  const std::string folder = dir / "hf";
  fs::create_directories(folder);
  for (const auto& entry : fs::directory_iterator(BATON_SOURCE_DIR "/tests/fixtures/llama-hf")) {
    fs::copy_file(entry.path(), folder / entry.path().filename());
  }
  nlohmann::json config = nlohmann::json::parse(ReadFileToString(folder + "/config.json"));
  edit(config);
  fs::permissions(folder + "/config.json", fs::perms::owner_write, fs::perm_options::add);
  WriteFileAtomically(folder + "/config.json", config.dump(2));
  PlanOptions options;
  options.config.path = dir / "from-hf.yaml";
  std::ofstream(options.config.path)
      << "model:\n  init_from: " << folder << "\n  context: 16\ndata:\n  path: x.bin\n";
  options.format = "json";
  return options;
}

// num_hidden_layers 2^32 + 2 planned a 2-layer model (narrowed to int on the way); it is an
// error naming config.json and the key.
TEST(PlanCommandTest, AHuggingFaceSizeBeyondAnIntIsAnErrorNotAWrappedModel) {
  test_util::TempDir dir;
  const PlanOptions options =
      EditedHfFolder(dir, [](nlohmann::json& c) { c["num_hidden_layers"] = 4294967298; });
  EXPECT_THAT(PlanError(options), HasSubstr(dir / "hf/config.json: num_hidden_layers: 4294967298 "
                                                  "is out of range [1, 2147483647]"));
  // Within an int but beyond what a config may hold: named as config.json's.
  test_util::TempDir deep;
  const PlanOptions deep_options =
      EditedHfFolder(deep, [](nlohmann::json& c) { c["num_hidden_layers"] = 5000; });
  const std::string error = PlanError(deep_options);
  EXPECT_THAT(error, HasSubstr(deep / "hf/config.json describes a model Baton cannot take: "));
  EXPECT_THAT(error, HasSubstr("num_layers"));
}

// docs/safetensors.md accepts architectures ["LlamaForCausalLM"] without model_type: the folder
// gives the model, as one with model_type llama does.
TEST(PlanCommandTest, AHuggingFaceFolderNamedByArchitecturesAloneGivesTheModel) {
  test_util::TempDir dir;
  const PlanOptions options = EditedHfFolder(dir, [](nlohmann::json& c) { c.erase("model_type"); });
  std::ostringstream out;
  ASSERT_EQ(PlanCommand(options, out), 0);
  EXPECT_EQ(nlohmann::json::parse(out.str()).at("parameters").get<int64_t>(),
            96 * 32 + 2 * 7744 + 32 + 96 * 32);
}

}  // namespace
}  // namespace baton
