// Tests of the benchmarks' figure arithmetic and checks (bench_util.h). No timing is asserted:
// the inputs are made-up step times and reports.
#include "bench/bench_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"

namespace baton::bench {
namespace {

using nlohmann::json;

TEST(MeasureThroughput, LeavesOutTheWarmUpStep) {
  // 1000 tokens per step; step 1 (10 s) is not measured, steps 2-4 take 3 s together.
  const Throughput t = MeasureThroughput(1000, {10.0, 1.0, 1.5, 0.5});
  EXPECT_EQ(t.steps_measured, 3);
  EXPECT_DOUBLE_EQ(t.measured_s, 3.0);
  EXPECT_DOUBLE_EQ(t.tokens_per_s, 1000.0);
}

TEST(MeasureThroughput, NeedsAStepAfterTheWarmUp) {
  EXPECT_THROW(MeasureThroughput(1000, {1.0}), Error);
  EXPECT_THROW(MeasureThroughput(1000, {1.0, 0.0}), Error);
}

TEST(TokensPerStep, IsBatchTimesSequenceLength) {
  Config config;
  config.train.batch_size = 8;
  config.model.context = 256;
  EXPECT_DOUBLE_EQ(TokensPerStep(config), 2048.0);
  config.data.seq_len = 64;
  EXPECT_DOUBLE_EQ(TokensPerStep(config), 512.0);
}

TEST(Mfu, IsModelFlopsOverTheGemmPeak) {
  // 1000 tokens/s x 50 MFLOP per token = 50 GFLOP/s against a 100 GFLOP/s peak.
  EXPECT_DOUBLE_EQ(Mfu(1000, 50e6, 100), 0.5);
  EXPECT_THROW(Mfu(1000, 50e6, 0), Error);
}

json TwoStageReport() {
  return json::parse(R"({
    "steps": [{"step": 1, "loss": 5.5, "step_s": 2.0},
              {"step": 2, "loss": 5.0, "step_s": 1.0, "skipped": true}],
    "param_checksum": "abc",
    "stages": [
      {"stage": 0, "layers": [0, 4], "busy_fraction": 0.75, "bubble_fraction": 0.25,
       "memory": {"peak": {"params": 10, "activations": 20, "total": 30}}},
      {"stage": 1, "layers": [5, 9], "busy_fraction": 0.9, "bubble_fraction": 0.1,
       "memory": {"peak": {"params": 8, "total": 8}}}]})");
}

TEST(ReadReport, TakesStepsChecksumAndStagePeaks) {
  const ReportFigures f = ReadReport(TwoStageReport());
  EXPECT_THAT(f.losses, testing::ElementsAre(5.5, 5.0));
  EXPECT_THAT(f.step_seconds, testing::ElementsAre(2.0, 1.0));
  EXPECT_EQ(f.skipped_steps, 1);
  EXPECT_EQ(f.param_checksum, "abc");
  ASSERT_EQ(f.stages.size(), 2u);
  EXPECT_THAT(f.stages[0].layers, testing::ElementsAre(0, 4));
  EXPECT_EQ(f.stages[0].peak.at("activations"), 20);
  EXPECT_EQ(f.stages[1].peak.at("total"), 8);
  EXPECT_DOUBLE_EQ(f.stages[0].bubble_fraction, 0.25);
}

TEST(ReadReport, AMissingFieldIsAnError) {
  json report = TwoStageReport();
  report.erase("param_checksum");
  EXPECT_THROW(ReadReport(report), Error);
}

TEST(CheckIdentical, OneUlpIsADifference) {
  const double a = 5.0;
  const double b = std::nextafter(a, 6.0);
  EXPECT_NO_THROW(CheckIdentical({a, 4.0}, {a, 4.0}, "same"));
  EXPECT_THROW(CheckIdentical({a, 4.0}, {b, 4.0}, "one ulp"), Error);
  EXPECT_THROW(CheckIdentical({a}, {a, 4.0}, "lengths"), Error);
}

TEST(CheckLossesSane, RejectsNonFiniteAndAFarFirstLoss) {
  const double ln256 = std::log(256.0);
  EXPECT_NO_THROW(CheckLossesSane({ln256 + 0.1, 3.0}, 256, "ok"));
  EXPECT_THROW(CheckLossesSane({ln256, std::numeric_limits<double>::quiet_NaN()}, 256, "nan"),
               Error);
  EXPECT_THROW(CheckLossesSane({ln256 + 2.0}, 256, "far"), Error);
  EXPECT_THROW(CheckLossesSane({}, 256, "empty"), Error);
}

TEST(MaxRelativeDifference, UsesTheLargerOfTheValueAndOne) {
  EXPECT_DOUBLE_EQ(MaxRelativeDifference({4.0, 0.5}, {4.2, 0.4}), 0.1);
}

TEST(Table, PadsColumnsAndRightAlignsAllButTheFirst) {
  Table table({"name", "value"});
  table.AddRow({"a", "1"});
  table.AddRow({"long name", "12345"});
  EXPECT_EQ(table.ToString(),
            "name       value\n"
            "----------------\n"
            "a              1\n"
            "long name  12345\n");
  EXPECT_THROW(table.AddRow({"too few"}), Error);
}

TEST(Mib, OneDecimal) { EXPECT_EQ(Mib(3 * 1024 * 1024 / 2), "1.5"); }

}  // namespace
}  // namespace baton::bench
