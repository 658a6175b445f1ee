// Operations: checkpoints that resume exactly (onto another stage count too), clean stops on
// SIGTERM, restarts after a killed worker (under the local launcher and under mpirun),
// metrics.jsonl written while training (it survives a SIGKILL, a resume and a restart append to
// it), GPT-2 safetensors out of a checkpoint, and a BPE tokenizer through prepare, training,
// generate and export.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include "checkpoint/safetensors.h"
#include "checkpoint/sparse.h"
#include "data/tokenizer.h"
#include "tests/baton_process.h"
#include "tests/run_report.h"

namespace baton::testing {
namespace {

namespace fs = std::filesystem;

nlohmann::json Train(const std::string& dir, const std::vector<std::string>& extra) {
  return RunAndReport("configs/gpt-tiny.yaml", dir, extra);
}

// Every line of metrics.jsonl, parsed.
std::vector<nlohmann::json> MetricsLines(const std::string& dir) {
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// The steps of the progress lines ("step     3/100000 | loss ...") in a launcher's output.
std::vector<int64_t> ProgressSteps(const std::string& output) {
  static const std::regex progress(R"(step +([0-9]+)/[0-9]+ \| loss)");
  std::vector<int64_t> steps;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), progress);
       it != std::sregex_iterator(); ++it) {
    steps.push_back(std::stoll((*it)[1].str()));
  }
  return steps;
}

std::vector<int64_t> StepsOf(const nlohmann::json& entries) {
  std::vector<int64_t> steps;
  for (const nlohmann::json& e : entries) steps.push_back(e.at("step").get<int64_t>());
  return steps;
}

std::vector<int64_t> Range(int64_t first, int64_t last) {
  std::vector<int64_t> out;
  for (int64_t s = first; s <= last; ++s) out.push_back(s);
  return out;
}

TEST(OperationsTest, TwentyStepsEqualTenThenResumeTenOntoAnotherStageCount) {
  const std::string root = TempDir("resume");
  const nlohmann::json straight =
      Train(root + "/straight", {"--set", "train.steps=20", "--set", "parallel.stages=2"});
  const nlohmann::json first =
      Train(root + "/first", {"--set", "train.steps=20", "--set", "parallel.stages=2", "--set",
                              "output.checkpoint_every=10"});
  ASSERT_TRUE(fs::exists(root + "/first/checkpoints/step-10/manifest.json"));
  for (const char* stages : {"parallel.stages=2", "parallel.stages=4", "parallel.stages=1"}) {
    const nlohmann::json resumed =
        Train(root + "/resumed", {"--set", "train.steps=20", "--set", stages, "--resume",
                                  root + "/first/checkpoints/step-10"});
    const std::vector<double> all = Losses(straight);
    EXPECT_EQ(Losses(resumed), std::vector<double>(all.begin() + 10, all.end())) << stages;
    EXPECT_EQ(resumed.at("param_checksum"), straight.at("param_checksum")) << stages;
  }
}

// 8-bit optimizer state resumes exactly too, onto another stage count: the checkpoint holds the
// codes and block maxima the run held.
TEST(OperationsTest, Int8OptimizerStateResumesExactlyOntoAnotherStageCount) {
  const std::string root = TempDir("resume-int8");
  const std::vector<std::string> common = {"--set", "train.steps=8", "--set",
                                           "optimizer.state=int8"};
  std::vector<std::string> first = common;
  first.insert(first.end(), {"--set", "parallel.stages=2", "--set", "output.checkpoint_every=4"});
  const nlohmann::json straight = Train(root + "/first", first);
  ASSERT_TRUE(fs::exists(root + "/first/checkpoints/step-4/manifest.json"));
  std::vector<std::string> again = common;
  again.insert(again.end(),
               {"--set", "parallel.stages=1", "--resume", root + "/first/checkpoints/step-4"});
  const nlohmann::json resumed = Train(root + "/resumed", again);
  const std::vector<double> all = Losses(straight);
  ASSERT_EQ(all.size(), 8u);
  EXPECT_EQ(Losses(resumed), std::vector<double>(all.begin() + 4, all.end()));
  EXPECT_EQ(resumed.at("param_checksum"), straight.at("param_checksum"));
}

// Every pruned matrix of a checkpoint's block files: its keep-mask (1 kept) and dense shape.
std::vector<std::pair<Shape, std::vector<uint8_t>>> StoredMasks(const std::string& step_dir,
                                                                int blocks) {
  std::vector<std::pair<Shape, std::vector<uint8_t>>> masks;
  for (int layer = 1; layer <= blocks; ++layer) {
    const SafetensorsFile file =
        SafetensorsFile::Open(fmt::format("{}/layer-{}.safetensors", step_dir, layer));
    for (const SafetensorsEntry& entry : file.entries()) {
      const std::string suffix = kSparseMaskSuffix;
      if (entry.name.size() <= suffix.size() ||
          entry.name.compare(entry.name.size() - suffix.size(), suffix.size(), suffix) != 0) {
        continue;
      }
      const std::string param = entry.name.substr(0, entry.name.size() - suffix.size());
      const std::string shape_text = file.metadata().at(param + kDenseShapeSuffix);
      const Shape shape = {std::stoll(shape_text),
                           std::stoll(shape_text.substr(shape_text.find(',') + 1))};
      std::vector<uint8_t> keep = UnpackMaskBits(file.Bytes(entry), shape[0] * shape[1]);
      int64_t kept = 0;
      for (uint8_t k : keep) kept += k;
      // The value and both moments are stored packed: the kept elements only.
      for (const std::string& name : {param, param + ".adam_m", param + ".adam_v"}) {
        EXPECT_EQ(file.Get(name).shape, Shape{kept}) << name;
      }
      masks.emplace_back(shape, std::move(keep));
    }
  }
  return masks;
}

