// The unit tests' main: gtest's, once spdlog's registry exists. spdlog builds its registry on
// first use, as a function-local static inside libspdlog whose guarded construction TSan cannot
// see; two test threads logging first would look raced. Baton's own mains set up logging
// (SetupLogging) before they start any thread, and so does this one.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

int main(int argc, char** argv) {
  spdlog::default_logger();
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
