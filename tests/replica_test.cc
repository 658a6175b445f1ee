// Data-parallel replicas (parallel.replicas) as real processes: P stages x R replicas under the
// local launcher and mpirun, checkpoints that hold one copy of the model and resume onto any P
// and R, and a killed replica that stops the job naming it.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <filesystem>
#include <regex>

#include "tests/baton_process.h"
#include "tests/run_report.h"

namespace baton::testing {
namespace {

namespace fs = std::filesystem;

nlohmann::json Train(const std::string& dir, const std::vector<std::string>& extra) {
  return RunAndReport("configs/gpt-tiny.yaml", dir, extra);
}

std::vector<std::string> Layout(int stages, int replicas, int64_t steps) {
  return {"--set", fmt::format("parallel.stages={}", stages),
          "--set", fmt::format("parallel.replicas={}", replicas),
          "--set", fmt::format("train.steps={}", steps)};
}

std::vector<std::string> Plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

double WorstRelativeDifference(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::abs(b[i]));
  }
  return worst;
}

// Layer files of a checkpoint step directory (one per layer, whoever wrote it).
size_t LayerFiles(const std::string& step_dir) {
  size_t count = 0;
  for (const auto& entry : fs::directory_iterator(step_dir)) {
    if (entry.path().filename().string().rfind("layer", 0) == 0) ++count;
  }
  return count;
}

TEST(ReplicaTest, TwoByTwoResumesOntoFourByOneAndBackAndKeepsOneCopyOfTheModel) {
  const std::string root = TempDir("replicas-resume");
  const nlohmann::json straight = Train(root + "/straight", Layout(2, 2, 20));
  ASSERT_EQ(straight.at("stages").size(), 4u);
  EXPECT_EQ(straight.at("stages")[3].at("replica"), 1);
  EXPECT_EQ(straight.at("stages")[3].at("stage"), 1);
  // Replicas book their gradient bucket as comm.
  EXPECT_GT(straight.at("stages")[2].at("memory").at("peak").at("comm").get<int64_t>(), 0);
  const nlohmann::json one_replica = Train(root + "/one", Layout(2, 1, 20));
  const double worst = WorstRelativeDifference(Losses(straight), Losses(one_replica));
  EXPECT_LE(worst, 1e-5);
  RecordProperty("worst_relative_loss_difference_2x2_vs_2x1", fmt::format("{:.3g}", worst));

  Train(root + "/first", Plus(Layout(2, 2, 20), {"--set", "output.checkpoint_every=10"}));
  const std::string step10 = root + "/first/checkpoints/step-10";
  ASSERT_TRUE(fs::exists(step10 + "/manifest.json"));
  // One copy: as many layer files as the 1-replica run writes.
  Train(root + "/first-r1", Plus(Layout(2, 1, 10), {}));
  EXPECT_EQ(LayerFiles(step10), LayerFiles(root + "/first-r1/checkpoints/step-10"));

  const std::vector<double> all = Losses(straight);
  const std::vector<double> rest(all.begin() + 10, all.end());
  // The same layout continues bit for bit; another P and R continues within 1e-5.
  const nlohmann::json same = Train(root + "/same", Plus(Layout(2, 2, 20), {"--resume", step10}));
  EXPECT_EQ(Losses(same), rest);
  EXPECT_EQ(same.at("param_checksum"), straight.at("param_checksum"));
  const nlohmann::json four =
      Train(root + "/four",
            Plus(Layout(4, 1, 20), {"--resume", step10, "--set", "output.checkpoint_every=15"}));
  EXPECT_LE(WorstRelativeDifference(Losses(four), rest), 1e-5);
  // ... and back: P=4,R=1's step 15 onto P=2,R=2.
  const nlohmann::json back = Train(
      root + "/back", Plus(Layout(2, 2, 20), {"--resume", root + "/four/checkpoints/step-15"}));
  EXPECT_LE(WorstRelativeDifference(Losses(back), std::vector<double>(all.begin() + 15, all.end())),
            1e-5);
}