// The zeros of `name` in an exported (dense) model.safetensors.
int64_t ExportedZeros(const std::string& checkpoint, const std::string& out,
                      const std::string& name) {
  const CommandResult exported = RunBaton({"export", checkpoint, out, "--log-level", "warn"});
  EXPECT_EQ(exported.exit_code, 0) << exported.output;
  const SafetensorsFile file = SafetensorsFile::Open(out + "/model.safetensors");
  const std::span<const std::byte> bytes = file.Bytes(file.Get(name));
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return std::count(values.begin(), values.end(), 0.0f);
}

// Pruning while training (prune.*): from prune.at_step on, every block matrix keeps exactly 2 of
// each 4 weights (2:4), or exactly half of its weights; checkpoints store them sparsely and
// resume exactly onto another stage count, with f32 or 8-bit optimizer state; 1 and 2 stages
// train bit-identically.
TEST(OperationsTest, PrunedRunsKeepTheirZerosStoreThemSparselyAndResumeExactly) {
  const std::string root = TempDir("prune");
  const int64_t c = 128;  // gpt-tiny's width: c_fc is (C, 4C)
  for (const std::string pattern : {"2:4", "unstructured"}) {
    const std::string dir = root + "/" + (pattern == "2:4" ? "two-of-four" : "unstructured");
    std::vector<std::string> common = {
        "--set", "train.steps=8", "--set", "prune.at_step=3", "--set", "prune.pattern=" + pattern};
    if (pattern == "unstructured") common.insert(common.end(), {"--set", "optimizer.state=int8"});
    std::vector<std::string> first = common;
    first.insert(first.end(), {"--set", "parallel.stages=2", "--set", "output.checkpoint_every=4"});
    const nlohmann::json straight = Train(dir + "/first", first);
    ASSERT_TRUE(fs::exists(dir + "/first/checkpoints/step-4/manifest.json"));
    std::vector<std::string> again = common;
    again.insert(again.end(),
                 {"--set", "parallel.stages=1", "--resume", dir + "/first/checkpoints/step-4"});
    const nlohmann::json resumed = Train(dir + "/resumed", again);
    const std::vector<double> all = Losses(straight);
    ASSERT_EQ(all.size(), 8u);
    EXPECT_EQ(Losses(resumed), std::vector<double>(all.begin() + 4, all.end())) << pattern;
    EXPECT_EQ(resumed.at("param_checksum"), straight.at("param_checksum")) << pattern;

    for (const char* step : {"step-4", "step-8"}) {
      const auto masks = StoredMasks(dir + "/first/checkpoints/" + step, 4);
      ASSERT_EQ(masks.size(), 16u) << step;  // 4 matrices in each of 4 blocks
      for (const auto& [shape, keep] : masks) {
        const int64_t kept = std::count(keep.begin(), keep.end(), uint8_t{1});
        EXPECT_EQ(kept * 2, shape[0] * shape[1]) << step;
        if (pattern != "2:4") continue;
        for (int64_t col = 0; col < shape[1]; ++col) {
          for (int64_t r = 0; r < shape[0]; r += 4) {
            int group = 0;
            for (int64_t k = r; k < r + 4; ++k)
              group += keep[static_cast<size_t>(k * shape[1] + col)];
            ASSERT_EQ(group, 2) << step << " column " << col << " rows " << r;
          }
        }
      }
      // The weights themselves are zero where pruned: exactly half of each matrix.
      EXPECT_EQ(ExportedZeros(dir + "/first/checkpoints/" + step, dir + "/hf-" + step,
                              "transformer.h.1.mlp.c_fc.weight"),
                c * 4 * c / 2)
          << pattern << " " << step;
    }
  }
  // 1 stage trains the pruned model bit for bit as 2 stages do.
  const nlohmann::json two = ReadJson(root + "/two-of-four/first/report.json");
  const nlohmann::json one =
      Train(root + "/one", {"--set", "train.steps=8", "--set", "prune.at_step=3", "--set",
                            "prune.pattern=2:4", "--set", "parallel.stages=1"});
  EXPECT_EQ(Losses(one), Losses(two));
  EXPECT_EQ(one.at("param_checksum"), two.at("param_checksum"));
}

TEST(OperationsTest, FlippedByteInACheckpointIsRejectedNamingTheFile) {
  const std::string root = TempDir("flip");
  Train(root, {"--set", "train.steps=2", "--set", "parallel.stages=1", "--set",
               "output.checkpoint_every=2"});
  const std::string layer = root + "/checkpoints/step-2/layer-1.safetensors";
  ASSERT_TRUE(fs::exists(layer));
  {
    std::fstream f(layer, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(layer) / 2));
    char c = 0;
    f.read(&c, 1);
    f.seekp(static_cast<std::streamoff>(fs::file_size(layer) / 2));
    c = static_cast<char>(c ^ 0x10);
    f.write(&c, 1);
  }
  const CommandResult result =
      RunBaton({"run", "configs/gpt-tiny.yaml", "--set", "train.steps=3", "--set",
                "output.dir=" + root + "/again", "--resume", root + "/checkpoints/step-2"});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("layer-1.safetensors"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("checksum"), std::string::npos) << result.output;
}

