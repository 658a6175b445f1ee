#include "scheduler/generators.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "core/error.h"

namespace baton {
namespace {

// Rank `rank`'s actions as space-separated text.
std::string Row(const Schedule& schedule, int rank) {
  std::string text;
  for (const Action& action : schedule.per_stage[rank]) {
    text += (text.empty() ? "" : " ") + ToString(action, schedule.stages, schedule.layout);
  }
  return text;
}

TEST(GeneratorsTest, GPipeRunsAllForwardsThenAllBackwards) {
  const Schedule schedule = GPipe(2, 3);
  EXPECT_EQ(schedule.name, "gpipe");
  EXPECT_EQ(Row(schedule, 0), "F0 F1 F2 B0 B1 B2");
  EXPECT_EQ(Row(schedule, 1), "F0 F1 F2 B0 B1 B2");
}

TEST(GeneratorsTest, ForwardOnlyRunsEveryChunksForwardsChunkByChunk) {
  const Schedule schedule = ForwardOnly(2, 3, 2);
  EXPECT_EQ(schedule.name, "forward");
  EXPECT_EQ(Row(schedule, 0), "F0 F1 F2 2F0 2F1 2F2");
  EXPECT_EQ(Row(schedule, 1), "F0 F1 F2 3F0 3F1 3F2");  // chunk 0 prints without its stage
  EXPECT_EQ(Row(ForwardOnly(3, 2), 2), "F0 F1");
}

TEST(GeneratorsTest, OneF1BWarmsUpWithStagesMinusRankMinusOneForwards) {
  const Schedule schedule = OneFOneB(4, 6);
  EXPECT_EQ(Row(schedule, 0), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(Row(schedule, 1), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5");
  EXPECT_EQ(Row(schedule, 2), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  EXPECT_EQ(Row(schedule, 3), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
}

TEST(GeneratorsTest, OneF1BWithFewerMicrobatchesThanStagesIsAllWarmup) {
  const Schedule schedule = OneFOneB(4, 2);
  EXPECT_EQ(Row(schedule, 0), "F0 F1 B0 B1");
  EXPECT_EQ(Row(schedule, 2), "F0 F1 B0 B1");
  EXPECT_EQ(Row(schedule, 3), "F0 B0 F1 B1");
}

TEST(GeneratorsTest, InterleavedFollowsMegatronGroupsOfStagesMicrobatches) {
  // p=2, m=4, v=2: forwards go through chunk 0 for micro-batches 0-1, then chunk 1 (virtual stage
  // 2 or 3) for 0-1, then the next group; backwards visit chunk 1 first.
  const Schedule schedule = Interleaved1F1B(2, 4, 2);
  EXPECT_EQ(schedule.chunks, 2);
  // Rank 0: warmup 2*(p-0-1) + (v-1)*p = 4.
  EXPECT_EQ(Row(schedule, 0), "F0 F1 2F0 2F1 F2 2B0 F3 2B1 2F2 B0 2F3 B1 2B2 2B3 B2 B3");
  // Rank 1: warmup (v-1)*p = 2.
  EXPECT_EQ(Row(schedule, 1), "F0 F1 3F0 3B0 3F1 3B1 F2 B0 F3 B1 3F2 3B2 3F3 3B3 B2 B3");
}

TEST(GeneratorsTest, InterleavedWithMicrobatchesNotAMultipleOfStagesDropsThePadding) {
  // m=3 is scheduled as m=4 with micro-batch 3 removed.
  const Schedule schedule = Interleaved1F1B(2, 3, 2);
  const Schedule padded = Interleaved1F1B(2, 4, 2);
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<Action> expected;
    for (const Action& action : padded.per_stage[rank]) {
      if (action.microbatch < 3) expected.push_back(action);
    }
    EXPECT_EQ(schedule.per_stage[rank], expected);
  }
}

TEST(GeneratorsTest, ZeroBubbleH1DefersRankWeightGradientsOnEachRank) {
  const Schedule schedule = ZeroBubbleH1(2, 4);
  EXPECT_EQ(Row(schedule, 0), "F0 F1 I0 W0 F2 I1 W1 F3 I2 W2 I3 W3");
  EXPECT_EQ(Row(schedule, 1), "F0 I0 F1 I1 W0 F2 I2 W1 F3 I3 W2 W3");
}

TEST(GeneratorsTest, GeneratorsProduceComputeOnlySchedules) {
  for (const Schedule& schedule :
       {GPipe(3, 4), OneFOneB(3, 4), Interleaved1F1B(3, 4, 2), ZeroBubbleH1(3, 4)}) {
    EXPECT_FALSE(HasCommunication(schedule)) << schedule.name;
    EXPECT_EQ(schedule.per_stage.size(), 3u);
  }
}

TEST(GeneratorsTest, MakeScheduleLooksUpEveryName) {
  for (const std::string& name : ScheduleNames()) {
    EXPECT_EQ(MakeSchedule(name, 2, 3).name, name);
  }
  EXPECT_EQ(MakeSchedule("interleaved", 2, 4, 2), Interleaved1F1B(2, 4, 2));
  EXPECT_EQ(MakeSchedule("zb-h1", 3, 4), ZeroBubbleH1(3, 4));
}

TEST(GeneratorsTest, UnknownNameListsTheKnownOnes) {
  try {
    MakeSchedule("2f2b", 2, 2);
    FAIL() << "expected an exception";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("gpipe, 1f1b, interleaved, zb-h1"), std::string::npos)
        << error.what();
  }
}

TEST(GeneratorsTest, BadShapesAreRejected) {
  EXPECT_THROW(MakeSchedule("1f1b", 2, 2, 2), Error);
  EXPECT_THROW(MakeSchedule("1f1b", 0, 2), Error);
  EXPECT_THROW(MakeSchedule("gpipe", 2, 0), Error);
  EXPECT_THROW(MakeSchedule("interleaved", 2, 2, 0), Error);
  // `baton schedule --stages 10000 --microbatches 10000` would need tens of GB: refused at once.
  try {
    MakeSchedule("1f1b", 10000, 10000);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("100000000 cells is over the limit of 4194304"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(ForwardOnly(64, 1024, 4));
}

}  // namespace
}  // namespace baton
