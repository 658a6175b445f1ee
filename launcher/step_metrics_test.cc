// Per-step metrics: reports assembled into steps, the report's step entries, and metrics.jsonl
// written line by line and appended to on a resume.
#include "launcher/step_metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/temp_dir.h"

namespace baton {
namespace {

WorkerReport StepOf(int rank, int64_t step) {
  WorkerReport r;
  r.rank = rank;
  r.stage = rank;
  r.step = step;
  r.memory_peak = {{"total", 1000 * (rank + 1) + step}};
  if (rank == 1) {
    r.loss = 5.0 - static_cast<double>(step);
    r.metrics = {{"lr", 1e-3},
                 {"grad_norm", 0.5},
                 {"tokens_per_s", 100.0},
                 {"loss_scale", 1.0},
                 {"skipped", 0.0}};
    r.timings_s = {{"step", 0.25}, {"compute", 0.125}, {"wait", 0.0625}};
  }
  return r;
}

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(StepAssemblerTest, AStepIsCompleteOnceEveryRankReportedItAndStepsComeOutInOrder) {
  StepAssembler assembler(ParallelLayout(/*stages=*/2, 1, 1), /*head_rank=*/1, /*attempt=*/3);
  EXPECT_TRUE(assembler.Add({StepOf(1, 1), StepOf(1, 2)}).empty());  // rank 0 has not reported
  const std::vector<JobStep> done = assembler.Add({StepOf(0, 1), StepOf(0, 2), StepOf(0, 3)});
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].step, 1);
  EXPECT_EQ(done[1].step, 2);
  EXPECT_EQ(done[1].attempt, 3);
  EXPECT_EQ(done[1].head.loss, 3.0);
  EXPECT_EQ(done[1].memory_peak.at(0).at("total"), 1002);
  EXPECT_EQ(done[1].memory_peak.at(1).at("total"), 2002);
  // Step 3: rank 0 reported it, the head did not (it died): nothing to log, even when flushed.
  EXPECT_TRUE(assembler.Flush().empty());
}

TEST(StepAssemblerTest, FlushGivesTheHeadsStepsThatAPeerNeverReported) {
  StepAssembler assembler(ParallelLayout(2, 1, 1), 1, 0);
  EXPECT_TRUE(assembler.Add({StepOf(0, 1), StepOf(1, 1), StepOf(1, 2)}).size() == 1u);
  const std::vector<JobStep> flushed = assembler.Flush();
  ASSERT_EQ(flushed.size(), 1u);
  EXPECT_EQ(flushed[0].step, 2);
  EXPECT_EQ(flushed[0].memory_peak.count(0), 0u);
  EXPECT_TRUE(assembler.Flush().empty());
}

// Two replicas of a stage with an MoE layer: their figures are summed per layer, the losses
// averaged over the micro-batches, the busiest expert put beside the mean.
TEST(StepMetricsTest, ExpertsAreSummedOverTheReplicasPerLayer) {
  StepAssembler assembler(ParallelLayout(/*stages=*/1, 1, /*replicas=*/2), /*head_rank=*/0, 0);
  const auto expert_report = [](int rank, double first, double second) {
    WorkerReport r = StepOf(rank, 1);
    r.metrics["experts/block.1/tokens"] = 8;
    r.metrics["experts/block.1/dropped"] = 1;
    r.metrics["experts/block.1/microbatches"] = 2;
    r.metrics["experts/block.1/aux_loss"] = 2.5;
    r.metrics["experts/block.1/z_loss"] = 0.5;
    r.metrics["experts/block.1/load/0"] = first;
    r.metrics["experts/block.1/load/1"] = second;
    return r;
  };
  const std::vector<JobStep> done = assembler.Add({expert_report(0, 6, 2), expert_report(1, 3, 5)});
  ASSERT_EQ(done.size(), 1u);
  const nlohmann::json experts = ExpertsJson(done[0]);
  ASSERT_TRUE(experts.contains("block.1")) << experts.dump();
  const nlohmann::json& layer = experts.at("block.1");
  EXPECT_EQ(layer.at("tokens"), 16);
  EXPECT_EQ(layer.at("dropped"), 2);
  EXPECT_EQ(layer.at("tokens_per_expert"), nlohmann::json::array({9, 7}));
  EXPECT_DOUBLE_EQ(layer.at("max_over_mean").get<double>(), 9.0 / 8.0);
  EXPECT_DOUBLE_EQ(layer.at("aux_loss").get<double>(), 5.0 / 4);
  EXPECT_DOUBLE_EQ(layer.at("z_loss").get<double>(), 1.0 / 4);
  EXPECT_EQ(ReportStepJson(done[0]).at("experts"), experts);
  EXPECT_FALSE(
      ReportStepJson(assembler.Add({StepOf(0, 2), StepOf(1, 2)}).at(0)).contains("experts"));
}