// --log-level warn (or error) silences progress, not the result: the summary line stays.
TEST(OperationsTest, QuietLogLevelsStillPrintTheFinalSummary) {
  const std::string root = TempDir("quiet");
  for (const char* level : {"warn", "error"}) {
    const CommandResult result =
        RunBaton({"--log-level", level, "run", "configs/gpt-tiny.yaml", "--set", "train.steps=2",
                  "--set", "parallel.stages=2", "--set", "output.dir=" + root + "/" + level});
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_NE(result.output.find("done: 2 steps, final loss "), std::string::npos) << level << ":\n"
                                                                                   << result.output;
    EXPECT_EQ(result.output.find("[info]"), std::string::npos) << level << ":\n" << result.output;
  }
}

TEST(OperationsTest, SigtermToTheLauncherLeavesALoadableCheckpointAndExitsZero) {
  const std::string root = TempDir("sigterm");
  const std::string log = root + "/log";
  const int shell =
      Background("'" + BatonBinary() +
                     "' run configs/gpt-tiny.yaml --set train.steps=100000 --set train.log_every=1"
                     " --set parallel.stages=2 --set output.dir=" +
                     root,
                 log);
  ASSERT_TRUE(WaitFor(log, "step     3/", 120)) << ReadFile(log);
  // The launcher is the background shell's only child (the workers are its children).
  const std::string text = SignalTheChildOf(shell, SIGTERM, log, 120);
  EXPECT_NE(text.find("exit=0"), std::string::npos) << text;
  ASSERT_TRUE(fs::exists(root + "/checkpoints/latest")) << text;
  // The checkpoint loads (verified against its manifest) and training goes on from it.
  const std::string resumed = ResumedFromLine(root + "/checkpoints", root + "/next");
  EXPECT_NE(resumed.find("resumed from"), std::string::npos) << resumed;
}

TEST(OperationsTest, SigkilledRunLeavesEveryLoggedStepInMetricsJsonlAndAResumeAppends) {
  const std::string root = TempDir("sigkill");
  const std::string log = root + "/log";
  const int shell =
      Background("'" + BatonBinary() +
                     "' run configs/gpt-tiny.yaml --set train.steps=100000 --set train.log_every=1"
                     " --set parallel.stages=2 --set output.checkpoint_every=2 --set output.dir=" +
                     root,
                 log);
  ASSERT_TRUE(WaitFor(log, "checkpoint of step 2 written", 120)) << ReadFile(log);
  ASSERT_TRUE(WaitFor(log, "step     3/", 120)) << ReadFile(log);
  const std::string text = SignalTheChildOf(shell, SIGKILL, log, 120);
  EXPECT_NE(text.find("exit=137"), std::string::npos) << text;

  // Every step printed before the kill is in the file, with every step before it, in order.
  const std::vector<int64_t> logged = ProgressSteps(text);
  ASSERT_FALSE(logged.empty()) << text;
  const std::vector<nlohmann::json> killed = MetricsLines(root);
  ASSERT_GE(killed.size(), static_cast<size_t>(logged.back())) << text;
  EXPECT_EQ(StepsOf(killed), Range(1, static_cast<int64_t>(killed.size())));
  for (const nlohmann::json& line : killed) {
    EXPECT_EQ(line.at("attempt"), 0) << line;
    EXPECT_TRUE(line.at("loss").is_number()) << line;
    EXPECT_TRUE(line.at("time").get<std::string>().ends_with("Z")) << line;
    EXPECT_GE(line.at("elapsed_s").get<double>(), 0.0) << line;
    EXPECT_TRUE(line.at("memory_peak").contains("stage0")) << line;
    EXPECT_TRUE(line.at("memory_peak").contains("stage1")) << line;
  }

  // A resume appends: the killed run's lines stay as they were, the resumed steps follow.
  const nlohmann::json resumed =
      Train(root, {"--set", "train.steps=4", "--set", "parallel.stages=2", "--set",
                   "train.log_every=1", "--resume", root + "/checkpoints/step-2"});
  ASSERT_TRUE(resumed.contains("steps"));
  EXPECT_EQ(StepsOf(resumed.at("steps")), Range(3, 4));
  const std::vector<nlohmann::json> after = MetricsLines(root);
  ASSERT_EQ(after.size(), killed.size() + 2);
  EXPECT_EQ(std::vector<nlohmann::json>(after.begin(), after.begin() + killed.size()), killed);
  EXPECT_EQ(after[killed.size()].at("step"), 3);
  EXPECT_EQ(after.back().at("step"), 4);
}