TEST(ReplicaTest, ZeroCheckpointsHoldTheWholeStateAndResumeOntoAnyLayout) {
  const std::string root = TempDir("replicas-zero");
  const std::vector<std::string> zero = {"--set", "parallel.zero=1"};
  const nlohmann::json straight = Train(root + "/straight", Plus(Layout(2, 2, 20), zero));
  const nlohmann::json plain = Train(root + "/plain", Layout(2, 2, 20));
  EXPECT_LE(WorstRelativeDifference(Losses(straight), Losses(plain)), 1e-6);
  // Each replica's optimizer bytes are half of the unsharded run's (rounded to an element).
  for (int r = 0; r < 4; ++r) {
    const int64_t sharded =
        straight.at("stages")[r].at("memory").at("peak").at("optimizer").get<int64_t>();
    const int64_t whole =
        plain.at("stages")[r].at("memory").at("peak").at("optimizer").get<int64_t>();
    EXPECT_LE(std::abs(2 * sharded - whole), 16) << "rank " << r;
  }
  Train(root + "/first",
        Plus(Plus(Layout(2, 2, 20), zero), {"--set", "output.checkpoint_every=10"}));
  const std::string step10 = root + "/first/checkpoints/step-10";
  const std::vector<double> all = Losses(straight);
  const std::vector<double> rest(all.begin() + 10, all.end());
  // The checkpoint holds the whole optimizer state: the same layout continues bit for bit, one
  // without ZeRO or replicas within 1e-5.
  const nlohmann::json same =
      Train(root + "/same", Plus(Plus(Layout(2, 2, 20), zero), {"--resume", step10}));
  EXPECT_EQ(Losses(same), rest);
  EXPECT_EQ(same.at("param_checksum"), straight.at("param_checksum"));
  const nlohmann::json four = Train(root + "/four", Plus(Layout(4, 1, 20), {"--resume", step10}));
  EXPECT_LE(WorstRelativeDifference(Losses(four), rest), 1e-5);
  // ZeRO-2 sums the same gradients in the same order (each layer's as its backward ends): ZeRO-1's
  // bits, and each level's checkpoint continues the other's bit for bit.
  const std::vector<std::string> zero2 = {"--set", "parallel.zero=2"};
  const nlohmann::json two = Train(
      root + "/two", Plus(Plus(Layout(2, 2, 20), zero2), {"--set", "output.checkpoint_every=10"}));
  EXPECT_EQ(Losses(two), all);
  EXPECT_EQ(two.at("param_checksum"), straight.at("param_checksum"));
  const nlohmann::json two_onto_one =
      Train(root + "/two-onto-one",
            Plus(Plus(Layout(2, 2, 20), zero), {"--resume", root + "/two/checkpoints/step-10"}));
  EXPECT_EQ(Losses(two_onto_one), rest);
  const nlohmann::json one_onto_two =
      Train(root + "/one-onto-two", Plus(Plus(Layout(2, 2, 20), zero2), {"--resume", step10}));
  EXPECT_EQ(Losses(one_onto_two), rest);
  EXPECT_EQ(one_onto_two.at("param_checksum"), straight.at("param_checksum"));
  // And a checkpoint without ZeRO resumes into one with it.
  Train(root + "/plain-first", Plus(Layout(4, 1, 10), {}));
  const nlohmann::json into = Train(
      root + "/into",
      Plus(Plus(Layout(2, 2, 20), zero), {"--resume", root + "/plain-first/checkpoints/step-10"}));
  EXPECT_LE(WorstRelativeDifference(Losses(into), rest), 1e-5);
}

