// The foundation's promise: the tiny GPT learns English from /usr/share/common-licenses.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numeric>

#include "tests/baton_process.h"

namespace baton::testing {
namespace {

TEST(LearningTest, TinyGptStartsNearLn256AndEndsBelow2Point5After300Steps) {
  if (!std::filesystem::exists("/usr/share/common-licenses")) {
    GTEST_SKIP() << "/usr/share/common-licenses is absent";
  }
  const std::string report = TempDir("learn") + "/report.json";
  // Two stages use both cores; the numbers are those of one stage (bit-identical).
  const CommandResult result =
      RunBaton({"run", "configs/gpt-tiny.yaml", "--set", "train.steps=300", "--set",
                "train.log_every=100", "--set", "parallel.stages=2", "--report", report});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const std::vector<double> losses = Losses(ReadJson(report));
  ASSERT_EQ(losses.size(), 300u);
  EXPECT_NEAR(losses.front(), std::log(256.0), 0.3);
  const double last10 = std::accumulate(losses.end() - 10, losses.end(), 0.0) / 10.0;
  EXPECT_LT(last10, 2.5);
}

}  // namespace
}  // namespace baton::testing
