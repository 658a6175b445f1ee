// `baton tune`'s argument errors: each names what is wrong before anything is profiled.
#include "launcher/tune.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "core/error.h"

namespace baton {
namespace {

std::string ErrorOf(const TuneCommandOptions& options) {
  std::ostringstream out;
  try {
    TuneCommand(options, out);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TuneCommandOptions Tiny() {
  TuneCommandOptions options;
  options.config.path = std::string(BATON_SOURCE_DIR) + "/configs/gpt-tiny.yaml";
  return options;
}

TEST(TuneCommandTest, ArgumentErrorsNameTheArgument) {
  TuneCommandOptions o = Tiny();
  o.max_stages = -1;
  EXPECT_NE(ErrorOf(o).find("--max-stages must be at least 1, got -1"), std::string::npos)
      << ErrorOf(o);
  o = Tiny();
  o.max_processes = -2;
  EXPECT_NE(ErrorOf(o).find("--max-processes must be at least 1, got -2"), std::string::npos)
      << ErrorOf(o);
  o = Tiny();
  o.budget = "0";
  EXPECT_NE(ErrorOf(o).find("--memory-budget must be positive, got 0"), std::string::npos)
      << ErrorOf(o);
  o = Tiny();
  o.repeats = 0;
  EXPECT_NE(ErrorOf(o).find("--repeats must be at least 1"), std::string::npos) << ErrorOf(o);
  o = Tiny();
  o.config.overrides = {"device.type=cuda"};
  EXPECT_NE(ErrorOf(o).find("cannot be profiled here"), std::string::npos) << ErrorOf(o);
}

TEST(TuneCommandTest, AConfigThatDoesNotLoadIsNamed) {
  TuneCommandOptions o = Tiny();
  o.config.path = "no/such/config.yaml";
  EXPECT_NE(ErrorOf(o).find("no/such/config.yaml"), std::string::npos) << ErrorOf(o);
  o = Tiny();
  o.config.overrides = {"parallel.stagez=2"};
  EXPECT_NE(ErrorOf(o).find("parallel.stagez"), std::string::npos) << ErrorOf(o);
}

}  // namespace
}  // namespace baton
