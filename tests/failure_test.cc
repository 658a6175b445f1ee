// What a user sees when a pipeline goes wrong: a stalled peer is named, with every stage's
// blocked action in one table.
#include <gtest/gtest.h>

#include <regex>

#include "tests/baton_process.h"

namespace baton::testing {
namespace {

TEST(FailureTest, StalledPeerTimesOutWithATableNamingStageActionAndPeer) {
  // Stage 1 stops answering at step 2 (it sleeps; its heartbeats go on): stage 0 waits for the
  // gradient of its first backward and gives up after parallel.timeout_s.
  const CommandResult result =
      RunShell("cd '" + SourceDir() + "' && BATON_TEST_STALL=1:2 '" + BatonBinary() +
               "' run configs/gpt-tiny.yaml --set train.steps=4 --set parallel.stages=2"
               " --set parallel.timeout_s=2");
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("timed out waiting for the gradient from stage 1"),
            std::string::npos)
      << result.output;
  // The table: rank, stage, status, blocked on, micro-batch, peer, waiting seconds.
  EXPECT_NE(result.output.find("blocked on"), std::string::npos) << result.output;
  const std::regex row(R"(\n\s+0\s+0\s+failed\s+RECV_B\s+0\s+1\s+[0-9.]+\s)");
  EXPECT_TRUE(std::regex_search(result.output, row)) << result.output;
  const std::regex stalled(R"(\n\s+1\s+1\s+running\s)");
  EXPECT_TRUE(std::regex_search(result.output, stalled)) << result.output;
}

TEST(FailureTest, UnreadableDataIsAClearErrorNamingTheFile) {
  const CommandResult result =
      RunBaton({"run", "configs/gpt-tiny.yaml", "--set", "data.path=/nonexistent/corpus.txt",
                "--set", "train.steps=1", "--set", "parallel.stages=2"});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("/nonexistent/corpus.txt"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace baton::testing
