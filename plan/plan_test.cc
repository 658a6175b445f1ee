// The plan's own answers: the cut's chunks, tied groups, and the groups and peers of every rank.
#include "plan/plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/config.h"
#include "planner/planner.h"

namespace baton {
namespace {

using ::testing::ElementsAre;

Plan TinyPlan(const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {"model.num_layers=4",  "model.width=32",
                                  "model.context=16",    "model.num_heads=2",
                                  "train.batch_size=12", "train.micro_batches=12"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return MakePlan(LoadConfig(std::string(BATON_SOURCE_DIR) + "/configs/gpt-tiny.yaml", all));
}

// 3 stages x 2 replicas: world rank = replica * 3 + stage.
TEST(PlanTest, EveryRankIsToldItsPipelineReplicasAndPeers) {
  const Plan plan = TinyPlan({"parallel.stages=3", "parallel.replicas=2"});
  EXPECT_THAT(plan.layout().GroupOf(Axis::kPipeline, 4), ElementsAre(3, 4, 5));
  EXPECT_THAT(plan.layout().GroupOf(Axis::kData, 4), ElementsAre(1, 4));
  EXPECT_THAT(plan.Peers(4), ElementsAre(3, 5));
  EXPECT_THAT(plan.Peers(3), ElementsAre(4, 5));  // stage 0's neighbours wrap to the last stage
  // The tied embedding spans stages 0 and 2 (embedding and head), within each replica; then the
  // stage's replicas.
  ASSERT_EQ(plan.tied.size(), 1u);
  EXPECT_THAT(plan.tied[0].stages, ElementsAre(0, 2));
  EXPECT_THAT(plan.CollectiveGroups(5), ElementsAre(ElementsAre(3, 5), ElementsAre(2, 5)));
  EXPECT_THAT(plan.CollectiveGroups(4), ElementsAre(ElementsAre(1, 4)));  // holds neither copy
}

TEST(PlanTest, ZeroOneAddsTheStagesReplicasAsPeers) {
  const Plan plan = TinyPlan({"parallel.stages=2", "parallel.replicas=3", "parallel.zero=1"});
  EXPECT_THAT(plan.Peers(3), ElementsAre(1, 2, 5));  // stage 1 of replica 1: pipeline 2, replicas
  EXPECT_THAT(plan.Peers(0), ElementsAre(1, 2, 4));
}

// 2 stages x 2 tensor ranks: world rank = stage * 2 + tensor rank. Sequence parallelism's
// all-gathers go point to point between a stage's tensor ranks.
TEST(PlanTest, TensorRanksAreEachOthersPeers) {
  const Plan plan = TinyPlan({"parallel.stages=2", "parallel.tensor=2"});
  EXPECT_THAT(plan.Peers(0), ElementsAre(1, 2));  // its tensor rank, then stage 1's same rank
  EXPECT_THAT(plan.Peers(3), ElementsAre(1, 2));
  const Plan one_stage = TinyPlan({"parallel.stages=1", "parallel.tensor=2"});
  EXPECT_THAT(one_stage.Peers(1), ElementsAre(0));
}

TEST(PlanTest, OneStageHasNoPipelinePeersAndKeepsItsTiedCopiesLocal) {
  const Plan plan = TinyPlan({"parallel.stages=1", "parallel.replicas=2"});
  EXPECT_TRUE(plan.Peers(1).empty());
  EXPECT_THAT(plan.CollectiveGroups(1), ElementsAre(ElementsAre(0, 1)));  // the replicas alone
}

// All four blocks share one parameter set (layers 1-4 of embedding, 4 blocks, head): a cut
// through the group makes both stages hold it, a cut around it one.
TEST(PlanTest, ACutMovesTheTiedGroupsWithIt) {
  Plan plan = TinyPlan({"parallel.stages=2", "model.share.group=4"});
  const auto shared_ranks = [&] {
    std::vector<std::vector<int>> ranks;
    for (const TiedGroup& group : plan.tied) {
      if (group.param != "wte.weight") ranks.push_back(group.stages);
    }
    return ranks;
  };
  plan.SetCut({{0, 2}, {3, 5}});
  ASSERT_FALSE(shared_ranks().empty());
  for (const std::vector<int>& ranks : shared_ranks()) EXPECT_THAT(ranks, ElementsAre(0, 1));
  EXPECT_THAT(plan.CollectiveGroups(1).front(), ElementsAre(0, 1));
  plan.SetCut({{0, 4}, {5, 5}});
  for (const std::vector<int>& ranks : shared_ranks()) EXPECT_THAT(ranks, ElementsAre(0));
  EXPECT_THAT(plan.ChunkRanges(1), ElementsAre(LayerRange{5, 5}));
  for (const TiedGroup& group : plan.tied) {
    if (group.param == "wte.weight") {
      EXPECT_THAT(group.stages, ElementsAre(0, 1));
    }
  }
}

}  // namespace
}  // namespace baton