TEST(ReplicaTest, ZeroThreeTrainsLikeZeroOneAndItsCheckpointsResumeOntoAnyLevelAndLayout) {
  // ZeRO-3 gathers each layer's parameters from the replicas' shards for each use: ZeRO-1's bits
  // as real processes, at P = 2 x R = 2 and with tensor ranks at P = 2 x T = 2 x R = 2 (8
  // processes, zero3_keep step there). Its checkpoints hold the whole state: they resume bit for
  // bit at ZeRO-3 and ZeRO-1 (the same sums), and onto another R (or none) and ZeRO-0 closely.
  const std::string root = TempDir("replicas-zero3");
  const std::vector<std::string> zero1 = {"--set", "parallel.zero=1"};
  const std::vector<std::string> zero3 = {"--set", "parallel.zero=3"};
  const std::vector<std::string> every6 = {"--set", "output.checkpoint_every=6"};
  const nlohmann::json one = Train(root + "/one", Plus(Layout(2, 2, 12), zero1));
  const nlohmann::json three = Train(root + "/three", Plus(Plus(Layout(2, 2, 12), zero3), every6));
  EXPECT_EQ(Losses(three), Losses(one));
  EXPECT_EQ(three.at("param_checksum"), one.at("param_checksum"));
  const std::vector<std::string> tensor = {"--set", "parallel.tensor=2"};
  const nlohmann::json one8 = Train(root + "/one8", Plus(Plus(Layout(2, 2, 6), zero1), tensor));
  const nlohmann::json three8 = Train(
      root + "/three8",
      Plus(Plus(Plus(Layout(2, 2, 6), zero3), tensor), {"--set", "parallel.zero3_keep=step"}));
  ASSERT_EQ(three8.at("stages").size(), 8u);
  EXPECT_EQ(Losses(three8), Losses(one8));
  EXPECT_EQ(three8.at("param_checksum"), one8.at("param_checksum"));

  const std::string step6 = root + "/three/checkpoints/step-6";
  const std::vector<double> all = Losses(one);
  const std::vector<double> rest(all.begin() + 6, all.end());
  const nlohmann::json again =
      Train(root + "/again", Plus(Plus(Layout(2, 2, 12), zero3), {"--resume", step6}));
  EXPECT_EQ(Losses(again), rest);
  EXPECT_EQ(again.at("param_checksum"), one.at("param_checksum"));
  const nlohmann::json as_one =
      Train(root + "/as-one", Plus(Plus(Layout(2, 2, 12), zero1), {"--resume", step6}));
  EXPECT_EQ(Losses(as_one), rest);
  const nlohmann::json plain = Train(root + "/plain", Plus(Layout(2, 2, 12), {"--resume", step6}));
  const nlohmann::json alone = Train(root + "/alone", Plus(Layout(2, 1, 12), {"--resume", step6}));
  const nlohmann::json four =
      Train(root + "/four", Plus(Plus(Layout(1, 4, 12), zero3), {"--resume", step6}));
  for (const auto& [name, run] : {std::pair{"zero0", &plain}, {"r1", &alone}, {"1x4", &four}}) {
    const double worst = WorstRelativeDifference(Losses(*run), rest);
    EXPECT_LE(worst, 1e-7) << name;
    RecordProperty(fmt::format("worst_relative_loss_difference_{}", name),
                   fmt::format("{:.3g}", worst));
  }
}

TEST(ReplicaTest, PrunedZeroThreeRunsTrainLikeZeroOneAndResumeExactly) {
  // Pruned at step 2 under ZeRO-3 (masks from the whole matrices, each replica zeroing its
  // shard): ZeRO-1's bits; its step-4 checkpoint (masks and all) resumes bit for bit.
  const std::string root = TempDir("replicas-zero3-prune");
  const std::vector<std::string> prune = {"--set", "prune.at_step=2", "--set",
                                          "prune.sparsity=0.5"};
  const nlohmann::json one =
      Train(root + "/one", Plus(Plus(Layout(2, 2, 8), prune), {"--set", "parallel.zero=1"}));
  const std::vector<std::string> zero3 =
      Plus(Plus(Layout(2, 2, 8), prune), {"--set", "parallel.zero=3"});
  const nlohmann::json three =
      Train(root + "/three", Plus(zero3, {"--set", "output.checkpoint_every=4"}));
  EXPECT_EQ(Losses(three), Losses(one));
  EXPECT_EQ(three.at("param_checksum"), one.at("param_checksum"));
  const nlohmann::json again =
      Train(root + "/again", Plus(zero3, {"--resume", root + "/three/checkpoints/step-4"}));
  const std::vector<double> all = Losses(one);
  EXPECT_EQ(Losses(again), std::vector<double>(all.begin() + 4, all.end()));
  EXPECT_EQ(again.at("param_checksum"), one.at("param_checksum"));
}

