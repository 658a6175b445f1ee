// Every signal a terminal, Slurm, mpirun or a pipe sends ends a run the same way: the stages
// finish their step, write the stop checkpoint and the launcher exits 0 (core/stop_signals.h).
// Each case starts a real 2-stage gpt-tiny run, waits for an event in its log (never a sleep that
// decides the outcome), signals it, and checks the exit code, that no process is left, and that
// the checkpoint loads and training goes on from it.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/baton_process.h"

namespace baton {
namespace {

using namespace baton::testing;  // NOLINT: the process helpers
namespace fs = std::filesystem;

std::string RunCommand(const std::string& root, const std::string& extra = "") {
  return "'" + BatonBinary() +
         "' run configs/gpt-tiny.yaml --set train.log_every=1 --set parallel.stages=2"
         " --set output.dir=" +
         root + " " + extra;
}

// The stop checkpoint loads (verified against its manifest) and training goes on from it.
void ExpectResumable(const std::string& root) {
  ASSERT_TRUE(fs::exists(root + "/checkpoints/latest")) << root;
  const CommandResult resumed =
      RunShell("cd '" + SourceDir() + "' && timeout 120 '" + BatonBinary() +
               "' run configs/gpt-tiny.yaml --set train.steps=100000 --set train.log_every=1 --set "
               "output.dir=" +
               root + "/next --resume " + root + "/checkpoints 2>&1 | grep -m1 'resumed from'");
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
}

// Waits until every process below `shell` has gone (the run's exit line is written after).
void ExpectNoProcessLeft(int shell, const std::string& log) {
  ASSERT_TRUE(WaitFor(log, "exit=", 180)) << ReadFile(log);
  for (int pid : DescendantPids(shell)) EXPECT_FALSE(Running(pid)) << "pid " << pid << " left";
}

// The launcher: the background shell's only child.
int Launcher(int shell) {
  const std::vector<int> children = ChildPids(shell);
  return children.size() == 1 ? children.front() : -1;
}

struct Case {
  const char* name;
  // Who is signalled: the launcher, its process group (a terminal's Ctrl-C), or stage 1's worker.
  enum Target { kLauncher, kGroup, kWorker } target;
  int signal;
  const char* wait_for;  // the log line after which the signal is sent
  const char* extra;     // more options
};

class SignalTest : public ::testing::TestWithParam<Case> {};

TEST_P(SignalTest, EndsWithTheStopCheckpointExitZeroAndNoProcessLeft) {
  const Case& c = GetParam();
  const std::string root = TempDir(std::string("signal-") + c.name);
  const std::string log = root + "/log";
  // setsid: the run has its own process group, as a job in a terminal has.
  const int shell = Background(
      "setsid " + RunCommand(root, std::string("--set train.steps=100000 ") + c.extra), log);
  ASSERT_TRUE(WaitFor(log, c.wait_for, 120)) << ReadFile(log);
  const int launcher = Launcher(shell);
  ASSERT_GT(launcher, 0);
  switch (c.target) {
    case Case::kLauncher:
      kill(launcher, c.signal);
      break;
    case Case::kGroup:
      kill(-getpgid(launcher), c.signal);
      break;
    case Case::kWorker: {
      const int worker = WorkerPid(shell, 1);
      ASSERT_GT(worker, 0) << ReadFile(log);
      kill(worker, c.signal);
      break;
    }
  }
  ExpectNoProcessLeft(shell, log);
  const std::string text = ReadFile(log);
  EXPECT_NE(text.find("exit=0"), std::string::npos) << text;
  EXPECT_EQ(text.find("killed by signal"), std::string::npos) << text;
  ExpectResumable(root);
}

INSTANTIATE_TEST_SUITE_P(
    Paths, SignalTest,
    ::testing::Values(
        Case{"CtrlCToTheProcessGroupMidStep", Case::kGroup, SIGINT, "step     3/", ""},
        Case{"SigtermToTheProcessGroupMidStep", Case::kGroup, SIGTERM, "step     3/", ""},
        Case{"SighupToTheLauncher", Case::kLauncher, SIGHUP, "step     3/", ""},
        Case{"SigusrOneToTheLauncher", Case::kLauncher, SIGUSR1, "step     3/", ""},
        Case{"SigtermToOneWorker", Case::kWorker, SIGTERM, "step     3/", ""},
        // Start-up: the coordinator is up, the workers are starting (or not yet started).
        Case{"CtrlCToTheProcessGroupAtStartUp", Case::kGroup, SIGINT, "coordinator on", ""},
        Case{"SigtermToTheLauncherAtStartUp", Case::kLauncher, SIGTERM, "coordinator on", ""},
        // A checkpoint every step: the signal lands while one is being written, or just after.
        Case{"SigtermToTheProcessGroupMidCheckpoint", Case::kGroup, SIGTERM,
             "checkpoint of step 3 written", "--set output.checkpoint_every=1"}),
    [](const auto& info) { return std::string(info.param.name); });

// `baton run ... | tee log` and Ctrl-C: tee dies of the same SIGINT, the launcher's stdout is a
// closed pipe; it must still finish the stop (SIGPIPE is ignored; the writes fail) and exit 0.
// `env --default-signal=INT`: a terminal's job starts with SIGINT at its default action (the
// background shell here would pass it on ignored, and tee would survive).
TEST(SignalPipeTest, CtrlCToARunPipedIntoTeeExitsZeroWithTheCheckpoint) {
  const std::string root = TempDir("signal-tee");
  const std::string log = root + "/log";
  const std::string teed = root + "/teed";
  const std::string code = root + "/launcher-exit";
  const int shell = Background("setsid env --default-signal=INT bash -c \"( " +
                                   RunCommand(root, "--set train.steps=100000") + "; echo \\$? > " +
                                   code + " ) 2>&1 | tee " + teed + "\"",
                               log);
  ASSERT_TRUE(WaitFor(teed, "step     3/", 120)) << ReadFile(teed);
  const std::vector<int> children = ChildPids(shell);
  ASSERT_EQ(children.size(), 1u);  // setsid's bash, the group leader
  kill(-getpgid(children.front()), SIGINT);
  ExpectNoProcessLeft(shell, log);
  EXPECT_EQ(ReadFile(code), "0\n") << ReadFile(log) << ReadFile(teed);
  ExpectResumable(root);
}

// SIGTERM to the launcher at 24 moments spread over a short run's whole life (start-up, steps,
// checkpoints, the end): every run ends with exit 0 and a checkpoint that loads. The moments come
// from a fixed seed; any moment must end clean, so the sleep decides nothing.
TEST(SignalFuzzTest, SigtermAtTwentyFourMomentsAlwaysEndsClean) {
  std::mt19937 rng(29);
  std::uniform_int_distribution<int> delay_ms(0, 2500);
  for (int trial = 0; trial < 24; ++trial) {
    const std::string root = TempDir("signal-fuzz-" + std::to_string(trial));
    const std::string log = root + "/log";
    const int shell =
        Background(RunCommand(root, "--set train.steps=30 --set output.checkpoint_every=5"), log);
    // The launcher exists once its first line is out; from there, a moment of the run's life.
    ASSERT_TRUE(WaitFor(log, "coordinator on", 120)) << ReadFile(log);
    const int wait = delay_ms(rng);
    std::this_thread::sleep_for(std::chrono::milliseconds(wait));
    if (const int launcher = Launcher(shell); launcher > 0) kill(launcher, SIGTERM);
    ExpectNoProcessLeft(shell, log);
    const std::string text = ReadFile(log);
    EXPECT_NE(text.find("exit=0"), std::string::npos) << "after " << wait << " ms:\n" << text;
    EXPECT_TRUE(fs::exists(root + "/checkpoints/latest")) << "after " << wait << " ms:\n" << text;
    if (::testing::Test::HasFailure()) return;
  }
}

// SIGTERM before main(), while the shared libraries initialise (tests/sigterm_at_load.cc, whose
// constructor sends it; the workers, which inherit LD_PRELOAD, get one each too): `baton run`
// blocks the stop signals before any library's constructor runs, so the request waits for the
// signal thread and the run stops after its first step with exit 0 and a checkpoint that loads,
// as a stop at start-up does (docs/protocol.md, "Signals"). Without the early block the default
// action killed it (exit 143). A command that does not train finishes and exits 0. The signal
// comes at the same point of start-up every time; three runs, in case it did not.
TEST(SignalAtStartUpTest, SigtermWhileTheLibrariesLoadStopsAfterTheFirstStepWithExitZero) {
  const std::string preload = "env LD_PRELOAD='" SIGTERM_AT_LOAD_LIBRARY "' ";
  const CommandResult version =
      RunShell("timeout 60 " + preload + "'" + BatonBinary() + "' --version");
  EXPECT_EQ(version.exit_code, 0) << version.output;
  EXPECT_NE(version.output.find("baton "), std::string::npos) << version.output;
  for (int trial = 0; trial < 3; ++trial) {
    const std::string root = TempDir("signal-at-load-" + std::to_string(trial));
    const CommandResult run = RunShell("cd '" + SourceDir() + "' && timeout 120 " + preload +
                                       RunCommand(root, "--set train.steps=100000"));
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_NE(run.output.find("stopping after step 1 as asked (signal)"), std::string::npos)
        << run.output;
    ExpectResumable(root);
    if (::testing::Test::HasFailure()) return;
  }
}

}  // namespace
}  // namespace baton
