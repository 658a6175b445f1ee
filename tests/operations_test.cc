// Operations: checkpoints that resume exactly (onto another stage count too), clean stops on
// SIGTERM, restarts after a killed worker, and GPT-2 safetensors out of a checkpoint.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/baton_process.h"

namespace baton::testing {
namespace {

namespace fs = std::filesystem;

nlohmann::json Train(const std::string& dir, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"run",      "configs/gpt-tiny.yaml",
                                   "--report", dir + "/report.json",
                                   "--set",    "output.dir=" + dir};
  args.insert(args.end(), extra.begin(), extra.end());
  const CommandResult result = RunBaton(args);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  return result.exit_code == 0 ? ReadJson(dir + "/report.json") : nlohmann::json();
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
  const std::vector<int> launcher = ChildPids(shell);
  ASSERT_EQ(launcher.size(), 1u);
  kill(launcher.front(), SIGTERM);
  ASSERT_TRUE(WaitFor(log, "exit=", 120)) << ReadFile(log);
  const std::string text = ReadFile(log);
  EXPECT_NE(text.find("exit=0"), std::string::npos) << text;
  ASSERT_TRUE(fs::exists(root + "/checkpoints/latest")) << text;
  // The checkpoint loads (verified against its manifest) and training goes on from it.
  const CommandResult resumed =
      RunShell("cd '" + SourceDir() + "' && timeout 120 '" + BatonBinary() +
               "' run configs/gpt-tiny.yaml --set train.steps=100000 --set parallel.stages=1" +
               " --set train.log_every=1 --set output.dir=" + root + "/next --resume " + root +
               "/checkpoints 2>&1 | grep -m1 'resumed from'");
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
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
  EXPECT_EQ(ReadJson(dir + "/report.json").at("param_checksum"), straight.at("param_checksum"));
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
}

}  // namespace
}  // namespace baton::testing