TEST(OperationsTest, KilledWorkerWithMaxRestartsFinishesWithTheUninterruptedChecksum) {
  const std::string root = TempDir("restart");
  const nlohmann::json straight =
      Train(root + "/straight", {"--set", "train.steps=40", "--set", "parallel.stages=2"});
  const std::string log = root + "/log";
  const std::string dir = root + "/restarted";
  const int shell = Background(
      "'" + BatonBinary() + "' run configs/gpt-tiny.yaml --set train.steps=40" +
          " --set train.log_every=1 --set parallel.stages=2 --set output.dir=" + dir +
          " --set output.checkpoint_every=5 --max-restarts 1 --report " + dir + "/report.json",
      log);
  ASSERT_TRUE(WaitFor(log, "checkpoint of step 5", 120)) << ReadFile(log);
  const int victim = WorkerPid(shell, 1);
  ASSERT_GT(victim, 0);
  kill(victim, SIGKILL);
  ASSERT_TRUE(WaitFor(log, "exit=", 300)) << ReadFile(log);
  const std::string text = ReadFile(log);
  EXPECT_NE(text.find("exit=0"), std::string::npos) << text;
  EXPECT_NE(text.find("restarting every worker"), std::string::npos) << text;
  const nlohmann::json report = ReadJson(dir + "/report.json");
  EXPECT_EQ(report.at("param_checksum"), straight.at("param_checksum"));

  // The report's steps cover both attempts: 1..k until the kill, then from the checkpoint the
  // restart resumed (step 5 or later) to 40; metrics.jsonl holds the same steps, each with its
  // attempt. Every attempt computed the uninterrupted losses.
  const std::vector<int64_t> steps = StepsOf(report.at("steps"));
  const std::vector<nlohmann::json> lines = MetricsLines(dir);
  ASSERT_EQ(StepsOf(lines), steps);
  size_t restart = 0;
  while (restart < lines.size() && lines[restart].at("attempt") == 0) ++restart;
  ASSERT_LT(restart, lines.size()) << "no step of a second attempt";
  for (size_t i = restart; i < lines.size(); ++i) EXPECT_EQ(lines[i].at("attempt"), 1) << i;
  EXPECT_EQ(std::vector<int64_t>(steps.begin(), steps.begin() + restart),
            Range(1, static_cast<int64_t>(restart)));
  const int64_t resumed_from = steps[restart];
  EXPECT_GE(resumed_from, 6);
  EXPECT_LE(resumed_from, static_cast<int64_t>(restart) + 1);
  EXPECT_EQ(std::vector<int64_t>(steps.begin() + restart, steps.end()), Range(resumed_from, 40));
  const std::vector<double> straight_losses = Losses(straight);
  const std::vector<double> losses = Losses(report);
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(losses[i], straight_losses[static_cast<size_t>(steps[i] - 1)]) << "step " << steps[i];
  }
}

// mpirun's command line for `baton run configs/gpt-tiny.yaml` on 4 ranks (4 stages).
std::string MpirunCommand(const std::string& dir, const std::string& extra) {
  return "mpirun --allow-run-as-root --oversubscribe -np 4 '" + BatonBinary() +
         "' run configs/gpt-tiny.yaml --set parallel.stages=4 --set train.log_every=1" +
         " --set output.dir=" + dir + " --report " + dir + "/report.json " + extra;
}

bool HaveMpirun() { return RunShell("command -v mpirun").exit_code == 0; }