TEST(ReplicaTest, EightBitStateUnderZeroCheckpointsWholeAndResumesOntoAnyLayout) {
  // optimizer.state int8 under ZeRO-1 and -3: the shards hold whole quantisation blocks, replica
  // 0 gathers codes and block maxima into the checkpoint, and a resume keeps each replica's
  // blocks: bit for bit at the same layout and at the other ZeRO level, and onto one replica.
  const std::string root = TempDir("replicas-zero-int8");
  const std::vector<std::string> int8 = {"--set", "optimizer.state=int8"};
  const std::vector<std::string> zero1 =
      Plus(Plus(Layout(2, 2, 8), int8), {"--set", "parallel.zero=1"});
  const std::vector<std::string> zero3 =
      Plus(Plus(Layout(2, 2, 8), int8), {"--set", "parallel.zero=3"});
  const nlohmann::json plain = Train(root + "/plain", Plus(Layout(2, 2, 8), int8));
  const nlohmann::json one =
      Train(root + "/one", Plus(zero1, {"--set", "output.checkpoint_every=4"}));
  EXPECT_LE(WorstRelativeDifference(Losses(one), Losses(plain)), 1e-7);
  const nlohmann::json three = Train(root + "/three", zero3);
  EXPECT_EQ(Losses(three), Losses(one));
  EXPECT_EQ(three.at("param_checksum"), one.at("param_checksum"));
  const std::string step4 = root + "/one/checkpoints/step-4";
  const std::vector<double> all = Losses(one);
  const std::vector<double> rest(all.begin() + 4, all.end());
  EXPECT_EQ(Losses(Train(root + "/again", Plus(zero1, {"--resume", step4}))), rest);
  EXPECT_EQ(Losses(Train(root + "/as-three", Plus(zero3, {"--resume", step4}))), rest);
  const nlohmann::json alone =
      Train(root + "/alone", Plus(Plus(Layout(2, 1, 8), int8), {"--resume", step4}));
  const double worst = WorstRelativeDifference(Losses(alone), rest);
  EXPECT_LE(worst, 1e-7);
  RecordProperty("worst_relative_loss_difference_onto_one_replica", fmt::format("{:.3g}", worst));
}

TEST(ReplicaTest, MpirunRunsTheSameJobAsTheLocalLauncher) {
  if (RunShell("command -v mpirun").exit_code != 0) GTEST_SKIP() << "mpirun is not installed";
  const std::string root = TempDir("replicas-mpi");
  const nlohmann::json local = Train(root + "/local", Layout(2, 2, 6));
  const std::string dir = root + "/mpi";
  const CommandResult mpi = RunShell(
      "cd '" + SourceDir() + "' && mpirun --allow-run-as-root --oversubscribe -np 4 '" +
      BatonBinary() +
      "' run configs/gpt-tiny.yaml --set parallel.stages=2 --set parallel.replicas=2" +
      " --set train.steps=6 --set output.dir=" + dir + " --report " + dir + "/report.json");
  ASSERT_EQ(mpi.exit_code, 0) << mpi.output;
  const nlohmann::json report = ReadJson(dir + "/report.json");
  EXPECT_EQ(Losses(report), Losses(local));
  EXPECT_EQ(report.at("param_checksum"), local.at("param_checksum"));
  // A world of the wrong size is refused, saying what the plan needs.
  const CommandResult wrong =
      RunShell("cd '" + SourceDir() + "' && mpirun --allow-run-as-root --oversubscribe -np 2 '" +
               BatonBinary() +
               "' run configs/gpt-tiny.yaml --set parallel.stages=2 --set parallel.replicas=2" +
               " --set train.steps=2 --set output.dir=" + root + "/wrong 2>&1");
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.output.find("2 stage(s) x 2 replica(s) = 4 ranks"), std::string::npos)
      << wrong.output;
}

