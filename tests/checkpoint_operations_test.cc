// Background checkpoints (output.async_checkpoint; docs/checkpoints.md) with real processes: the
// files written in the background are the synchronous save's byte for byte, under pipeline
// stages and under replicas with ZeRO-1 with retention; a job killed in the middle of a background
// write leaves the previous checkpoint `latest`, and resuming from it ends with the checksum of a
// run never interrupted; a write that stalls shows in the rank table; SIGTERM while saving in the
// background after every step ends cleanly with a complete `latest`; a write that fails fails the
// job, naming the step and the path.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "tests/baton_process.h"
#include "tests/run_report.h"

namespace baton::testing {
namespace {

namespace fs = std::filesystem;

nlohmann::json Train(const std::string& dir, const std::vector<std::string>& sets,
                     const std::vector<std::string>& more = {}) {
  std::vector<std::string> args;
  for (const std::string& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  args.insert(args.end(), more.begin(), more.end());
  return RunAndReport("configs/gpt-tiny.yaml", dir, args);
}

// The layer files a step's manifest lists, name -> checksum (state.json, which records the
// config, is left out: the two runs' configs differ in output.dir and async_checkpoint).
std::map<std::string, std::string> LayerFiles(const std::string& step_dir) {
  std::map<std::string, std::string> files;
  const nlohmann::json manifest = ReadJson(step_dir + "/manifest.json");
  for (const nlohmann::json& f : manifest.at("files")) {
    if (!f.contains("layer")) continue;
    files[f.at("name").get<std::string>()] = f.at("fnv1a64").get<std::string>();
  }
  return files;
}

// Steps of the report that carry checkpoint_s.
std::vector<int64_t> SavedSteps(const nlohmann::json& report) {
  std::vector<int64_t> steps;
  for (const nlohmann::json& s : report.at("steps")) {
    if (s.contains("checkpoint_s")) steps.push_back(s.at("step").get<int64_t>());
  }
  return steps;
}

TEST(CheckpointOperationsTest, BackgroundCheckpointsAreTheSynchronousOnesByteForByte) {
  const std::string root = TempDir("async");
  struct Case {
    std::vector<std::string> sets;
    std::vector<int64_t> kept;  // the step folders left
  };
  const std::vector<Case> cases = {
      {{"parallel.stages=2"}, {2, 4, 6}},
      // Replica 0 gathers the sharded optimizer state; retention removes the older checkpoints
      // once the background write of the newest is complete.
      {{"parallel.replicas=2", "parallel.zero=1", "output.keep_checkpoints=1"}, {6}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<std::string> sets = {"train.steps=6", "output.checkpoint_every=2",
                                     "train.log_every=1"};
    sets.insert(sets.end(), cases[i].sets.begin(), cases[i].sets.end());
    const std::string what = fmt::format("{}", fmt::join(cases[i].sets, " "));
    const std::string sync_dir = fmt::format("{}/{}-sync", root, i);
    const std::string async_dir = fmt::format("{}/{}-async", root, i);
    const nlohmann::json sync = Train(sync_dir, sets);
    sets.push_back("output.async_checkpoint=true");
    const nlohmann::json async = Train(async_dir, sets);
    ASSERT_TRUE(sync.contains("steps") && async.contains("steps")) << what;
    EXPECT_EQ(Losses(async), Losses(sync)) << what;
    EXPECT_EQ(async.at("param_checksum"), sync.at("param_checksum")) << what;
    EXPECT_EQ(SavedSteps(async), (std::vector<int64_t>{2, 4, 6})) << what;
    EXPECT_EQ(SavedSteps(sync), (std::vector<int64_t>{2, 4, 6})) << what;
    std::vector<int64_t> left;
    for (int64_t step = 1; step <= 6; ++step) {
      const std::string dir = fmt::format("{}/checkpoints/step-{}", async_dir, step);
      if (!fs::exists(dir)) continue;
      left.push_back(step);
      const std::map<std::string, std::string> files = LayerFiles(dir);
      EXPECT_EQ(files.size(), 6u) << what << ", step " << step;  // gpt-tiny: 6 graph layers
      EXPECT_EQ(files, LayerFiles(fmt::format("{}/checkpoints/step-{}", sync_dir, step)))
          << what << ", step " << step;
    }
    EXPECT_EQ(left, cases[i].kept) << what;
    EXPECT_EQ(ReadFile(async_dir + "/checkpoints/latest"), "step-6\n") << what;
  }
}

TEST(CheckpointOperationsTest, AJobKilledMidBackgroundWriteResumesFromThePreviousCheckpoint) {
  const std::string root = TempDir("async-kill");
  const std::string held = root + "/held";
  const std::string log = root + "/log";
  const std::string sets =
      " --set train.steps=8 --set train.log_every=1 --set parallel.stages=2"
      " --set output.checkpoint_every=2 --set output.async_checkpoint=true";
  // Rank 0 stops for good after the first layer file of step 4's checkpoint, in its background
  // writer; training goes on until the next save waits for that write.
  const int shell =
      Background("BATON_TEST_HOLD_CHECKPOINT=4:" + root + " '" + BatonFaultsBinary() +
                     "' run configs/gpt-tiny.yaml" + sets + " --set output.dir=" + root + "/killed",
                 log);
  ASSERT_TRUE(WaitFor(held, "held", 180)) << ReadFile(log);
  const std::string text = SignalTheChildOf(shell, SIGKILL, log, 120);
  EXPECT_NE(text.find("exit=137"), std::string::npos) << text;

  // Step 4 is incomplete (some of its files, no manifest); `latest` still names step 2.
  const std::string checkpoints = root + "/killed/checkpoints";
  EXPECT_EQ(ReadFile(checkpoints + "/latest"), "step-2\n") << text;
  EXPECT_TRUE(fs::exists(checkpoints + "/step-4/layer-0.safetensors")) << text;
  EXPECT_FALSE(fs::exists(checkpoints + "/step-4/manifest.json")) << text;

  // Resuming from the root takes step 2 and ends where an uninterrupted run ends.
  const nlohmann::json straight = Train(root + "/straight", {"train.steps=8", "parallel.stages=2"});
  const std::string resumed_dir = root + "/resumed";
  const CommandResult resumed =
      RunBaton({"run", "configs/gpt-tiny.yaml", "--set", "train.steps=8", "--set",
                "parallel.stages=2", "--set", "output.async_checkpoint=true", "--set",
                "output.checkpoint_every=2", "--set", "output.dir=" + resumed_dir, "--report",
                resumed_dir + "/report.json", "--resume", checkpoints});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("step-2 (step 2)"), std::string::npos) << resumed.output;
  const nlohmann::json report = ReadJson(resumed_dir + "/report.json");
  EXPECT_EQ(report.at("param_checksum"), straight.at("param_checksum"));
  const std::vector<double> all = Losses(straight);
  EXPECT_EQ(Losses(report), std::vector<double>(all.begin() + 2, all.end()));
}

// A background write that never ends (rank 0's is held after its first file of step 4) holds rank 0
// at its next save; its peer gives up waiting for it after parallel.timeout_s, and the rank table
// shows rank 0 running, blocked on CHECKPOINT_WRITE: the hang names its cause.
TEST(CheckpointOperationsTest, AStalledBackgroundWriteShowsInTheRankTable) {
  const std::string root = TempDir("async-stall");
  const CommandResult result =
      RunShell("cd '" + SourceDir() + "' && BATON_TEST_HOLD_CHECKPOINT=4:" + root + " '" +
               BatonFaultsBinary() +
               "' run configs/gpt-tiny.yaml --set train.steps=8 --set parallel.stages=2"
               " --set parallel.timeout_s=5 --set output.checkpoint_every=2"
               " --set output.async_checkpoint=true --set output.dir=" +
               root + "/run");
  EXPECT_NE(result.exit_code, 0) << result.output;
  const std::regex row(R"(\n\s+0\s+0\s+running\s+CHECKPOINT_WRITE\s+-\s+-\s+[0-9.]+\s)");
  EXPECT_TRUE(std::regex_search(result.output, row)) << result.output;
  EXPECT_EQ(ReadFile(root + "/run/checkpoints/latest"), "step-2\n") << result.output;
}

// SIGTERM to the launcher of a job saving in the background after every step: the job stops
// cleanly (exit 0) after writing the step it stopped at, every background write finished, and
// the checkpoint `latest` names is complete and resumes.
TEST(CheckpointOperationsTest, SigtermDuringBackgroundSavesEndsWithACompleteLatestCheckpoint) {
  const std::string root = TempDir("async-sigterm");
  const std::string log = root + "/log";
  const int shell =
      Background("'" + BatonBinary() +
                     "' run configs/gpt-tiny.yaml --set train.steps=100000 --set train.log_every=1"
                     " --set parallel.stages=2 --set output.checkpoint_every=1"
                     " --set output.async_checkpoint=true --set output.dir=" +
                     root,
                 log);
  ASSERT_TRUE(WaitFor(log, "step     3/", 120)) << ReadFile(log);
  const std::string text = SignalTheChildOf(shell, SIGTERM, log, 120);
  EXPECT_NE(text.find("exit=0"), std::string::npos) << text;
  const std::string latest = ReadFile(root + "/checkpoints/latest");
  ASSERT_FALSE(latest.empty()) << text;
  const std::string step_dir = root + "/checkpoints/" + latest.substr(0, latest.size() - 1);
  EXPECT_EQ(LayerFiles(step_dir).size(), 6u) << text;
  const std::string resumed = ResumedFromLine(root + "/checkpoints", root + "/next");
  EXPECT_NE(resumed.find("resumed from " + step_dir), std::string::npos) << resumed;
}

// A background write that fails (here: step 4's folder cannot be made, a file is in its place)
// fails the job at the rank's next step end or save, naming the step and the path; the previous
// checkpoint stays `latest`.
TEST(CheckpointOperationsTest, AFailedBackgroundWriteFailsTheJobNamingTheStepAndThePath) {
  const std::string root = TempDir("async-fail");
  const std::vector<std::string> sets = {"parallel.stages=2", "output.checkpoint_every=2",
                                         "output.async_checkpoint=true"};
  std::vector<std::string> first = sets;
  first.push_back("train.steps=2");
  ASSERT_TRUE(Train(root, first).contains("steps"));
  { std::ofstream(root + "/checkpoints/step-4") << "in the way\n"; }
  std::vector<std::string> args = {"run",   "configs/gpt-tiny.yaml", "--set",    "train.steps=8",
                                   "--set", "output.dir=" + root,    "--resume", "auto"};
  for (const std::string& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  const CommandResult result = RunBaton(args);
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("the background write of step 4's checkpoint failed"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find(root + "/checkpoints/step-4: exists and is not a directory"),
            std::string::npos)
      << result.output;
  EXPECT_EQ(ReadFile(root + "/checkpoints/latest"), "step-2\n") << result.output;
}

}  // namespace
}  // namespace baton::testing
