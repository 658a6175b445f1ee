// `baton plan` in process: the tables for a config that plans, and errors that name the config.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/temp_dir.h"
#include "launcher/run.h"

namespace baton {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string PlanError(const PlanOptions& options) {
  std::ostringstream out;
  try {
    PlanCommand(options, out);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The config loads (each value is in range) but cannot be planned: the error names the file the
// values came from, not only the planner's view of them.
TEST(PlanCommandTest, AConfigThatCannotBePlannedIsAnErrorNamingTheConfigFile) {
  test_util::TempDir dir;
  PlanOptions options;
  options.config.path = dir / "deep.yaml";
  std::ofstream(options.config.path) << "model:\n  num_layers: 2\ndata:\n  path: x.txt\n"
                                        "parallel:\n  stages: 8\n";
  const std::string error = PlanError(options);
  EXPECT_THAT(error, StartsWith(options.config.path + ": plan: "));
  EXPECT_THAT(error, HasSubstr("cannot cut a 4-layer graph into 8 pipeline parts"));

  options.config.overrides = {"parallel.stages=2"};
  std::ostringstream out;
  EXPECT_EQ(PlanCommand(options, out), 0);
  EXPECT_THAT(out.str(), HasSubstr("stage"));
}

}  // namespace
}  // namespace baton
