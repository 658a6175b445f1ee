#include "scheduler/schedule_command.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/files.h"
#include "core/temp_dir.h"
#include "scheduler/communication.h"
#include "scheduler/generators.h"
#include "scheduler/schedule.h"

namespace baton {
namespace {

struct Outcome {
  int code;
  std::string out;
  std::string err;
};

Outcome RunCommand(const ScheduleCommandOptions& options) {
  std::ostringstream out;
  std::ostringstream err;
  const int code = RunScheduleCommand(options, out, err);
  return {code, out.str(), err.str()};
}

ScheduleCommandOptions Options(const std::string& schedule, int p, int m, int v = 1) {
  ScheduleCommandOptions options;
  options.schedule = schedule;
  options.stages = p;
  options.microbatches = m;
  options.chunks = v;
  return options;
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  static const test_util::TempDir dir;  // removed at exit
  const std::string path = dir / name;
  std::ofstream(path) << text;
  return path;
}

TEST(ScheduleCommandTest, TextPrintsTheGridAndTheFigures) {
  const Outcome outcome = RunCommand(Options("1f1b", 4, 8));
  EXPECT_EQ(outcome.code, kScheduleCommandOk) << outcome.err;
  EXPECT_TRUE(outcome.err.empty());
  EXPECT_NE(outcome.out.find("makespan 33 cost units, bubble fraction 0.272727"), std::string::npos)
      << outcome.out;
  EXPECT_NE(outcome.out.find("stage 3   .  .  .  F0 B0---"), std::string::npos) << outcome.out;
  EXPECT_NE(outcome.out.find("peak_in_flight"), std::string::npos);
}

TEST(ScheduleCommandTest, JsonCarriesTheDocumentedFields) {
  ScheduleCommandOptions options = Options("zb-h1", 4, 8);
  options.format = "json";
  const Outcome outcome = RunCommand(options);
  ASSERT_EQ(outcome.code, kScheduleCommandOk) << outcome.err;
  const auto json = nlohmann::json::parse(outcome.out);
  EXPECT_EQ(json["schedule"], "zb-h1");
  EXPECT_EQ(json["stages"], 4);
  EXPECT_EQ(json["microbatches"], 8);
  EXPECT_EQ(json["makespan"].get<double>(), 27);
  EXPECT_DOUBLE_EQ(json["bubble_fraction"].get<double>(), 3.0 / 27);
  ASSERT_EQ(json["per_stage"].size(), 4u);
  for (const auto& stage : json["per_stage"]) {
    for (const char* key : {"stage", "busy", "idle", "peak_in_flight"}) {
      EXPECT_TRUE(stage.contains(key)) << key;
    }
  }
}

TEST(ScheduleCommandTest, CsvWrittenByTheCommandLoadsBackToTheSameSchedule) {
  struct Case {
    std::string name;
    int chunks;
    std::string comm;
    CommPlacement placement;
  };
  for (const Case& each : {Case{"gpipe", 1, "async", CommPlacement::kJustInTime},
                           Case{"1f1b", 1, "async", CommPlacement::kJustInTime},
                           Case{"interleaved", 3, "async", CommPlacement::kJustInTime},
                           Case{"zb-h1", 1, "async", CommPlacement::kJustInTime},
                           Case{"zb-v", 2, "async", CommPlacement::kJustInTime},
                           Case{"zb-v", 2, "rendezvous", CommPlacement::kRendezvousSafe},
                           Case{"dualpipev", 2, "async", CommPlacement::kJustInTime},
                           Case{"1f1b", 1, "rendezvous", CommPlacement::kRendezvousSafe}}) {
    ScheduleCommandOptions options = Options(each.name, 3, 5, each.chunks);
    options.format = "csv";
    options.comm = each.comm;
    const Outcome outcome = RunCommand(options);
    ASSERT_EQ(outcome.code, kScheduleCommandOk) << outcome.err;
    const Schedule expected =
        InsertCommunication(MakeSchedule(each.name, 3, 5, each.chunks), each.placement);
    EXPECT_EQ(ScheduleFromCsv(outcome.out), expected) << each.name;

    // And the file feeds back into the command unchanged.
    ScheduleCommandOptions again;
    again.file = WriteTemp("baton_command_roundtrip.csv", outcome.out);
    again.format = "csv";
    again.comm = each.comm;
    EXPECT_EQ(RunCommand(again).out, outcome.out);
  }
}

TEST(ScheduleCommandTest, ComputeOnlyFileGetsCommunicationInserted) {
  ScheduleCommandOptions options;
  options.file = WriteTemp("baton_command_custom.csv", "F0,F1,B0,B1\nF0,B0,F1,B1\n");
  options.format = "csv";
  const Outcome outcome = RunCommand(options);
  ASSERT_EQ(outcome.code, kScheduleCommandOk) << outcome.err;
  Schedule expected = OneFOneB(2, 2);
  expected.name = "custom";
  EXPECT_EQ(ScheduleFromCsv(outcome.out), InsertCommunication(expected));
}

TEST(ScheduleCommandTest, InvalidFileExitsNonZeroWithTheMarkedGrid) {
  ScheduleCommandOptions options;
  options.file = WriteTemp("baton_command_invalid.csv", "F0,F1,B0,B1\nB0,F0,F1,B1\n");
  const Outcome outcome = RunCommand(options);
  EXPECT_EQ(outcome.code, kScheduleCommandInvalidSchedule);
  EXPECT_TRUE(outcome.out.empty());
  EXPECT_NE(outcome.err.find("[B0]"), std::string::npos) << outcome.err;
  EXPECT_NE(outcome.err.find("<-- ERROR HERE"), std::string::npos) << outcome.err;
}

// torch's CSV form both ways: --format torch-csv writes the compute actions as torch does
// (DualPipeV's overlapped pairs included: the file torch 2.15.0 wrote), and a torch CSV that
// cannot run (rank 1 starts with chunk 1's input gradient, before that chunk's forward) fails
// with the marked grid.
TEST(ScheduleCommandTest, TorchCsvIsWrittenAsTorchWritesItAndAWrongOneFailsWithTheGrid) {
  ScheduleCommandOptions options = Options("dualpipev", 2, 4, 2);
  options.format = "torch-csv";
  const Outcome outcome = RunCommand(options);
  ASSERT_EQ(outcome.code, kScheduleCommandOk) << outcome.err;
  EXPECT_EQ(outcome.out,
            ReadFileToString(std::string(BATON_SOURCE_DIR) +
                             "/tests/fixtures/torch_schedules/dualpipev_p2_m4_v2.csv"));
  ScheduleCommandOptions wrong;
  wrong.file =
      WriteTemp("baton_command_torch.csv", "0F0,2F0,2I0,2W0,0I0,0W0\n3I0,1F0,3F0,3W0,1I0,1W0\n");
  const Outcome failed = RunCommand(wrong);
  EXPECT_EQ(failed.code, kScheduleCommandInvalidSchedule);
  EXPECT_NE(failed.err.find("<-- ERROR HERE"), std::string::npos) << failed.err;
}

TEST(ScheduleCommandTest, RendezvousCommRejectsAScheduleThatNeedsBufferedSends) {
  ScheduleCommandOptions options;
  options.file =
      WriteTemp("baton_command_jit.csv", ScheduleToCsv(InsertCommunication(OneFOneB(2, 4))));
  EXPECT_EQ(RunCommand(options).code, kScheduleCommandOk);
  options.comm = "rendezvous";
  const Outcome outcome = RunCommand(options);
  EXPECT_EQ(outcome.code, kScheduleCommandInvalidSchedule);
  EXPECT_NE(outcome.err.find("deadlock"), std::string::npos) << outcome.err;
}

// The check: `baton schedule --schedule zb-v --stages 4 --microbatches 8 --format text`
// renders with 2 chunks (no --chunks needed), validates, and its bubble with the paper's unit costs
// (F = I = W = 1 per chunk action) is at most a third of 1F1B's (F = 1, B = 2): 3/51 against 3/11.
TEST(ScheduleCommandTest, ZeroBubbleVRendersWithTwoChunksAndAThirdOfOneF1BsBubble) {
  const Outcome zb_v = RunCommand(Options("zb-v", 4, 8));
  ASSERT_EQ(zb_v.code, kScheduleCommandOk) << zb_v.err;
  EXPECT_NE(zb_v.out.find("makespan 51 cost units, bubble fraction 0.0588235"), std::string::npos)
      << zb_v.out;
  EXPECT_NE(zb_v.out.find("7F0"), std::string::npos) << zb_v.out;  // stage 0's chunk 1
  ScheduleCommandOptions json = Options("zb-v", 4, 8);
  json.format = "json";
  const double zb_v_bubble =
      nlohmann::json::parse(RunCommand(json).out)["bubble_fraction"].get<double>();
  json.schedule = "1f1b";
  const double one_f_one_b_bubble =
      nlohmann::json::parse(RunCommand(json).out)["bubble_fraction"].get<double>();
  EXPECT_LE(zb_v_bubble, one_f_one_b_bubble / 3);
}

// Without --chunks each schedule takes the least it runs: 2 for the looped and V ones (a new
// user's `--schedule looped-bfs` works as `--schedule zb-v` does), 1 for the rest; an explicit
// --chunks 1 is still refused where it cannot run.
TEST(ScheduleCommandTest, WithoutChunksEachScheduleTakesTheLeastItRuns) {
  for (const std::string& name : ScheduleNames()) {
    const Outcome outcome = RunCommand(Options(name, 4, 8, /*v=*/0));
    ASSERT_EQ(outcome.code, kScheduleCommandOk) << name << ": " << outcome.err;
    const bool one = name == "gpipe" || name == "1f1b" || name == "zb-h1" || name == "zb-h2";
    EXPECT_NE(outcome.out.find(one ? "1 chunk(s) per stage" : "2 chunk(s) per stage"),
              std::string::npos)
        << name << ": " << outcome.out;
  }
  EXPECT_NE(RunCommand(Options("looped-bfs", 4, 8, 1)).code, kScheduleCommandOk);
}

TEST(ScheduleCommandTest, EveryScheduleNameRendersWithItsOwnChunks) {
  for (const std::string& name : ScheduleNames()) {
    const bool looped = FindScheduleKind(name)->chunks == ChunkRule::kMany;
    for (const std::string comm : {"async", "rendezvous"}) {
      ScheduleCommandOptions options = Options(name, 4, 8, looped ? 2 : 1);
      options.comm = comm;
      const Outcome outcome = RunCommand(options);
      EXPECT_EQ(outcome.code, kScheduleCommandOk) << name << " " << comm << ": " << outcome.err;
      EXPECT_NE(outcome.out.find("bubble fraction"), std::string::npos) << name;
    }
  }
}

TEST(ScheduleCommandTest, CostsChangeTheFigures) {
  ScheduleCommandOptions options = Options("1f1b", 4, 8);
  options.format = "json";
  options.costs = "F=1,B=1";
  const Outcome outcome = RunCommand(options);
  ASSERT_EQ(outcome.code, kScheduleCommandOk) << outcome.err;
  EXPECT_EQ(nlohmann::json::parse(outcome.out)["makespan"].get<double>(), 22);
}

TEST(ScheduleCommandTest, SvgAndChromeFormatsRender) {
  ScheduleCommandOptions options = Options("interleaved", 4, 8, 2);
  options.format = "svg";
  Outcome outcome = RunCommand(options);
  ASSERT_EQ(outcome.code, kScheduleCommandOk) << outcome.err;
  EXPECT_EQ(outcome.out.rfind("<svg", 0), 0u);
  options.format = "chrome";
  outcome = RunCommand(options);
  ASSERT_EQ(outcome.code, kScheduleCommandOk) << outcome.err;
  EXPECT_EQ(nlohmann::json::parse(outcome.out)["traceEvents"].size(), 4u + 4 * 2 * 8 * 2);
}

TEST(ScheduleCommandTest, BadArgumentsExitWithTwoAndSayWhich) {
  auto expect_bad = [](ScheduleCommandOptions options, const std::string& why) {
    const Outcome outcome = RunCommand(options);
    EXPECT_EQ(outcome.code, kScheduleCommandBadArguments) << why;
    EXPECT_NE(outcome.err.find(why), std::string::npos) << outcome.err;
    EXPECT_TRUE(outcome.out.empty());
  };
  ScheduleCommandOptions options = Options("1f1b", 4, 8);
  options.format = "png";
  expect_bad(options, "--format");
  options = Options("1f1b", 4, 8);
  options.costs = "F=fast";
  expect_bad(options, "--costs");
  options.costs = "F@9=1";
  expect_bad(options, "virtual stage 9");
  options = Options("1f1b", 4, 8);
  options.comm = "smoke-signals";
  expect_bad(options, "--comm");
  expect_bad(Options("2f2b", 4, 8), "unknown schedule '2f2b'");
  expect_bad(Options("1f1b", 4, 8, 2), "chunks > 1 needs 'interleaved'");
  expect_bad(Options("interleaved", 4, 8, 1), "needs chunks >= 2");
  expect_bad(Options("zb-v", 4, 8, 3), "runs 2 chunks per stage");
  expect_bad(Options("1f1b", 0, 8), "--stages");
  options = {};
  options.file = testing::TempDir() + "/no_such_schedule.csv";
  expect_bad(options, "cannot read");
  options.file = WriteTemp("baton_command_shape.csv", "F0,B0\n");
  options.stages = 2;
  expect_bad(options, "--stages 2 disagrees");
}

}  // namespace
}  // namespace baton