TEST(OperationsTest, MpirunResumeAutoCarriesOnToTheUninterruptedChecksum) {
  if (!HaveMpirun()) GTEST_SKIP() << "mpirun is not installed";
  const std::string root = TempDir("mpi-resume");
  const nlohmann::json straight =
      Train(root + "/straight", {"--set", "train.steps=8", "--set", "parallel.stages=2"});
  // Within the warm-up, a shorter run's steps are the longer run's first steps (the learning
  // rate does not depend on train.steps yet).
  const std::string dir = root + "/run";
  const CommandResult first = RunShell("cd '" + SourceDir() + "' && " +
                                       MpirunCommand(dir, "--set train.steps=5 --resume auto"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("no checkpoint in"), std::string::npos) << first.output;
  ASSERT_EQ(ReadFile(dir + "/checkpoints/latest"), "step-5\n");
  const CommandResult resumed = RunShell("cd '" + SourceDir() + "' && " +
                                         MpirunCommand(dir, "--set train.steps=8 --resume auto"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + dir + "/checkpoints/step-5"), std::string::npos)
      << resumed.output;
  const nlohmann::json report = ReadJson(dir + "/report.json");
  const std::vector<double> all = Losses(straight);
  EXPECT_EQ(Losses(report), std::vector<double>(all.begin() + 5, all.end()));
  EXPECT_EQ(report.at("param_checksum"), straight.at("param_checksum"));
  EXPECT_EQ(ReadFile(dir + "/checkpoints/latest"), "step-8\n");
  // metrics.jsonl: both runs' steps, the resumed ones appended.
  EXPECT_EQ(StepsOf(MetricsLines(dir)), Range(1, 8));
}

// SIGUSR1 to mpirun: Open MPI forwards it to every rank (its agent) and leaves the job alone, so
// every stage finishes its step, the checkpoint is written and mpirun itself exits 0
// (deploy/README.md: SIGTERM to mpirun is Open MPI's own and exits 1).
TEST(OperationsTest, SigusrOneToMpirunStopsWithACheckpointAndExitsZero) {
  if (!HaveMpirun()) GTEST_SKIP() << "mpirun is not installed";
  const std::string root = TempDir("mpi-usr1");
  const std::string log = root + "/log";
  const int shell = Background(MpirunCommand(root, "--set train.steps=100000"), log);
  ASSERT_TRUE(WaitFor(log, "step     3/", 180)) << ReadFile(log);
  const std::vector<int> mpirun = ChildPids(shell);
  ASSERT_EQ(mpirun.size(), 1u);
  kill(mpirun.front(), SIGUSR1);
  ASSERT_TRUE(WaitFor(log, "exit=", 180)) << ReadFile(log);
  const std::string text = ReadFile(log);
  EXPECT_NE(text.find("exit=0"), std::string::npos) << text;
  EXPECT_NE(text.find("as asked (signal); checkpoint written"), std::string::npos) << text;
  EXPECT_TRUE(fs::exists(root + "/checkpoints/latest")) << text;
}

TEST(OperationsTest, MpirunKilledWorkerWithMaxRestartsFinishesWithTheUninterruptedChecksum) {
  if (!HaveMpirun()) GTEST_SKIP() << "mpirun is not installed";
  const std::string root = TempDir("mpi-restart");
  const nlohmann::json straight =
      Train(root + "/straight", {"--set", "train.steps=16", "--set", "parallel.stages=2"});
  const std::string log = root + "/log";
  const std::string dir = root + "/restarted";
  const int shell = Background(
      MpirunCommand(dir, "--set train.steps=16 --set output.checkpoint_every=4 --max-restarts 1"),
      log);
  ASSERT_TRUE(WaitFor(log, "checkpoint of step 4", 300)) << ReadFile(log);
  const int victim = WorkerPid(shell, 1);  // a child of rank 1's agent
  ASSERT_GT(victim, 0) << ReadFile(log);
  kill(victim, SIGKILL);
  ASSERT_TRUE(WaitFor(log, "exit=", 300)) << ReadFile(log);
  const std::string text = ReadFile(log);
  EXPECT_NE(text.find("exit=0"), std::string::npos) << text;
  EXPECT_NE(text.find("stage 1 worker process killed by signal 9"), std::string::npos) << text;
  EXPECT_NE(text.find("restarting every worker (restart 1 of 1)"), std::string::npos) << text;
  const nlohmann::json report = ReadJson(dir + "/report.json");
  EXPECT_EQ(report.at("param_checksum"), straight.at("param_checksum"));

  // As under the local launcher: attempt 0's steps until the kill, then attempt 1's from the
  // checkpoint it resumed (step 4 or later) to the end, each the uninterrupted run's loss.
  const std::vector<int64_t> steps = StepsOf(report.at("steps"));
  const std::vector<nlohmann::json> lines = MetricsLines(dir);
  ASSERT_EQ(StepsOf(lines), steps);
  size_t restart = 0;
  while (restart < lines.size() && lines[restart].at("attempt") == 0) ++restart;
  ASSERT_LT(restart, lines.size()) << "no step of a second attempt";
  for (size_t i = restart; i < lines.size(); ++i) EXPECT_EQ(lines[i].at("attempt"), 1) << i;
  const int64_t resumed_from = steps[restart];
  EXPECT_GE(resumed_from, 5);
  EXPECT_LE(resumed_from, static_cast<int64_t>(restart) + 1);
  EXPECT_EQ(std::vector<int64_t>(steps.begin() + restart, steps.end()), Range(resumed_from, 16));
  const std::vector<double> straight_losses = Losses(straight);
  const std::vector<double> losses = Losses(report);
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(losses[i], straight_losses[static_cast<size_t>(steps[i] - 1)]) << "step " << steps[i];
  }
}

TEST(OperationsTest, MpirunKilledWorkerWithoutRestartsEndsNamingTheStageAndLeavesNoProcess) {
  if (!HaveMpirun()) GTEST_SKIP() << "mpirun is not installed";
  const std::string root = TempDir("mpi-kill");
  const std::string log = root + "/log";
  const int shell = Background(MpirunCommand(root, "--set train.steps=100000"), log);
  ASSERT_TRUE(WaitFor(log, "step     2/", 300)) << ReadFile(log);
  // mpirun, the four agents and their workers.
  const std::vector<int> processes = DescendantPids(shell);
  const int victim = WorkerPid(shell, 1);
  ASSERT_GT(victim, 0) << ReadFile(log);
  kill(victim, SIGKILL);
  ASSERT_TRUE(WaitFor(log, "exit=", 300)) << ReadFile(log);
  const std::string text = ReadFile(log);
  EXPECT_EQ(text.find("exit=0"), std::string::npos) << text;
  EXPECT_NE(text.find("stage 1 worker process killed by signal 9"), std::string::npos) << text;
  EXPECT_EQ(text.find("restarting"), std::string::npos) << text;
  EXPECT_GE(processes.size(), 9u) << text;
  // mpirun may end before it reaps its agents: an exited agent waits as a zombie for init.
  for (int pid : processes) EXPECT_FALSE(Running(pid)) << "process " << pid << " outlived the job";
}

TEST(OperationsTest, ExportedCheckpointIsStandardSafetensorsThatInitFromLoads) {
  const std::string root = TempDir("export");
  Train(root, {"--set", "train.steps=20", "--set", "parallel.stages=2", "--set",
               "output.checkpoint_every=20"});
  const CommandResult exported = RunBaton({"export", root + "/checkpoints", root + "/hf"});
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  // The header: 8-byte little-endian length, then JSON naming HF GPT-2 tensors.
  std::ifstream in(root + "/hf/model.safetensors", std::ios::binary);
  uint64_t length = 0;
  in.read(reinterpret_cast<char*>(&length), 8);
  std::string header(length, '\0');
  in.read(header.data(), static_cast<std::streamsize>(length));
  const nlohmann::json j = nlohmann::json::parse(header);
  EXPECT_TRUE(j.contains("transformer.wte.weight") || j.contains("wte.weight")) << header;
  EXPECT_TRUE(fs::exists(root + "/hf/config.json"));
  // Training from the exported weights starts where the first run ended, not from scratch.
  const nlohmann::json warm =
      Train(root + "/warm", {"--set", "train.steps=1", "--set", "parallel.stages=2", "--set",
                             "model.init_from=" + root + "/hf/model.safetensors"});
  EXPECT_LT(Losses(warm).front(), 4.5);
  // The folder itself (as export writes it, or as Hugging Face ships a model) reads the same.
  const nlohmann::json folder =
      Train(root + "/folder", {"--set", "train.steps=1", "--set", "parallel.stages=2", "--set",
                               "model.init_from=" + root + "/hf"});
  EXPECT_EQ(Losses(folder), Losses(warm));
}

