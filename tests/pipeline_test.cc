// Integration tests of the distributed pipeline: real `baton` processes exchanging activations
// and gradients over Gloo, coordinated over gRPC (issue: the distributed pipeline).
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/baton_process.h"

namespace baton::testing {
namespace {

struct RunSummary {
  std::vector<double> losses;
  std::string checksum;
};

RunSummary Train(const std::string& name, const std::vector<std::string>& overrides) {
  const std::string dir = TempDir(name);
  const std::string report = dir + "/report.json";
  std::vector<std::string> args = {
      "run",   "configs/gpt-tiny.yaml", "--report", report,
      "--set", "train.steps=3",         "--set",    "output.dir=" + dir};
  for (const std::string& o : overrides) {
    args.push_back("--set");
    args.push_back(o);
  }
  const CommandResult result = RunBaton(args);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  if (result.exit_code != 0) return {};
  const nlohmann::json j = ReadJson(report);
  return {Losses(j), j.at("param_checksum").get<std::string>()};
}

class ScheduleEquivalenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ScheduleEquivalenceTest, TwoAndFourStagesAreBitIdenticalToOneStage) {
  const std::string schedule = "parallel.schedule=" + GetParam();
  const RunSummary one = Train("one", {schedule, "parallel.stages=1"});
  ASSERT_EQ(one.losses.size(), 3u);
  for (const char* stages : {"parallel.stages=2", "parallel.stages=4"}) {
    const RunSummary many = Train("many", {schedule, stages});
    EXPECT_EQ(many.losses, one.losses) << stages;  // exact: same bits, not a tolerance
    EXPECT_EQ(many.checksum, one.checksum) << stages;
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, ScheduleEquivalenceTest,
                         ::testing::Values("gpipe", "1f1b", "zb-h1"), [](const auto& info) {
                           std::string name = info.param;
                           std::erase(name, '-');
                           return name;
                         });

TEST(PipelineTest, InterleavedTwoStagesTwoChunksIsBitIdenticalToOneStage) {
  const RunSummary one = Train("one", {"parallel.stages=1"});
  const RunSummary interleaved = Train(
      "interleaved", {"parallel.stages=2", "parallel.schedule=interleaved", "parallel.chunks=2"});
  EXPECT_EQ(interleaved.losses, one.losses);
  EXPECT_EQ(interleaved.checksum, one.checksum);
}

TEST(PipelineTest, DifferentSchedulesComputeTheSameStep) {
  // GPipe and 1F1B only reorder the same work: identical bits.
  const RunSummary gpipe = Train("gpipe", {"parallel.stages=2", "parallel.schedule=gpipe"});
  const RunSummary one_f_one_b = Train("1f1b", {"parallel.stages=2", "parallel.schedule=1f1b"});
  EXPECT_EQ(gpipe.losses, one_f_one_b.losses);
  EXPECT_EQ(gpipe.checksum, one_f_one_b.checksum);
}

TEST(PipelineTest, MpirunGivesTheLocalLaunchersChecksum) {
  if (RunShell("command -v mpirun").exit_code != 0) GTEST_SKIP() << "mpirun is not installed";
  const RunSummary local = Train("local", {"parallel.stages=4"});
  const std::string dir = TempDir("mpi");
  const std::string report = dir + "/report.json";
  const CommandResult mpi = RunShell(
      "cd '" + SourceDir() + "' && mpirun --allow-run-as-root --oversubscribe -np 4 '" +
      BatonBinary() + "' run configs/gpt-tiny.yaml --set train.steps=3 --set parallel.stages=4" +
      " --set output.dir=" + dir + " --report " + report);
  ASSERT_EQ(mpi.exit_code, 0) << mpi.output;
  const nlohmann::json j = ReadJson(report);
  EXPECT_EQ(Losses(j), local.losses);
  EXPECT_EQ(j.at("param_checksum").get<std::string>(), local.checksum);
}

// A TCP port no socket holds now: the kernel's pick for a loopback bind to port 0.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  const bool ok = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&address), length) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  if (fd >= 0) close(fd);
  return ok ? ntohs(address.sin_port) : 0;
}

// torchrun's environment, as torchrun or a Kubeflow PyTorchJob gives it: four processes with
// only RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set train the local launcher's
// bits (rank 0 hosts the coordinator on MASTER_PORT; no BATON_* variable is needed).
TEST(PipelineTest, TorchrunsVariablesGiveTheLocalLaunchersChecksum) {
  const RunSummary local = Train("local", {"parallel.stages=4"});
  const std::string dir = TempDir("torchrun");
  const int port = FreePort();
  ASSERT_GT(port, 0);
  std::string ranks;
  for (int rank = 0; rank < 4; ++rank) {
    ranks += fmt::format(
        "env -u BATON_COORDINATOR -u BATON_TOKEN -u TORCHELASTIC_RUN_ID RANK={0} WORLD_SIZE=4 "
        "LOCAL_RANK={0} MASTER_ADDR=127.0.0.1 MASTER_PORT={1} '{2}' run configs/gpt-tiny.yaml "
        "--set train.steps=3 --set parallel.stages=4 --set output.dir='{3}/out' "
        "--report '{3}/report.json' > '{3}/rank{0}.log' 2>&1 & pids=\"$pids $!\"; ",
        rank, port, BatonBinary(), dir);
  }
  const CommandResult run = RunShell("cd '" + SourceDir() + "' && pids=; " + ranks +
                                     "status=0; for p in $pids; do wait $p || status=1; done; "
                                     "tail -n 5 '" +
                                     dir + "'/rank*.log; exit $status");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json j = ReadJson(dir + "/report.json");
  EXPECT_EQ(Losses(j), local.losses);
  EXPECT_EQ(j.at("param_checksum").get<std::string>(), local.checksum);
}

TEST(PipelineTest, MoreStagesThanLayersIsAClearErrorBeforeAnyProcessStarts) {
  const CommandResult result =
      RunBaton({"run", "configs/gpt-tiny.yaml", "--set", "parallel.stages=7"});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("cannot cut a 6-layer graph into 7"), std::string::npos)
      << result.output;
  EXPECT_EQ(result.output.find("coordinator on"), std::string::npos) << result.output;
}

