#include "scheduler/action.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "core/error.h"

namespace baton {
namespace {

TEST(ActionTest, ChunkZeroPrintsWithoutStagePrefix) {
  EXPECT_EQ(ToString(Action{1, ActionKind::kForward, 3, 0}, 4, ChunkLayout::kLoop), "F3");
  EXPECT_EQ(ToString(Action{0, ActionKind::kSendBackward, 5, 0}, 4, ChunkLayout::kLoop), "SEND_B5");
}

TEST(ActionTest, LaterChunksPrintWithTheirVirtualStage) {
  // Chunk 1 of rank 1 in a 4-rank pipeline is virtual stage 1 * 4 + 1 = 5.
  EXPECT_EQ(ToString(Action{1, ActionKind::kSendBackward, 2, 1}, 4, ChunkLayout::kLoop),
            "5SEND_B2");
  EXPECT_EQ(ToString(Action{0, ActionKind::kBackwardWeight, 12, 3}, 2, ChunkLayout::kLoop), "6W12");
}

TEST(ActionTest, EveryActionRoundTripsThroughText) {
  for (int ranks : {1, 2, 5}) {
    for (int rank = 0; rank < ranks; ++rank) {
      for (int chunk : {0, 1, 3}) {
        for (ActionKind kind : kAllActionKinds) {
          for (int mb : {0, 7, 31}) {
            const Action action{rank, kind, mb, chunk};
            const std::string text = ToString(action, ranks, ChunkLayout::kLoop);
            EXPECT_EQ(ParseAction(text, rank, ranks, ChunkLayout::kLoop), action) << text;
          }
        }
      }
    }
  }
}

TEST(ActionTest, ExplicitVirtualStageOfChunkZeroParsesLikePyTorch) {
  EXPECT_EQ(ParseAction("1F3", 1, 4, ChunkLayout::kLoop), (Action{1, ActionKind::kForward, 3, 0}));
  EXPECT_EQ(ParseAction(" 3RECV_F0 ", 3, 4, ChunkLayout::kLoop),
            (Action{3, ActionKind::kRecvForward, 0, 0}));
  EXPECT_EQ(ParseAction("7B2", 3, 4, ChunkLayout::kLoop), (Action{3, ActionKind::kBackward, 2, 1}));
}

TEST(ActionTest, MalformedTextIsRejected) {
  for (const char* text :
       {"", "F", "3", "X3", "F3x", "SEND_F", "F-1", "f3", "SEND F3", "F 3", "99999999999F1"}) {
    EXPECT_THROW(ParseAction(text, 0, 2, ChunkLayout::kLoop), Error) << text;
  }
}

TEST(ActionTest, VirtualStageHeldByAnotherRankIsRejected) {
  try {
    ParseAction("2F3", 1, 4, ChunkLayout::kLoop);
    FAIL() << "expected an exception";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("held by stage 2"), std::string::npos) << error.what();
  }
}

TEST(ActionTest, VirtualStagesFollowMegatronLayout) {
  EXPECT_EQ(VirtualStage(1, 2, 4, ChunkLayout::kLoop), 9);
  EXPECT_EQ(StageOfVirtualStage(9, 4, ChunkLayout::kLoop), 1);
  EXPECT_EQ(ChunkOfVirtualStage(9, 4), 2);
  EXPECT_EQ(VirtualStage(Action{3, ActionKind::kForward, 0, 1}, 4, ChunkLayout::kLoop), 7);
}

TEST(ActionTest, PeerRankFollowsTheDataAcrossChunkBoundaries) {
  // Rank 3 is the last of 4 ranks: its chunk-0 output goes to virtual stage 4, chunk 1 of rank 0.
  EXPECT_EQ(PeerStage(Action{3, ActionKind::kSendForward, 0, 0}, 4, ChunkLayout::kLoop), 0);
  EXPECT_EQ(PeerVirtualStage(Action{3, ActionKind::kSendForward, 0, 0}, 4, ChunkLayout::kLoop), 4);
  EXPECT_EQ(PeerStage(Action{0, ActionKind::kRecvForward, 0, 1}, 4, ChunkLayout::kLoop), 3);
  EXPECT_EQ(PeerStage(Action{0, ActionKind::kSendBackward, 0, 1}, 4, ChunkLayout::kLoop), 3);
  EXPECT_EQ(PeerStage(Action{3, ActionKind::kRecvBackward, 0, 0}, 4, ChunkLayout::kLoop), 0);
  EXPECT_EQ(PeerStage(Action{1, ActionKind::kSendForward, 0, 0}, 4, ChunkLayout::kLoop), 2);
  EXPECT_EQ(PeerStage(Action{1, ActionKind::kSendBackward, 0, 0}, 4, ChunkLayout::kLoop), 0);
}

TEST(ActionTest, PeerOfAComputeActionIsAnError) {
  EXPECT_THROW(PeerStage(Action{0, ActionKind::kForward, 0, 0}, 2, ChunkLayout::kLoop), Error);
}

TEST(ActionTest, KindsAreClassified) {
  int compute = 0;
  int sends = 0;
  int recvs = 0;
  for (ActionKind kind : kAllActionKinds) {
    compute += IsCompute(kind);
    sends += IsSend(kind);
    recvs += IsRecv(kind);
    EXPECT_NE(IsCompute(kind), IsCommunication(kind)) << KindName(kind);
  }
  EXPECT_EQ(compute, 4);
  EXPECT_EQ(sends, 2);
  EXPECT_EQ(recvs, 2);
}

}  // namespace
}  // namespace baton
