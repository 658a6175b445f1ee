// The GPU benchmark's figures from a report, on a hand-made report: tokens/s over the measured
// steps, model FLOP/s from the cost model, MFU, per-stage peaks, the config read back from the
// report, the data-sheet peak table, and the CPU-vs-GPU loss comparison. Runs without a GPU.
#include "bench/gpu/run_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "bench/gpu/device_peak.h"
#include "core/error.h"
#include "model/cost.h"
#include "model/from_config.h"

namespace baton::gpu_bench {
namespace {

nlohmann::json Steps(const std::vector<double>& losses, double step_s) {
  nlohmann::json steps = nlohmann::json::array();
  for (size_t i = 0; i < losses.size(); ++i) {
    steps.push_back({{"step", i + 1}, {"loss", losses[i]}, {"step_s", step_s * (i == 0 ? 10 : 1)}});
  }
  return steps;
}

nlohmann::json Report(const Config& config, const std::vector<double>& losses, double step_s) {
  nlohmann::json report;
  report["config"] = ToJson(config);
  report["steps"] = Steps(losses, step_s);
  report["stages"] = nlohmann::json::array();
  for (int s = 0; s < 2; ++s) {
    report["stages"].push_back(
        {{"stage", s},
         {"memory", {{"peak", {{"params", 1000 * (s + 1)}, {"grads", 0}, {"total", 5000}}}}}});
  }
  return report;
}

// This checkout's configs, or those beside the binary where it travelled without the checkout
// (the GPU bundle sets BATON_SOURCE_DIR: scripts/gpu-checks.sh).
std::string Gpt2Path() {
  const char* dir = std::getenv("BATON_SOURCE_DIR");
  return std::string(dir != nullptr && *dir != '\0' ? dir : BATON_SOURCE_DIR) +
         "/configs/gpt2-124m.yaml";
}

Config Gpt2() { return LoadConfig(Gpt2Path()); }

TEST(RunReport, ConfigReadsBackFromTheReport) {
  const Config config = LoadConfig(Gpt2Path(), {"train.steps=20", "parallel.stages=2"});
  EXPECT_EQ(ConfigOfReport(Report(config, {1.0}, 1.0)), config);
}

TEST(RunReport, TokensPerSecondCountsOnlyStepsAfterWarmup) {
  const Config config = Gpt2();
  // Step 1 takes 10x longer (compilation, allocation); 4 more steps of 0.5 s.
  const RunFigures f = Summarise(Report(config, {10.9, 10.5, 10.1, 9.9, 9.7}, 0.5), 1);
  EXPECT_EQ(f.steps_measured, 4);
  EXPECT_DOUBLE_EQ(f.tokens_per_step, 32.0 * 1024);
  EXPECT_DOUBLE_EQ(f.measured_s, 2.0);
  EXPECT_DOUBLE_EQ(f.tokens_per_s, 32.0 * 1024 * 4 / 2.0);
  EXPECT_DOUBLE_EQ(f.first_loss, 10.9);
  EXPECT_DOUBLE_EQ(f.last_loss, 9.7);
  const double per_token = ModelFlopsPerToken(GraphOf(config.model), DimsOf(config.model), 1024);
  EXPECT_DOUBLE_EQ(f.model_flops_per_token, per_token);
  EXPECT_DOUBLE_EQ(f.model_flops_per_s, per_token * f.tokens_per_s);
  // GPT-2 124M at T = 1024: 6 N + 12 L T C with N ~ 85M weight-matrix parameters + the head.
  EXPECT_NEAR(per_token / 1e9, 0.88, 0.05);
}

TEST(RunReport, StagePeaksComeFromTheLedgerFigures) {
  const RunFigures f = Summarise(Report(Gpt2(), {10.0, 9.0}, 1.0), 1);
  ASSERT_EQ(f.stages.size(), 2u);
  EXPECT_EQ(f.stages[1].stage, 1);
  EXPECT_EQ(f.stages[1].total_bytes, 5000);
  EXPECT_THAT(f.stages[1].by_category,
              ::testing::ElementsAre(std::pair<std::string, int64_t>{"grads", 0},
                                     std::pair<std::string, int64_t>{"params", 2000}));
}

TEST(RunReport, RejectsTooFewStepsAndNonFiniteLosses) {
  EXPECT_THROW(Summarise(Report(Gpt2(), {10.0, 9.0}, 1.0), 2), Error);
  EXPECT_THROW(Summarise(Report(Gpt2(), {10.0, std::nan(""), 9.0}, 1.0), 1), Error);
}

TEST(RunReport, MfuIsModelFlopsOverGpusTimesPeak) {
  EXPECT_DOUBLE_EQ(Mfu(494.5e12, 989e12, 1), 0.5);
  EXPECT_DOUBLE_EQ(Mfu(494.5e12, 989e12, 2), 0.25);
  EXPECT_EQ(Mfu(1e12, 0, 1), 0.0);  // unknown peak
}

TEST(RunReport, LossComparisonIsRelativeAndCatchesNaN) {
  const Config config = Gpt2();
  const nlohmann::json cpu = Report(config, {5.0, 4.0, 3.0}, 1.0);
  EXPECT_TRUE(CompareLosses(cpu, Report(config, {5.0, 4.004, 3.0}, 1.0), 2e-3).ok);
  const LossComparison far = CompareLosses(cpu, Report(config, {5.0, 4.0, 3.1}, 1.0), 2e-3);
  EXPECT_FALSE(far.ok);
  EXPECT_EQ(far.worst_step, 3);
  EXPECT_THAT(far.Describe(), ::testing::HasSubstr("EXCEEDS"));
  EXPECT_FALSE(CompareLosses(cpu, Report(config, {5.0, std::nan(""), 3.0}, 1.0), 2e-3).ok);
  EXPECT_THROW(CompareLosses(cpu, Report(config, {5.0}, 1.0), 2e-3), Error);
}

TEST(DeviceTable, KnowsTheDataSheetPeaks) {
  EXPECT_EQ(DataSheetBf16Tflops("NVIDIA H200"), 989.0);
  EXPECT_EQ(DataSheetBf16Tflops("NVIDIA H100 80GB HBM3"), 989.0);
  EXPECT_EQ(DataSheetBf16Tflops("NVIDIA H100 PCIe"), 756.0);
  EXPECT_EQ(DataSheetBf16Tflops("NVIDIA A100-SXM4-80GB"), 312.0);
  EXPECT_EQ(DataSheetBf16Tflops("NVIDIA L40S"), 362.0);
  EXPECT_EQ(DataSheetBf16Tflops("Some Future GPU"), 0.0);
}

}  // namespace
}  // namespace baton::gpu_bench