// A BPE tokenizer through every command: data prepare, training on its .bin (and on the text
// itself, which reads the same tokens), generate, and export for `transformers`.
TEST(OperationsTest, TokenizerGoesThroughPrepareTrainGenerateAndExport) {
  const std::string root = TempDir("tokenizer");
  const std::string fixture = SourceDir() + "/tests/fixtures/bpe";
  const Tokenizer tokenizer = Tokenizer::Load(fixture + "/tokenizer.json");  // 640 ids
  fs::create_directories(root + "/corpus");
  const nlohmann::json reference = ReadJson(fixture + "/reference.json");
  for (const nlohmann::json& c : reference["cases"]) {
    std::ofstream(root + "/corpus/" + c["name"].get<std::string>() + ".txt", std::ios::binary)
        << c["text"].get<std::string>();
  }
  const CommandResult prepared =
      RunBaton({"data", "prepare", root + "/corpus", root + "/corpus.bin", "--tokenizer",
                fixture + "/tokenizer.json"});
  ASSERT_EQ(prepared.exit_code, 0) << prepared.output;
  std::smatch wrote;
  ASSERT_TRUE(std::regex_search(prepared.output, wrote, std::regex("wrote ([0-9]+) tokens")))
      << prepared.output;
  EXPECT_EQ(fs::file_size(root + "/corpus.bin"), 2 * std::stoull(wrote[1].str()));
  EXPECT_NE(prepared.output.find("vocab size 640"), std::string::npos) << prepared.output;

  // The model's vocabulary is padded past the tokenizer's, as GPT-2's 50257 to 50304.
  const std::vector<std::string> model = {"--set", "data.tokenizer=" + fixture + "/tokenizer.json",
                                          "--set", "model.vocab_size=704",
                                          "--set", "data.format=auto"};
  std::vector<std::string> on_bin = {"--set", "data.path=" + root + "/corpus.bin", "--set",
                                     "train.steps=3"};
  on_bin.insert(on_bin.end(), model.begin(), model.end());
  const nlohmann::json trained = Train(root + "/run", on_bin);
  std::vector<std::string> on_text = {"--set", "data.path=" + root + "/corpus", "--set",
                                      "train.steps=1"};
  on_text.insert(on_text.end(), model.begin(), model.end());
  EXPECT_EQ(Losses(Train(root + "/text", on_text)).front(), Losses(trained).front());

  const std::string prompt = "The caf\xc3\xa9 is";
  const std::vector<std::string> generate = {"generate", root + "/run", "--prompt", prompt,
                                             "--tokens", "40",          "--seed",   "5"};
  const CommandResult text = RunBaton(generate);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find(fmt::format("prompt: {} tokens", tokenizer.Encode(prompt).size())),
            std::string::npos)
      << text.output;
  const size_t start = text.output.rfind(prompt);
  ASSERT_NE(start, std::string::npos) << text.output;
  const std::string printed = text.output.substr(start);  // after the log lines
  // 40 tokens decode to more than 40 bytes (byte-level output would be exactly 40).
  EXPECT_GT(printed.size() - prompt.size() - 1, 40u) << printed;
  const std::string again = RunBaton(generate).output;
  EXPECT_EQ(again.substr(std::min(again.rfind(prompt), again.size())), printed);

  const CommandResult exported = RunBaton({"export", root + "/run", root + "/hf"});
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_EQ(ReadFile(root + "/hf/tokenizer.json"), ReadFile(fixture + "/tokenizer.json"));
  EXPECT_EQ(ReadJson(root + "/hf/config.json")["eos_token_id"], *tokenizer.TokenId(kEndOfText));
  const nlohmann::json tokenizer_config = ReadJson(root + "/hf/tokenizer_config.json");
  EXPECT_EQ(tokenizer_config["model_max_length"], 128);
  EXPECT_EQ(tokenizer_config["eos_token"], "<|endoftext|>");
  // GPT-2's two-file form is copied as such.
  const CommandResult pair = RunBaton({"export", root + "/run", root + "/hf-pair", "--set",
                                       "data.tokenizer=" + fixture + "/vocab.json"});
  ASSERT_EQ(pair.exit_code, 0) << pair.output;
  EXPECT_EQ(ReadFile(root + "/hf-pair/merges.txt"), ReadFile(fixture + "/merges.txt"));
  EXPECT_TRUE(fs::exists(root + "/hf-pair/vocab.json"));
  EXPECT_FALSE(fs::exists(root + "/hf-pair/tokenizer.json"));

  // A tokenizer with more ids than the model has rows is refused before anything runs.
  const CommandResult too_small = RunBaton(
      {"run", "configs/gpt-tiny.yaml", "--set", "data.path=" + root + "/corpus.bin", "--set",
       "data.format=auto", "--set", "data.tokenizer=" + fixture, "--set", "model.vocab_size=600"});
  EXPECT_NE(too_small.exit_code, 0);
  EXPECT_NE(too_small.output.find("has 640 tokens, more than model.vocab_size 600"),
            std::string::npos)
      << too_small.output;
}

