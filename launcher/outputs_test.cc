// The run's pictures from the ranks' results (launcher/outputs.h), and the run page's names for
// them, under tensor parallelism: drawn by stage, labelled by stage and tensor rank.
#include "launcher/outputs.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/temp_dir.h"
#include "launcher/run_page.h"
#include "plan/plan.h"

namespace baton {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Plan TwoStagesTwoTensorRanks() {
  return MakePlan(LoadConfig(std::string(BATON_SOURCE_DIR) + "/configs/gpt-tiny.yaml",
                             {"parallel.stages=2", "parallel.tensor=2", "train.steps=1",
                              "train.micro_batches=1", "train.batch_size=1"}));
}

// World ranks 0, 1 are stage 0 and 2, 3 stage 1 (tensor ranks innermost). Stage s runs F0 over
// [2 s, 2 s + 1) ms, its tensor rank 1 a little later than its rank 0.
std::vector<RankResult> Results(const Plan& plan) {
  std::vector<RankResult> results;
  for (int rank = 0; rank < plan.world_size(); ++rank) {
    const int stage = plan.layout().StageOf(rank);
    const double start_us = 2000.0 * stage + 100.0 * plan.layout().TensorOf(rank);
    RankResult r;
    r.rank = rank;
    r.trace.push_back(
        {.step = 1,
         .spans = {{.kind = TraceSpan::Kind::kCompute,
                    .action = {.stage = stage, .kind = ActionKind::kForward, .microbatch = 0},
                    .start_us = start_us,
                    .end_us = start_us + 1000.0}}});
    results.push_back(r);
  }
  return results;
}

TEST(RunOutputs, TheTimelineDrawsEachStageInItsLaneUnderTensorParallelism) {
  const Plan plan = TwoStagesTwoTensorRanks();
  ASSERT_EQ(plan.world_size(), 4);
  const TempDir dir("outputs_test");
  WriteRunOutputs(dir.path(), plan, Results(plan));
  const std::string svg = Read(dir.path() + "/timeline.svg");
  // Stage 0's F0 (rank 0) then stage 1's (rank 2), not stage 0's two tensor ranks.
  EXPECT_NE(svg.find("<title>F0 chunk 0 [0, 1)</title><rect x=\"80\" y=\"50\""), std::string::npos)
      << svg;
  EXPECT_NE(svg.find("<title>F0 chunk 0 [2, 3)</title><rect x=\""), std::string::npos) << svg;
  EXPECT_EQ(svg.find("[0.1, 1.1)"), std::string::npos) << svg;  // rank 1 is not drawn
  // In milliseconds, said so; the per-stage bubbles are the headline's, stage by stage.
  EXPECT_NE(svg.find("makespan 3 ms"), std::string::npos) << svg;
  EXPECT_NE(svg.find("time (ms)"), std::string::npos) << svg;
  EXPECT_NE(svg.find("stage 0: measured 0.667"), std::string::npos) << svg;
  EXPECT_NE(svg.find("stage 1: measured 0.667"), std::string::npos) << svg;
  EXPECT_NE(svg.find("bubble fraction 0.666667"), std::string::npos) << svg;
  EXPECT_NE(svg.find("viewBox=\"0 0 "), std::string::npos) << svg;
  const std::string simulated = Read(dir.path() + "/timeline_simulated.svg");
  EXPECT_NE(simulated.find("makespan 3 ms"), std::string::npos) << simulated;
}

TEST(RunOutputs, TheRunPageNamesEachRanksMemoryByStageAndTensorRank) {
  nlohmann::json stages = nlohmann::json::array();
  for (int rank = 0; rank < 4; ++rank) {
    stages.push_back({{"stage", rank / 2},
                      {"tensor", rank % 2},
                      {"rank", rank},
                      {"memory", {{"peak", {{"params", 1024 * (rank + 1)}}}}}});
  }
  RunPageInputs inputs;
  inputs.dir = "out/tp";
  inputs.metrics = "{\"step\": 1, \"loss\": 5.0}\n";
  inputs.report = nlohmann::json{{"stages", stages}};
  const std::string page = RenderRunPage(inputs);
  for (const char* place :
       {"stage 0 tensor 0", "stage 0 tensor 1", "stage 1 tensor 0", "stage 1 tensor 1"}) {
    EXPECT_NE(page.find(std::string("data-group=\"") + place + "\""), std::string::npos) << place;
  }
}

}  // namespace
}  // namespace baton
