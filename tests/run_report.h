// `baton run` with a report, for the integration tests (gtest: a failed run is a test failure).
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/baton_process.h"

namespace baton::testing {

// `baton run CONFIG --report DIR/report.json --set output.dir=DIR ARGS...`: the run's report, or
// null, with a test failure showing the run's output, when it does not exit 0.
inline nlohmann::json RunAndReport(const std::string& config, const std::string& dir,
                                   const std::vector<std::string>& args) {
  std::vector<std::string> all = {
      "run", config, "--report", dir + "/report.json", "--set", "output.dir=" + dir};
  all.insert(all.end(), args.begin(), args.end());
  const CommandResult result = RunBaton(all);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  return result.exit_code == 0 ? ReadJson(dir + "/report.json") : nlohmann::json();
}

}  // namespace baton::testing