// `baton generate ARGS` with stdout (the text) returned and stderr (the log) in `log`.
std::string GenerateText(const std::vector<std::string>& args, const std::string& log) {
  std::string command = BatonBinary() + " generate";
  for (const std::string& arg : args) command += " '" + arg + "'";
  // In a group: RunShell appends 2>&1 to the group, the command's own stderr goes to the log.
  const CommandResult result = RunShell("{ " + command + " 2>'" + log + "'; }");
  EXPECT_EQ(result.exit_code, 0) << ReadFile(log);
  return result.output;
}

// The key-value cache changes the speed, not the text: for a seed, greedy and sampled, with
// prompt + new tokens inside model.context (128) and past it (where every token re-prefills the
// slid window), `generate` prints what `--no-kv-cache` prints. The log says the speed and what
// the cache held: keys and values of 4 blocks x 128 positions x 128 channels in f32.
TEST(OperationsTest, GenerateWithTheKvCacheWritesWhatRecomputingWrites) {
  const std::string root = TempDir("kv-cache");
  Train(root + "/run", {"--set", "train.steps=40", "--set", "parallel.stages=1"});
  const std::string prompt = "The license";
  for (const std::string temperature : {"0", "0.8"}) {
    for (const std::string tokens : {"40", "150"}) {
      SCOPED_TRACE("temperature " + temperature + ", " + tokens + " tokens");
      const std::vector<std::string> args = {root + "/run", "--prompt",      prompt,
                                             "--tokens",    tokens,          "--seed",
                                             "3",           "--temperature", temperature};
      const std::string cached = GenerateText(args, root + "/cached.log");
      std::vector<std::string> recompute = args;
      recompute.push_back("--no-kv-cache");
      const std::string recomputed = GenerateText(recompute, root + "/recomputed.log");
      ASSERT_EQ(cached.substr(0, prompt.size()), prompt) << cached;
      EXPECT_EQ(cached.size(), prompt.size() + std::stoul(tokens) + 1);  // bytes, then "\n"
      EXPECT_EQ(cached, recomputed);
      const std::string cached_log = ReadFile(root + "/cached.log");
      EXPECT_TRUE(std::regex_search(cached_log,
                                    std::regex("generated " + tokens +
                                               " tokens in [0-9.]+ s: [0-9]+ tokens/s \\(KV cache, "
                                               "512.00 KiB as activations; untimed "
                                               "warm-up [0-9.]+ s\\)")))
          << cached_log;
      EXPECT_NE(ReadFile(root + "/recomputed.log").find("tokens/s (no KV cache"),
                std::string::npos);
    }
  }
  // A prompt past the context is cut, and the log says so.
  const std::string long_prompt(150, 'a');
  GenerateText({root + "/run", "--prompt", long_prompt, "--tokens", "2"}, root + "/long.log");
  EXPECT_NE(ReadFile(root + "/long.log")
                .find("the prompt's 150 tokens exceed the model's context of 128: the model "
                      "reads only the last 128 (the first 22 are not seen)"),
            std::string::npos)
      << ReadFile(root + "/long.log");
}

TEST(OperationsTest, EveryRunEndsWithItsLastStepSavedAndResumeAutoMovesLatestOn) {
  const std::string root = TempDir("final");
  // No checkpoint settings at all: the last step is saved, so export works at once.
  const nlohmann::json straight = Train(root + "/straight", {"--set", "train.steps=8"});
  const nlohmann::json first = Train(root + "/run", {"--set", "train.steps=5", "--resume", "auto"});
  EXPECT_EQ(ReadFile(root + "/run/checkpoints/latest"), "step-5\n");
  EXPECT_EQ(RunBaton({"export", root + "/run", root + "/hf"}).exit_code, 0);
  // `auto` finds that checkpoint, carries on exactly, and moves `latest` to the new last step.
  const nlohmann::json resumed = Train(
      root + "/run", {"--set", "train.steps=8", "--set", "parallel.stages=2", "--resume", "auto"});
  EXPECT_EQ(ReadFile(root + "/run/checkpoints/latest"), "step-8\n");
  const std::vector<double> all = Losses(straight);
  EXPECT_EQ(Losses(resumed), std::vector<double>(all.begin() + 5, all.end()));
  EXPECT_EQ(resumed.at("param_checksum"), straight.at("param_checksum"));
  // Resuming the finished run trains nothing: an error that says how to go on, before any
  // worker starts, and `latest` stays.
  for (const std::string steps : {"8", "6"}) {
    const CommandResult again =
        RunBaton({"run", "configs/gpt-tiny.yaml", "--set", "train.steps=" + steps, "--set",
                  "output.dir=" + root + "/run", "--resume", "auto"});
    EXPECT_NE(again.exit_code, 0) << again.output;
    EXPECT_NE(again.output.find("is step 8, and train.steps is " + steps +
                                ": nothing left to train. To train N more steps with the "
                                "learning rate going on from where it is, add --steps-more N"),
              std::string::npos)
        << again.output;
    EXPECT_FALSE(AnyWorkerLogged(again.output)) << again.output;
  }
  EXPECT_EQ(ReadFile(root + "/run/checkpoints/latest"), "step-8\n");
  // Opting out leaves no checkpoint.
  Train(root + "/none", {"--set", "train.steps=2", "--set", "output.final_checkpoint=false"});
  EXPECT_FALSE(fs::exists(root + "/none/checkpoints"));
}