TEST(ReplicaTest, AStalledReplicaTimesOutNamingTheStageGroupAndTheTableShowsReplicas) {
  // 1 stage x 2 replicas: rank 1 (replica 1) stops answering at step 2 (heartbeats go on), so
  // replica 0 waits in its stage's gradient all-reduce and gives up after parallel.timeout_s.
  const CommandResult result =
      RunShell("cd '" + SourceDir() + "' && BATON_TEST_STALL=1:2 '" + BatonFaultsBinary() +
               "' run configs/gpt-tiny.yaml --set train.steps=4 --set parallel.stages=1"
               " --set parallel.replicas=2 --set parallel.timeout_s=5 --set output.dir=" +
               TempDir("stalled-replica"));
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("stage 0 replica 0 (rank 0) failed"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("the data-parallel all-reduce of stage 0's gradients"),
            std::string::npos)
      << result.output;
  // The table: rank, stage, replica, status, blocked on, micro-batch, peer, waiting seconds.
  const std::regex row(R"(\n\s+0\s+0\s+0\s+failed\s+ALLREDUCE\s+-\s+1\s+[0-9.]+\s)");
  EXPECT_TRUE(std::regex_search(result.output, row)) << result.output;
  const std::regex stalled(R"(\n\s+1\s+0\s+1\s+running\s)");
  EXPECT_TRUE(std::regex_search(result.output, stalled)) << result.output;
  // The flight recorder: replica 0 in the all-reduce with the gradients' bytes, replica 1 blamed.
  const std::regex waiting(
      R"(stage 0 replica 0 \(rank 0\): ALLREDUCE waiting for rank 1, [1-9][0-9]* bytes \(step 2\))");
  EXPECT_TRUE(std::regex_search(result.output, waiting)) << result.output;
  EXPECT_NE(result.output.find("likely culprit: stage 0 replica 1 (rank 1)"), std::string::npos)
      << result.output;
}

TEST(ReplicaTest, ASigkilledReplicaStopsTheJobNamingItAndLeavesNoProcess) {
  const std::string root = TempDir("replicas-kill");
  const std::string log = root + "/log";
  const int shell = Background("'" + BatonBinary() +
                                   "' run configs/gpt-tiny.yaml --set parallel.stages=2 --set "
                                   "parallel.replicas=2 --set train.steps=100000 --set "
                                   "train.log_every=1 --set output.dir=" +
                                   root + "/out",
                               log);
  ASSERT_TRUE(WaitFor(log, "step     2/", 300)) << ReadFile(log);
  const std::vector<int> processes = DescendantPids(shell);
  // The ranks' shared-memory segments lost their names once their peers mapped them: a kill
  // from here on, mid-collective or not, leaves nothing under /dev/shm.
  for (int pid : processes) EXPECT_EQ(SharedMemoryNamesOf(pid).size(), 0u) << pid;
  const int victim = WorkerPid(shell, 3);  // stage 1 of replica 1
  ASSERT_GT(victim, 0) << ReadFile(log);
  kill(victim, SIGKILL);
  ASSERT_TRUE(WaitFor(log, "exit=", 300)) << ReadFile(log);
  const std::string text = ReadFile(log);
  EXPECT_EQ(text.find("exit=0"), std::string::npos) << text;
  EXPECT_NE(text.find("stage 1 replica 1 (rank 3) worker process killed by signal 9"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("replica"), std::string::npos) << text;  // the rank table's column
  EXPECT_GE(processes.size(), 4u) << text;
  for (int pid : processes) {
    EXPECT_FALSE(Running(pid)) << "process " << pid << " outlived the job";
    EXPECT_EQ(SharedMemoryNamesOf(pid).size(), 0u) << "process " << pid << " left shared memory";
  }
}

}  // namespace
}  // namespace baton::testing