// One expert taking over 90% of a layer's tokens for 10 steps in a row is named once; a
// balanced step restarts the count.
TEST(StepMetricsTest, ACollapsedRouterIsNamedOnceAfterTenSteps) {
  ExpertCollapseWatch watch;
  const auto step_with = [](double busiest) {
    JobStep step;
    step.experts = {{"experts/block.2/tokens", 100},
                    {"experts/block.2/load/0", busiest},
                    {"experts/block.2/load/1", 100 - busiest},
                    {"experts/block.3/tokens", 100},
                    {"experts/block.3/load/0", 50},
                    {"experts/block.3/load/1", 50}};
    return step;
  };
  for (int i = 0; i < 9; ++i) EXPECT_TRUE(watch.Update(step_with(95)).empty()) << i;
  EXPECT_TRUE(watch.Update(step_with(60)).empty());  // the streak breaks
  for (int i = 0; i < 9; ++i) EXPECT_TRUE(watch.Update(step_with(95)).empty()) << i;
  EXPECT_EQ(watch.Update(step_with(95)), std::vector<std::string>{"block.2"});
  EXPECT_TRUE(watch.Update(step_with(95)).empty());  // once
}

TEST(StepMetricsTest, ReportStepHasTheReportsKeys) {
  StepAssembler assembler(ParallelLayout(2, 1, 1), 1, 0);
  const JobStep step = assembler.Add({StepOf(0, 4), StepOf(1, 4)}).at(0);
  const nlohmann::json j = ReportStepJson(step);
  for (const char* key : {"step", "loss", "lr", "grad_norm", "tokens_per_s", "loss_scale",
                          "skipped", "step_s", "compute_s", "wait_s", "memory_peak"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j.at("step"), 4);
  EXPECT_EQ(j.at("loss"), 1.0);
  EXPECT_EQ(j.at("skipped"), false);
  EXPECT_EQ(j.at("wait_s"), 0.0625);
  EXPECT_EQ(j.at("memory_peak").at("total"), 2004);
}

TEST(StepMetricsTest, MetricsLineCarriesTimeElapsedAttemptAndEveryStagesMemory) {
  StepAssembler assembler(ParallelLayout(2, 1, 1), 1, 2);
  const JobStep step = assembler.Add({StepOf(0, 7), StepOf(1, 7)}).at(0);
  const auto time = std::chrono::system_clock::time_point(std::chrono::milliseconds(1700000000123));
  const nlohmann::json j = MetricsLine(step, time, 12.5);
  EXPECT_EQ(j.at("step"), 7);
  EXPECT_EQ(j.at("attempt"), 2);
  EXPECT_EQ(j.at("time"), "2023-11-14T22:13:20.123Z");
  EXPECT_EQ(j.at("elapsed_s"), 12.5);
  EXPECT_EQ(j.at("loss"), -2.0);
  EXPECT_EQ(j.at("memory_peak").at("stage0").at("total"), 1007);
  EXPECT_EQ(j.at("memory_peak").at("stage1").at("total"), 2007);
}

TEST(StepMetricsTest, WithReplicasEachRankIsKeyedByStageAndReplica) {
  // 1 stage x 2 replicas: rank 1 is stage 0 of replica 1; the head (rank 0) reports the loss and
  // its all-reduce time.
  StepAssembler assembler(ParallelLayout(/*stages=*/1, /*tensor=*/1, /*replicas=*/2), 0, 0);
  WorkerReport head = StepOf(1, 5);
  head.rank = 0;
  head.stage = 0;
  head.replica = 0;
  head.timings_s["allreduce"] = 0.03125;
  WorkerReport other = StepOf(0, 5);
  other.rank = 1;
  other.stage = 0;
  other.replica = 1;
  const JobStep step = assembler.Add({head, other}).at(0);
  const nlohmann::json line = MetricsLine(step, std::chrono::system_clock::now(), 1.0);
  EXPECT_EQ(line.at("memory_peak").at("stage0_replica0").at("total"), 2005);
  EXPECT_EQ(line.at("memory_peak").at("stage0_replica1").at("total"), 1005);
  EXPECT_FALSE(line.at("memory_peak").contains("stage1"));
  EXPECT_EQ(ReportStepJson(step).at("allreduce_s"), 0.03125);
}

TEST(MetricsLogTest, EachStepIsOnDiskAtOnceAndAResumeAppends) {
  const TempDir temp("baton-metrics-log");
  const std::string dir = temp.path();
  StepAssembler assembler(ParallelLayout(2, 1, 1), 1, 0);
  const std::vector<JobStep> steps =
      assembler.Add({StepOf(0, 1), StepOf(1, 1), StepOf(0, 2), StepOf(1, 2)});
  {
    MetricsLog log(dir + "/out", /*append=*/false);  // creates the directory
    log.Write(steps[0]);
    // Readable before the log is closed: nothing is held back in a buffer.
    ASSERT_EQ(Lines(log.path()).size(), 1u);
    EXPECT_EQ(nlohmann::json::parse(Lines(log.path())[0]).at("step"), 1);
  }
  {
    MetricsLog resumed(dir + "/out", /*append=*/true);
    resumed.Write(steps[1]);
  }
  std::vector<std::string> lines = Lines(dir + "/out/metrics.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(nlohmann::json::parse(lines[1]).at("step"), 2);
  {
    MetricsLog fresh(dir + "/out", /*append=*/false);  // a new run starts a new file
  }
  EXPECT_TRUE(Lines(dir + "/out/metrics.jsonl").empty());
}

TEST(MetricsLogTest, UnwritableDirectoryIsAnErrorNamingThePath) {
  try {
    MetricsLog log("/proc/baton-no-such-dir", false);
    FAIL() << "opened a log under /proc";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/baton-no-such-dir"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace baton