// --steps-more: the learning rate goes on from the rate the checkpoint had reached (raising
// train.steps instead reshapes the cosine and jumps back up), the checkpoints keep the extension,
// and a plain resume of the extended run trains exactly as the extended run did.
TEST(OperationsTest, StepsMoreContinuesTheLearningRateAndItsCheckpointsKeepTheExtension) {
  const std::string root = TempDir("steps-more");
  const std::vector<std::string> common = {"--set", "train.warmup_steps=2",
                                           "--set", "train.log_every=1",
                                           "--set", "output.checkpoint_every=6"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), common.begin(), common.end());
    return extra;
  };
  const std::string first = root + "/first";
  Train(first, with({"--set", "train.steps=12"}));
  const auto lr_of = [](const std::string& dir) {
    std::map<int64_t, double> lr;
    for (const nlohmann::json& line : MetricsLines(dir)) {
      if (line.contains("lr")) lr[line.at("step").get<int64_t>()] = line.at("lr").get<double>();
    }
    return lr;
  };
  const std::map<int64_t, double> planned = lr_of(first);
  ASSERT_EQ(planned.size(), 12u);

  const std::string extended = root + "/extended";
  const nlohmann::json report =
      Train(extended, with({"--set", "train.steps=12", "--resume", first + "/checkpoints/step-6",
                            "--steps-more", "10"}));
  EXPECT_EQ(Losses(report).size(), 10u);
  const std::map<int64_t, double> lr = lr_of(extended);
  ASSERT_EQ(lr.size(), 10u);
  ASSERT_EQ(lr.begin()->first, 7);
  // Continuous at step 6 (a tenth of the decay, not a jump) and decaying slower than planned...
  EXPECT_LT(lr.at(7), planned.at(6));
  EXPECT_GT(lr.at(7), planned.at(7));
  EXPECT_GT(lr.at(7), 0.9 * planned.at(6));
  for (int64_t step = 8; step <= 16; ++step) EXPECT_LT(lr.at(step), lr.at(step - 1)) << step;
  // ...to train.min_lr at the new end.
  EXPECT_NEAR(lr.at(16), 1e-4, 1e-10);
  EXPECT_EQ(ReadFile(extended + "/checkpoints/latest"), "step-16\n");
  const nlohmann::json state = ReadJson(extended + "/checkpoints/step-12/state.json");
  EXPECT_EQ(state.at("lr_segments"), nlohmann::json::parse("[[0, 12], [6, 16]]"));

  // A plain resume mid-extension (a restart, a requeued job) keeps the extended schedule, though
  // the config still says train.steps=12: steps 13..16 as the extended run trained them.
  const std::string again = root + "/again";
  const nlohmann::json resumed = Train(
      again, with({"--set", "train.steps=12", "--resume", extended + "/checkpoints/step-12"}));
  const std::vector<double> all = Losses(report);
  EXPECT_EQ(Losses(resumed), std::vector<double>(all.begin() + 6, all.end()));
  EXPECT_EQ(resumed.at("param_checksum"), report.at("param_checksum"));

  // Without a checkpoint there is nothing to extend: an error before any worker starts.
  const CommandResult fresh = RunBaton({"run", "configs/gpt-tiny.yaml", "--set",
                                        "output.dir=" + root + "/fresh", "--steps-more", "3"});
  EXPECT_NE(fresh.exit_code, 0);
  EXPECT_NE(fresh.output.find("--steps-more extends a resumed run, and there is no checkpoint"),
            std::string::npos)
      << fresh.output;
  EXPECT_FALSE(AnyWorkerLogged(fresh.output)) << fresh.output;
}

TEST(OperationsTest, LauncherFlagOverridesTheEnvironmentAndNamesWhatIsMissing) {
  const std::string root = TempDir("launcher");
  const std::string run = "'" + BatonBinary() +
                          "' run configs/gpt-tiny.yaml --set train.steps=2 --set parallel.stages=2"
                          " --log-level warn --set output.dir=" +
                          root;
  // Inside a one-task Slurm allocation, auto means srun's tasks, which are too few...
  const CommandResult slurm =
      RunShell("cd '" + SourceDir() + "' && SLURM_PROCID=0 SLURM_NTASKS=1 " + run);
  EXPECT_NE(slurm.exit_code, 0);
  EXPECT_NE(slurm.output.find(
                "slurm started 1 processes but the plan has 2 stage(s) x 1 replica(s) = 2 ranks"),
            std::string::npos)
      << slurm.output;
  // ...and --launcher local spawns the workers itself.
  const CommandResult local = RunShell(
      "cd '" + SourceDir() + "' && SLURM_PROCID=0 SLURM_NTASKS=1 " + run + " --launcher local");
  EXPECT_EQ(local.exit_code, 0) << local.output;
  const CommandResult mpi = RunShell("cd '" + SourceDir() + "' && " + run + " --launcher mpi");
  EXPECT_NE(mpi.exit_code, 0);
  EXPECT_NE(mpi.output.find("--launcher mpi: OMPI_COMM_WORLD_RANK is not set"), std::string::npos)
      << mpi.output;
  const CommandResult version = RunBaton({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.output.rfind("baton ", 0), 0u) << version.output;
}

}  // namespace
}  // namespace baton::testing
