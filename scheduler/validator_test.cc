#include "scheduler/validator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>

#include "core/error.h"
#include "scheduler/communication.h"
#include "scheduler/generators.h"

namespace baton {
namespace {

// Index of `text` in rank `rank`'s list; fails the test when absent.
size_t Find(const Schedule& schedule, int rank, const std::string& text) {
  const auto& actions = schedule.per_stage[rank];
  for (size_t step = 0; step < actions.size(); ++step) {
    if (ToString(actions[step], schedule.stages, schedule.layout) == text) return step;
  }
  ADD_FAILURE() << text << " not on stage " << rank;
  return 0;
}

// Asserts the schedule is rejected at (rank, step) for a reason containing `why`, with the grid
// marking that action.
void ExpectRejectedAt(const Schedule& schedule, int rank, size_t step, const std::string& why) {
  const ValidationResult result = Validate(schedule);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.stage, rank) << result.message;
  EXPECT_EQ(result.step, static_cast<int>(step)) << result.message;
  EXPECT_NE(result.message.find(why), std::string::npos) << result.message;
  const std::string marked =
      "[" + ToString(schedule.per_stage[rank][step], schedule.stages, schedule.layout) + "]";
  const size_t mark = result.message.find("<-- ERROR HERE");
  ASSERT_NE(mark, std::string::npos) << result.message;
  const size_t line_start = result.message.rfind('\n', mark);
  EXPECT_NE(result.message.substr(line_start, mark - line_start).find(marked), std::string::npos)
      << result.message;
}

TEST(ValidatorTest, GeneratedSchedulesAreValid) {
  for (const Schedule& compute :
       {GPipe(3, 4), OneFOneB(4, 6), Interleaved1F1B(2, 4, 2), ZeroBubbleH1(4, 8)}) {
    EXPECT_TRUE(Validate(compute)) << Validate(compute).message;
    const Schedule full = InsertCommunication(compute);
    EXPECT_TRUE(Validate(full)) << Validate(full).message;
    EXPECT_TRUE(Validate(full).message.empty());
  }
}

TEST(ValidatorTest, MissingSendIsRejectedAtTheOrphanReceive) {
  Schedule schedule = InsertCommunication(OneFOneB(2, 3));
  auto& rank0 = schedule.per_stage[0];
  rank0.erase(rank0.begin() + Find(schedule, 0, "SEND_F1"));
  ExpectRejectedAt(schedule, 1, Find(schedule, 1, "RECV_F1"), "receive without a send");
}

TEST(ValidatorTest, MissingReceiveIsRejectedAtTheOrphanSend) {
  Schedule schedule = InsertCommunication(OneFOneB(2, 3));
  auto& rank0 = schedule.per_stage[0];
  rank0.erase(rank0.begin() + Find(schedule, 0, "RECV_B2"));
  ExpectRejectedAt(schedule, 1, Find(schedule, 1, "SEND_B2"), "send without a receive");
}

TEST(ValidatorTest, SwappedOrderOnALinkIsRejected) {
  // Rank 0 sends micro-batch 1 before 0; rank 1's first RECV_F0 would take micro-batch 1's data.
  Schedule schedule = InsertCommunication(GPipe(2, 2));
  auto& rank0 = schedule.per_stage[0];
  ASSERT_EQ(ToString(rank0[1], 2, ChunkLayout::kLoop), "SEND_F0");
  std::rotate(rank0.begin() + 1, rank0.begin() + 2, rank0.begin() + 4);  // F0 F1 SEND_F1 SEND_F0
  ASSERT_EQ(ToString(rank0[3], 2, ChunkLayout::kLoop), "SEND_F0");
  ExpectRejectedAt(schedule, 1, Find(schedule, 1, "RECV_F0"), "link order mismatch on link 0->1");
}

TEST(ValidatorTest, BackwardBeforeForwardIsRejected) {
  Schedule schedule = InsertCommunication(OneFOneB(2, 2));
  auto& rank1 = schedule.per_stage[1];
  std::swap(rank1[Find(schedule, 1, "F0")], rank1[Find(schedule, 1, "B0")]);
  ExpectRejectedAt(schedule, 1, Find(schedule, 1, "B0"), "runs before its F");
}

TEST(ValidatorTest, DuplicatedMicrobatchIsRejectedAtTheSecondCopy) {
  Schedule schedule = OneFOneB(3, 4);
  auto& rank2 = schedule.per_stage[2];
  rank2[Find(schedule, 2, "F1")].microbatch = 0;
  ExpectRejectedAt(schedule, 2, 2, "duplicate: F0 already ran at step 0");
}

TEST(ValidatorTest, MissingMicrobatchIsRejected) {
  Schedule schedule = GPipe(2, 3);
  auto& rank1 = schedule.per_stage[1];
  rank1.erase(rank1.begin() + Find(schedule, 1, "B2"));
  ExpectRejectedAt(schedule, 1, rank1.size() - 1, "never runs B (or I) of micro-batch 2");
}

TEST(ValidatorTest, ForwardOnlyScheduleNeedsEveryForwardButNoBackward) {
  Schedule schedule = ForwardOnly(2, 3);
  EXPECT_TRUE(Validate(schedule));
  auto& rank1 = schedule.per_stage[1];
  rank1.erase(rank1.begin() + Find(schedule, 1, "F1"));
  ExpectRejectedAt(schedule, 1, rank1.size() - 1, "never runs F of micro-batch 1");
  // One backward anywhere makes it a training schedule, which then misses the others.
  Schedule partial = ForwardOnly(2, 3);
  partial.per_stage[1].push_back(Action{1, ActionKind::kBackward, 0, 0});
  EXPECT_FALSE(Validate(partial));
}

TEST(ValidatorTest, WeightGradientBeforeInputGradientIsRejected) {
  Schedule schedule = ZeroBubbleH1(2, 2);
  auto& rank0 = schedule.per_stage[0];
  std::swap(rank0[Find(schedule, 0, "I0")], rank0[Find(schedule, 0, "W0")]);
  ExpectRejectedAt(schedule, 0, Find(schedule, 0, "W0"), "W of micro-batch 0 on virtual stage 0");
}

TEST(ValidatorTest, MixingFullAndSplitBackwardIsRejected) {
  Schedule schedule = OneFOneB(1, 2);
  schedule.per_stage[0].push_back({0, ActionKind::kBackwardWeight, 1, 0});
  ExpectRejectedAt(schedule, 0, 4, "mixes a full B with split I/W");
}

TEST(ValidatorTest, ActionOnAnotherRanksRowIsRejected) {
  Schedule schedule = GPipe(2, 1);
  schedule.per_stage[1][0].stage = 0;
  ExpectRejectedAt(schedule, 1, 0, "action of stage 0 in stage 1's list");
}

TEST(ValidatorTest, OutOfRangeFieldsAreRejected) {
  Schedule schedule = GPipe(2, 2);
  schedule.per_stage[0][1].microbatch = 2;
  ExpectRejectedAt(schedule, 0, 1, "micro-batch 2 out of range");
  schedule = GPipe(2, 2);
  schedule.per_stage[0][1].chunk = 1;
  ExpectRejectedAt(schedule, 0, 1, "chunk 1 out of range");
}

TEST(ValidatorTest, BadShapeIsRejected) {
  Schedule schedule = GPipe(2, 2);
  schedule.per_stage.pop_back();
  EXPECT_NE(Validate(schedule).message.find("1 stage rows for 2 stages"), std::string::npos);
  schedule.microbatches = 0;
  EXPECT_FALSE(Validate(schedule));
}

TEST(ValidatorTest, SendFromTheLastStageHasNoReceiver) {
  Schedule schedule = InsertCommunication(GPipe(2, 1));
  auto& rank1 = schedule.per_stage[1];
  rank1.insert(rank1.begin() + Find(schedule, 1, "F0") + 1, {1, ActionKind::kSendForward, 0, 0});
  ExpectRejectedAt(schedule, 1, Find(schedule, 1, "SEND_F0"), "has no receiver");
}

TEST(ValidatorTest, SendBeforeItsComputeIsRejected) {
  Schedule schedule = InsertCommunication(GPipe(2, 1));
  auto& rank0 = schedule.per_stage[0];
  std::swap(rank0[0], rank0[1]);  // SEND_F0 before F0
  ExpectRejectedAt(schedule, 0, 0, "sends before its F ran");
}

TEST(ValidatorTest, ConsumingWithoutReceivingIsRejected) {
  Schedule schedule = InsertCommunication(GPipe(2, 2));
  auto& rank1 = schedule.per_stage[1];
  // Move RECV_F1 after F1: the data is not there when F1 runs.
  const size_t recv = Find(schedule, 1, "RECV_F1");
  std::swap(rank1[recv], rank1[recv + 1]);
  ExpectRejectedAt(schedule, 1, recv, "no RECV_F for it precedes it");
}

TEST(ValidatorTest, CyclicComputeOnlyScheduleDeadlocks) {
  // Rank 0 runs B0 before F1; rank 1 runs F1 before B0: each waits for the other.
  Schedule schedule = GPipe(2, 2);
  schedule.per_stage[0] = {{0, ActionKind::kForward, 0, 0},
                           {0, ActionKind::kBackward, 0, 0},
                           {0, ActionKind::kForward, 1, 0},
                           {0, ActionKind::kBackward, 1, 0}};
  ExpectRejectedAt(schedule, 0, 1, "deadlock");
  EXPECT_NE(Validate(schedule).message.find("stage 1 step 1 (F1) waits for F of micro-batch 1"),
            std::string::npos)
      << Validate(schedule).message;
}

TEST(ValidatorTest, CheckValidThrowsTheMarkedGrid) {
  Schedule schedule = GPipe(2, 1);
  std::swap(schedule.per_stage[0][0], schedule.per_stage[0][1]);
  try {
    CheckValid(schedule);
    FAIL() << "expected an exception";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("<-- ERROR HERE"), std::string::npos);
  }
  EXPECT_NO_THROW(CheckValid(GPipe(2, 1)));
}

TEST(ValidatorTest, GridHasAColumnPerStageAndARowPerStep) {
  const Schedule schedule = InsertCommunication(GPipe(2, 1));
  EXPECT_EQ(FormatGrid(schedule),
            "step  stage 0   stage 1\n"
            "0     F0        RECV_F0\n"
            "1     SEND_F0   F0\n"
            "2     RECV_B0   B0\n"
            "3     B0        SEND_B0\n");
  EXPECT_EQ(FormatGrid(schedule, 1, 2),
            "step  stage 0   stage 1\n"
            "0     F0        RECV_F0\n"
            "1     SEND_F0   F0\n"
            "2     RECV_B0   [B0]      <-- ERROR HERE (stage 1)\n"
            "3     B0        SEND_B0\n");
}

}  // namespace
}  // namespace baton
