// The layout against docs/parallel.md's formulas ("Rank layout"): world rank = (replica x P +
// stage) x T + tensor rank, every group, place and metrics key derived from that alone.
#include "plan/parallel_layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/error.h"

namespace baton {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int P = 2, T = 2, R = 2;

int Formula(int stage, int replica, int tensor) { return (replica * P + stage) * T + tensor; }

TEST(ParallelLayoutTest, TwoStagesTwoTensorRanksTwoReplicasFollowTheDocumentedFormulas) {
  const ParallelLayout layout(P, T, R);
  ASSERT_EQ(layout.world_size(), 8);
  std::set<std::string> places, keys, short_places;
  for (int r = 0; r < R; ++r) {
    for (int s = 0; s < P; ++s) {
      for (int t = 0; t < T; ++t) {
        const int rank = Formula(s, r, t);
        SCOPED_TRACE(rank);
        EXPECT_EQ(layout.At(rank), (Coordinates{.stage = s, .replica = r, .tensor = t}));
        EXPECT_EQ(layout.WorldRank({.stage = s, .replica = r, .tensor = t}), rank);
        EXPECT_EQ(layout.StageOf(rank), rank / T % P);
        EXPECT_EQ(layout.ReplicaOf(rank), rank / (T * P));
        EXPECT_EQ(layout.TensorOf(rank), rank % T);
        // Pipeline: its replica's stages at its tensor rank; replicas: its stage's at its tensor
        // rank; tensor: its stage's in its replica, T consecutive ranks.
        EXPECT_THAT(layout.GroupOf(Axis::kPipeline, rank),
                    ElementsAre(Formula(0, r, t), Formula(1, r, t)));
        EXPECT_THAT(layout.GroupOf(Axis::kData, rank),
                    ElementsAre(Formula(s, 0, t), Formula(s, 1, t)));
        EXPECT_THAT(layout.GroupOf(Axis::kTensor, rank),
                    ElementsAre(Formula(s, r, 0), Formula(s, r, 1)));
        const std::string place = fmt::format("stage {} replica {} tensor {}", s, r, t);
        EXPECT_EQ(layout.Place(rank), place);
        EXPECT_EQ(layout.Who(rank), fmt::format("{} (rank {})", place, rank));
        EXPECT_EQ(layout.ShortPlace(rank), fmt::format("s{}r{}t{}", s, r, t));
        EXPECT_EQ(layout.MetricsKey(rank), fmt::format("stage{}_replica{}_tensor{}", s, r, t));
        places.insert(layout.Place(rank));
        keys.insert(layout.MetricsKey(rank));
        short_places.insert(layout.ShortPlace(rank));
      }
    }
  }
  EXPECT_EQ(places.size(), 8u);  // every rank named apart
  EXPECT_EQ(keys.size(), 8u);
  EXPECT_EQ(short_places.size(), 8u);
}

TEST(ParallelLayoutTest, EachAxisCutsTheWorldIntoDisjointGroupsThatCoverIt) {
  const ParallelLayout layout(P, T, R);
  EXPECT_THAT(layout.Groups(Axis::kTensor), ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3),
                                                        ElementsAre(4, 5), ElementsAre(6, 7)));
  EXPECT_THAT(layout.Groups(Axis::kPipeline), ElementsAre(ElementsAre(0, 2), ElementsAre(1, 3),
                                                          ElementsAre(4, 6), ElementsAre(5, 7)));
  EXPECT_THAT(layout.Groups(Axis::kData), ElementsAre(ElementsAre(0, 4), ElementsAre(1, 5),
                                                      ElementsAre(2, 6), ElementsAre(3, 7)));
}

TEST(ParallelLayoutTest, AxesOfOneRankAreLeftOutOfNames) {
  const ParallelLayout pipeline(3, 1, 1);
  EXPECT_EQ(pipeline.Place(2), "stage 2");
  EXPECT_EQ(pipeline.Who(2), "stage 2");  // a stage is its rank: no "(rank 2)"
  EXPECT_EQ(pipeline.ShortPlace(2), "s2");
  EXPECT_EQ(pipeline.MetricsKey(2), "stage2");
  const ParallelLayout replicas(3, 1, 2);
  EXPECT_EQ(replicas.Who(4), "stage 1 replica 1 (rank 4)");
  EXPECT_EQ(replicas.MetricsKey(4), "stage1_replica1");
  EXPECT_EQ(replicas.ShortPlace(4), "s1r1");
  const ParallelLayout tensor(2, 2, 1);
  EXPECT_EQ(tensor.Who(3), "stage 1 tensor 1 (rank 3)");
  EXPECT_EQ(tensor.MetricsKey(1), "stage0_tensor1");
  EXPECT_EQ(tensor.ShortPlace(1), "s0t1");
}

TEST(ParallelLayoutTest, TheConfigGivesTheSizes) {
  ParallelConfig parallel;
  parallel.stages = 3;
  parallel.tensor = 2;
  parallel.replicas = 4;
  const ParallelLayout layout = ParallelLayout::Of(parallel);
  EXPECT_EQ(layout.stages(), 3);
  EXPECT_EQ(layout.tensor(), 2);
  EXPECT_EQ(layout.replicas(), 4);
  EXPECT_EQ(layout.world_size(), 24);
}

// Expert groups cut each stage's replicas into runs of E; the expert-data-parallel groups take
// every E-th replica.
TEST(ParallelLayoutTest, ExpertGroupsAreRunsOfReplicasAndTheirDataGroupsStrideThem) {
  ParallelConfig parallel;
  parallel.stages = 2;
  parallel.replicas = 4;
  parallel.experts = 2;
  const ParallelLayout layout = ParallelLayout::Of(parallel);
  EXPECT_EQ(layout.experts(), 2);
  EXPECT_EQ(layout.world_size(), 8);  // not an axis: no more ranks
  // Stage 1's replicas are world ranks 1, 3, 5, 7.
  EXPECT_EQ(layout.ExpertGroupOf(5), (std::vector<int>{5, 7}));
  EXPECT_EQ(layout.ExpertGroupOf(3), (std::vector<int>{1, 3}));
  EXPECT_EQ(layout.ExpertDataGroupOf(3), (std::vector<int>{3, 7}));
  EXPECT_EQ(layout.ExpertDataGroupOf(0), (std::vector<int>{0, 4}));
  const ParallelLayout one(1, 1, 4);
  EXPECT_EQ(one.ExpertGroupOf(2), (std::vector<int>{2}));
  EXPECT_EQ(one.ExpertDataGroupOf(2), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_THROW(ParallelLayout(1, 1, 4, 3), Error);
}

TEST(ParallelLayoutTest, ARankOutsideTheJobIsRefused) {
  const ParallelLayout layout(2, 1, 1);
  try {
    layout.At(2);
    FAIL() << "rank 2 of a 2-rank job was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 2 is outside the job's 2 rank(s)"));
  }
  EXPECT_THROW(ParallelLayout(0, 1, 1), Error);
}

}  // namespace
}  // namespace baton
