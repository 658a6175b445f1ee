#include "scheduler/communication.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "core/error.h"
#include "scheduler/generators.h"
#include "scheduler/validator.h"

namespace baton {
namespace {

std::string Row(const Schedule& schedule, int rank) {
  std::string text;
  for (const Action& action : schedule.per_stage[rank]) {
    text += (text.empty() ? "" : " ") + ToString(action, schedule.stages, schedule.layout);
  }
  return text;
}

Schedule WithoutCommunication(Schedule schedule) {
  for (auto& actions : schedule.per_stage) {
    std::erase_if(actions, [](const Action& action) { return IsCommunication(action.kind); });
  }
  return schedule;
}

TEST(CommunicationTest, SendFollowsItsProducerAndRecvPrecedesItsConsumer) {
  const Schedule schedule = InsertCommunication(OneFOneB(2, 2));
  EXPECT_EQ(Row(schedule, 0), "F0 SEND_F0 F1 SEND_F1 RECV_B0 B0 RECV_B1 B1");
  EXPECT_EQ(Row(schedule, 1), "RECV_F0 F0 B0 SEND_B0 RECV_F1 F1 B1 SEND_B1");
}

TEST(CommunicationTest, ZeroBubbleSendsTheGradientAfterIAndNothingAfterW) {
  const Schedule schedule = InsertCommunication(ZeroBubbleH1(2, 2));
  EXPECT_EQ(Row(schedule, 0), "F0 SEND_F0 F1 SEND_F1 RECV_B0 I0 W0 RECV_B1 I1 W1");
  EXPECT_EQ(Row(schedule, 1), "RECV_F0 F0 I0 SEND_B0 RECV_F1 F1 I1 SEND_B1 W0 W1");
}

TEST(CommunicationTest, InterleavedWrapsFromLastRankToFirstRankNextChunk) {
  const Schedule schedule = InsertCommunication(Interleaved1F1B(2, 2, 2));
  // Virtual stage 1 (rank 1, chunk 0) feeds virtual stage 2 (rank 0, chunk 1).
  EXPECT_EQ(Row(schedule, 0),
            "F0 SEND_F0 F1 SEND_F1 2RECV_F0 2F0 2SEND_F0 2RECV_F1 2F1 2SEND_F1 2RECV_B0 2B0 "
            "2SEND_B0 2RECV_B1 2B1 2SEND_B1 RECV_B0 B0 RECV_B1 B1");
  EXPECT_TRUE(Validate(schedule));
}

TEST(CommunicationTest, ReceiverPostsInTheSendersOrderWhenItConsumesInAnother) {
  // Rank 1 consumes micro-batch 1 first, but rank 0 sends 0 first: with no tags, rank 1 must post
  // RECV_F0 before RECV_F1.
  Schedule compute = GPipe(2, 2);
  compute.per_stage[1] = {{1, ActionKind::kForward, 1, 0},
                          {1, ActionKind::kForward, 0, 0},
                          {1, ActionKind::kBackward, 1, 0},
                          {1, ActionKind::kBackward, 0, 0}};
  const Schedule schedule = InsertCommunication(compute);
  EXPECT_EQ(Row(schedule, 1), "RECV_F0 RECV_F1 F1 F0 B1 SEND_B1 B0 SEND_B0");
  EXPECT_EQ(Row(schedule, 0), "F0 SEND_F0 F1 SEND_F1 RECV_B1 RECV_B0 B0 B1");
  EXPECT_TRUE(Validate(schedule)) << Validate(schedule).message;
}

TEST(CommunicationTest, SingleRankNeedsNoMessages) {
  const Schedule compute = Interleaved1F1B(1, 3, 3);
  EXPECT_EQ(InsertCommunication(compute), compute);
}

TEST(CommunicationTest, InsertionKeepsTheComputeOrder) {
  for (const Schedule& compute :
       {GPipe(3, 5), OneFOneB(4, 3), Interleaved1F1B(3, 5, 2), ZeroBubbleH1(4, 6)}) {
    for (CommPlacement placement : {CommPlacement::kJustInTime, CommPlacement::kRendezvousSafe}) {
      EXPECT_EQ(WithoutCommunication(InsertCommunication(compute, placement)), compute)
          << compute.name;
    }
  }
}

TEST(CommunicationTest, JustInTimeOneF1BDeadlocksWhenSendsBlock) {
  // Rank 0 blocks in SEND_F1 (rank 1 has not posted RECV_F1) while rank 1 blocks in SEND_B0 (rank
  // 0 has not posted RECV_B0): why kRendezvousSafe exists.
  const Schedule schedule = InsertCommunication(OneFOneB(2, 2));
  EXPECT_TRUE(Validate(schedule, CommSemantics::kAsync));
  const ValidationResult strict = Validate(schedule, CommSemantics::kRendezvous);
  EXPECT_FALSE(strict);
  EXPECT_NE(strict.message.find("deadlock"), std::string::npos) << strict.message;
  EXPECT_NE(strict.message.find("<-- ERROR HERE"), std::string::npos) << strict.message;
}

TEST(CommunicationTest, RendezvousSafePlacementSurvivesBlockingSends) {
  const Schedule schedule = InsertCommunication(OneFOneB(2, 2), CommPlacement::kRendezvousSafe);
  // RECV_F1 moves before B0 on rank 1, to when rank 0 sends it: both ends of every message meet
  // at the same point of the unit-cost timeline.
  EXPECT_EQ(Row(schedule, 0), "F0 SEND_F0 F1 SEND_F1 RECV_B0 B0 RECV_B1 B1");
  EXPECT_EQ(Row(schedule, 1), "RECV_F0 F0 RECV_F1 B0 SEND_B0 F1 B1 SEND_B1");
  EXPECT_TRUE(Validate(schedule, CommSemantics::kRendezvous))
      << Validate(schedule, CommSemantics::kRendezvous).message;
  EXPECT_TRUE(Validate(schedule, CommSemantics::kAsync));
}

TEST(CommunicationTest, PostReceivesEarlyMovesEachReceiveBeforeTheComputeItFollows) {
  const Schedule placed = InsertCommunication(OneFOneB(2, 2), CommPlacement::kRendezvousSafe);
  const Schedule lowered = PostReceivesEarly(placed);
  // Rank 0: RECV_B0 followed F1, RECV_B1 followed B0; rank 1: RECV_F1 followed F0. A RECV before
  // the first compute (rank 1's RECV_F0) stays; SENDs stay after their producer.
  EXPECT_EQ(Row(lowered, 0), "F0 SEND_F0 RECV_B0 F1 SEND_F1 RECV_B1 B0 B1");
  EXPECT_EQ(Row(lowered, 1), "RECV_F0 RECV_F1 F0 B0 SEND_B0 F1 B1 SEND_B1");
  // Posted receives never block their rank, so the lowered program survives blocking sends too.
  EXPECT_TRUE(Validate(lowered, CommSemantics::kRendezvous))
      << Validate(lowered, CommSemantics::kRendezvous).message;
  EXPECT_TRUE(Validate(lowered, CommSemantics::kAsync));
}

TEST(CommunicationTest, PostReceivesEarlyNeedsCommunicationOnMoreThanOneRank) {
  EXPECT_THROW(PostReceivesEarly(OneFOneB(2, 2)), Error);
  const Schedule single = OneFOneB(1, 3);
  EXPECT_EQ(Row(PostReceivesEarly(single), 0), Row(single, 0));
}

TEST(CommunicationTest, ScheduleThatAlreadyCommunicatesIsRefused) {
  EXPECT_THROW(InsertCommunication(InsertCommunication(OneFOneB(2, 2))), Error);
}

TEST(CommunicationTest, InvalidComputeScheduleIsRefusedWithTheMarkedGrid) {
  Schedule compute = OneFOneB(2, 2);
  std::swap(compute.per_stage[1][0], compute.per_stage[1][1]);  // B0 before F0 on rank 1
  try {
    InsertCommunication(compute);
    FAIL() << "expected an exception";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("<-- ERROR HERE"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace baton