TEST(PipelineTest, UnknownConfigKeyNamesFileLineAndKeyAndWritesNothing) {
  const std::string dir = TempDir("badkey");
  const std::string config = dir + "/bad.yaml";
  std::ifstream in(SourceDir() + "/configs/gpt-tiny.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.replace(text.find("  steps: 300"), 11, "  stepz: 300");
  std::ofstream(config) << text;
  const std::string report = dir + "/report.json";
  const CommandResult result = RunBaton({"run", config, "--report", report});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("bad.yaml:"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("train.stepz"), std::string::npos) << result.output;
  EXPECT_FALSE(std::filesystem::exists(report));
}

bool Alive(int pid) { return kill(pid, 0) == 0; }

TEST(PipelineTest, KillingOneWorkerStopsTheJobNamingTheStageAndLeavesNoProcess) {
  const std::string dir = TempDir("kill");
  const std::string log = dir + "/log";
  // The subshell records the launcher's exit code after it ends.
  const int shell = Background("'" + BatonBinary() +
                                   "' run configs/gpt-tiny.yaml --set train.steps=100000"
                                   " --set train.log_every=1 --set parallel.stages=2"
                                   " --set output.dir=" +
                                   dir + "/out",
                               log);
  // Training is under way (a progress line): kill stage 1's worker.
  ASSERT_TRUE(WaitFor(log, "step     1/", 120)) << ReadFile(log);
  const std::vector<int> launcher = ChildPids(shell);
  ASSERT_EQ(launcher.size(), 1u);
  const std::vector<int> workers = ChildPids(launcher.front());
  ASSERT_EQ(workers.size(), 2u);
  const int victim = WorkerPid(shell, 1);
  ASSERT_GT(victim, 0);
  kill(victim, SIGKILL);
  // The shell writes exit= once it has reaped the launcher; the launcher reaps its workers.
  ASSERT_TRUE(WaitFor(log, "exit=", 120)) << ReadFile(log);
  const std::string text = ReadFile(log);
  EXPECT_FALSE(Alive(launcher.front())) << text;
  EXPECT_NE(text.find("exit=1"), std::string::npos) << text;
  EXPECT_NE(text.find("stage 1 worker process killed by signal 9"), std::string::npos) << text;
  for (int pid : workers) EXPECT_FALSE(Alive(pid)) << "worker " << pid << " outlived the job";
}

}  // namespace
}  // namespace baton::testing
