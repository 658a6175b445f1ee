// Mixed precision and 8-bit optimizer state train as well as fp32: bf16 and fp16 (dynamic loss
// scaling) runs of the tiny GPT, and an fp32 run with optimizer.state int8, end within 2% of
// fp32's final loss.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numeric>

#include "tests/baton_process.h"

namespace baton::testing {
namespace {

double FinalLoss(const std::string& dtype, const std::string& state = "f32") {
  const std::string dir = TempDir("precision-" + dtype + "-" + state);
  const std::string report = dir + "/report.json";
  const CommandResult result = RunBaton(
      {"run", "configs/gpt-tiny.yaml", "--set", "train.steps=300", "--set", "train.log_every=100",
       "--set", "parallel.stages=2", "--set", "precision.dtype=" + dtype, "--set",
       "optimizer.state=" + state, "--set", "output.dir=" + dir, "--report", report});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  if (result.exit_code != 0) return std::nan("");
  const std::vector<double> losses = Losses(ReadJson(report));
  // The mean of the last 10 steps: one step's loss depends on its batch.
  return std::accumulate(losses.end() - 10, losses.end(), 0.0) / 10.0;
}

TEST(PrecisionTest, Bf16Fp16AndInt8OptimizerStateEndWithin2PercentOfFp32) {
  if (!std::filesystem::exists("/usr/share/common-licenses")) {
    GTEST_SKIP() << "/usr/share/common-licenses is absent";
  }
  const double fp32 = FinalLoss("fp32");
  for (const char* dtype : {"bf16", "fp16"}) {
    const double loss = FinalLoss(dtype);
    EXPECT_NEAR(loss, fp32, 0.02 * fp32) << dtype << " vs fp32 " << fp32;
    RecordProperty(std::string("final_loss_") + dtype, std::to_string(loss));
  }
  const double int8_state = FinalLoss("fp32", "int8");
  EXPECT_NEAR(int8_state, fp32, 0.02 * fp32) << "int8 optimizer state vs f32 " << fp32;
  RecordProperty("final_loss_int8_state", std::to_string(int8_state));
  RecordProperty("final_loss_fp32", std::to_string(fp32));
}

}  // namespace
}  // namespace baton::testing
