#include "scheduler/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>

#include "core/error.h"
#include "scheduler/communication.h"
#include "scheduler/generators.h"

namespace baton {
namespace {

double TotalIdle(const SimulationResult& result) {
  double idle = 0;
  for (const StageFigures& figures : result.per_stage) idle += figures.idle;
  return idle;
}

TEST(SimulatorTest, GPipeBubbleFractionIsStagesMinusOneOverMicrobatchesPlusStagesMinusOne) {
  const SimulationResult result = Simulate(GPipe(4, 8));
  // Exactly 3/11: makespan 3 * (m + p - 1) = 33, idle 3 * (p - 1) = 9 on each of 4 ranks.
  EXPECT_EQ(result.makespan, 33);
  EXPECT_EQ(TotalIdle(result), 36);
  EXPECT_DOUBLE_EQ(result.bubble_fraction, 3.0 / 11);
}

TEST(SimulatorTest, OneF1BBubbleFractionEqualsGPipes) {
  const SimulationResult result = Simulate(OneFOneB(4, 8));
  EXPECT_EQ(result.makespan, 33);
  EXPECT_EQ(TotalIdle(result), 36);
  EXPECT_DOUBLE_EQ(result.bubble_fraction, 3.0 / 11);
}

TEST(SimulatorTest, GPipeAndOneF1BBubbleFollowsTheFormulaForEveryShape) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 16; ++m) {
      for (const Schedule& schedule : {GPipe(p, m), OneFOneB(p, m)}) {
        const SimulationResult result = Simulate(schedule);
        EXPECT_EQ(result.makespan, 3 * (m + p - 1)) << schedule.name << " p=" << p << " m=" << m;
        EXPECT_NEAR(result.bubble_fraction, (p - 1.0) / (m + p - 1), 1e-12);
      }
    }
  }
}

TEST(SimulatorTest, InterleavedWithTwoChunksHasASmallerBubble) {
  const SimulationResult result = Simulate(Interleaved1F1B(4, 8, 2));
  EXPECT_LT(result.bubble_fraction, 3.0 / 11);
  // Megatron's (p - 1) / (v * m + p - 1) with F=1, B=2 per chunk action: makespan 57, idle 9.
  EXPECT_EQ(result.makespan, 57);
  EXPECT_DOUBLE_EQ(result.bubble_fraction, 3.0 / 19);
}

TEST(SimulatorTest, InterleavedMatchesMegatronsBubbleWhenMicrobatchesAreAMultipleOfStages) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = p; m <= 24; m += p) {
      for (int v = 1; v <= 4; ++v) {
        const SimulationResult result = Simulate(Interleaved1F1B(p, m, v));
        EXPECT_EQ(result.makespan, 3 * (v * m + p - 1)) << "p=" << p << " m=" << m << " v=" << v;
        EXPECT_NEAR(result.bubble_fraction, (p - 1.0) / (v * m + p - 1), 1e-12);
      }
    }
  }
}

TEST(SimulatorTest, InterleavedBubbleShrinksWithChunksWhenMicrobatchesFillGroups) {
  for (int p = 2; p <= 6; ++p) {
    for (int m = p; m <= 4 * p; m += p) {
      const double one_f_one_b = Simulate(OneFOneB(p, m)).bubble_fraction;
      const double two = Simulate(Interleaved1F1B(p, m, 2)).bubble_fraction;
      const double four = Simulate(Interleaved1F1B(p, m, 4)).bubble_fraction;
      EXPECT_LT(two, one_f_one_b) << "p=" << p << " m=" << m;
      EXPECT_LT(four, two) << "p=" << p << " m=" << m;
    }
  }
}

TEST(SimulatorTest, ZeroBubbleH1BubbleIsStagesMinusOneOverThreeMicrobatchesPlusStagesMinusOne) {
  const SimulationResult result = Simulate(ZeroBubbleH1(4, 8));  // F = I = W = 1
  EXPECT_EQ(result.makespan, 27);
  EXPECT_EQ(TotalIdle(result), 12);
  EXPECT_DOUBLE_EQ(result.bubble_fraction, 3.0 / 27);
  for (int p = 1; p <= 8; ++p) {
    for (int m = p; m <= 24; ++m) {
      const SimulationResult each = Simulate(ZeroBubbleH1(p, m));
      EXPECT_EQ(each.makespan, 3 * m + p - 1) << "p=" << p << " m=" << m;
      EXPECT_NEAR(each.bubble_fraction, (p - 1.0) / (3 * m + p - 1), 1e-12);
    }
  }
}

TEST(SimulatorTest, GPipeHoldsEveryMicrobatchOnEveryStage) {
  for (int p : {1, 3, 8}) {
    for (int m : {1, 5, 32}) {
      for (const StageFigures& figures : Simulate(GPipe(p, m)).per_stage) {
        EXPECT_EQ(figures.peak_in_flight, m);
      }
    }
  }
}

TEST(SimulatorTest, OneF1BPeakInFlightEqualsStagesMinusRank) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 12; ++m) {
      const SimulationResult result = Simulate(OneFOneB(p, m));
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(result.per_stage[s].peak_in_flight, std::min(p - s, m))
            << "p=" << p << " m=" << m << " s=" << s;
      }
    }
  }
}

TEST(SimulatorTest, ZeroBubbleH1PeakInFlightNeverExceedsOneF1BsPeak) {
  // Held until W. No rank exceeds 1F1B's peak, min(p, m) on rank 0; rank 0 matches it. (Later
  // ranks hold more than their own 1F1B count: a bubble of p - 1 forces the last rank to defer
  // p - 1 W's; see docs/schedules.md.)
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 16; ++m) {
      const SimulationResult zb = Simulate(ZeroBubbleH1(p, m));
      const SimulationResult one_f_one_b = Simulate(OneFOneB(p, m));
      int peak_1f1b = 0;
      for (const StageFigures& figures : one_f_one_b.per_stage) {
        peak_1f1b = std::max(peak_1f1b, figures.peak_in_flight);
      }
      for (const StageFigures& figures : zb.per_stage) {
        EXPECT_LE(figures.peak_in_flight, peak_1f1b) << "p=" << p << " m=" << m;
      }
      EXPECT_EQ(zb.per_stage[0].peak_in_flight, one_f_one_b.per_stage[0].peak_in_flight);
    }
  }
}

TEST(SimulatorTest, PeakInFlightCountsEachChunkOfAMicrobatch) {
  const std::vector<Action> actions = {{0, ActionKind::kForward, 0, 0},
                                       {0, ActionKind::kForward, 0, 1},
                                       {0, ActionKind::kBackward, 0, 1},
                                       {0, ActionKind::kBackward, 0, 0}};
  EXPECT_EQ(PeakInFlight(actions), 2);
}

TEST(SimulatorTest, SplitBackwardHoldsTheMicrobatchUntilItsW) {
  const std::vector<Action> actions = {
      {0, ActionKind::kForward, 0, 0},       {0, ActionKind::kBackwardInput, 0, 0},
      {0, ActionKind::kForward, 1, 0},       {0, ActionKind::kBackwardWeight, 0, 0},
      {0, ActionKind::kBackwardInput, 1, 0}, {0, ActionKind::kBackwardWeight, 1, 0}};
  EXPECT_EQ(PeakInFlight(actions), 2);
}

TEST(SimulatorTest, PerStageCostsSlowOnlyThatStage) {
  Costs costs;
  costs.per_virtual_stage[1] = ActionCosts{2, 2, 1, 1, 0};
  const SimulationResult result = Simulate(GPipe(2, 1), costs);
  // F0 [0,1) on rank 0, F0 [1,3) on rank 1, B0 [3,5) on rank 1, B0 [5,7) on rank 0.
  EXPECT_EQ(result.makespan, 7);
  EXPECT_EQ(result.per_stage[0].busy, 3);
  EXPECT_EQ(result.per_stage[1].busy, 4);
  EXPECT_EQ(result.timeline[1][0].start, 1);
  EXPECT_EQ(result.timeline[1][0].end, 3);
}

TEST(SimulatorTest, CommunicationLatencyDelaysTheReceiver) {
  Costs costs;
  costs.defaults.communication = 0.5;
  for (const Schedule& schedule : {GPipe(2, 1), InsertCommunication(GPipe(2, 1))}) {
    const SimulationResult result = Simulate(schedule, costs);
    // F0 [0,1) -> arrives 1.5 -> F0 [1.5,2.5), B0 [2.5,4.5) -> arrives 5 -> B0 [5,7).
    EXPECT_EQ(result.timeline[1][0].start, 1.5);
    EXPECT_EQ(result.timeline[0][1].start, 5);
    EXPECT_EQ(result.makespan, 7);
  }
}

TEST(SimulatorTest, PostingAMessageHoldsItsStage) {
  Costs costs;
  costs.defaults.communication = 0.5;
  costs.defaults.post = 0.25;
  const SimulationResult result = Simulate(InsertCommunication(GPipe(2, 1)), costs);
  // Stage 1 posts RECV_F0 [0,0.25). F0 [0,1), SEND_F0 posted [1,1.25), the message arrives 1.5
  // -> F0 [1.5,2.5), B0 [2.5,4.5), SEND_B0 [4.5,4.75) arrives 5. Stage 0 posted RECV_B0 at
  // [1.25,1.5) -> B0 [5,7).
  EXPECT_EQ(result.timeline[1][0].start, 1.5);
  EXPECT_EQ(result.timeline[0][1].start, 5);
  EXPECT_EQ(result.makespan, 7);
  // A stage busy posting delays its next compute: stage 0's second forward waits for SEND_F0.
  const SimulationResult two = Simulate(InsertCommunication(GPipe(2, 2)), costs);
  EXPECT_EQ(two.timeline[0][1].start, 1.25);
  EXPECT_GT(two.bubble_fraction, Simulate(InsertCommunication(GPipe(2, 2))).bubble_fraction);
}

TEST(SimulatorTest, InsertedCommunicationDoesNotChangeTheTimeline) {
  for (const Schedule& compute :
       {OneFOneB(4, 8), Interleaved1F1B(3, 7, 3), ZeroBubbleH1(5, 9), GPipe(2, 3)}) {
    const SimulationResult expected = Simulate(compute);
    for (CommPlacement placement : {CommPlacement::kJustInTime, CommPlacement::kRendezvousSafe}) {
      const SimulationResult actual = Simulate(InsertCommunication(compute, placement));
      EXPECT_EQ(actual.makespan, expected.makespan) << compute.name;
      ASSERT_EQ(actual.timeline.size(), expected.timeline.size());
      for (size_t rank = 0; rank < actual.timeline.size(); ++rank) {
        ASSERT_EQ(actual.timeline[rank].size(), expected.timeline[rank].size());
        for (size_t i = 0; i < actual.timeline[rank].size(); ++i) {
          EXPECT_EQ(actual.timeline[rank][i].start, expected.timeline[rank][i].start);
        }
      }
    }
  }
}

TEST(SimulatorTest, TimelineHoldsComputeActionsAndBusyPlusIdleIsMakespan) {
  const SimulationResult result = Simulate(InsertCommunication(ZeroBubbleH1(3, 5)));
  for (size_t rank = 0; rank < result.timeline.size(); ++rank) {
    EXPECT_EQ(result.timeline[rank].size(), 15u);  // F, I, W for 5 micro-batches
    for (const TimedAction& timed : result.timeline[rank]) {
      EXPECT_TRUE(IsCompute(timed.action.kind));
      EXPECT_LE(timed.end, result.makespan);
    }
    EXPECT_EQ(result.per_stage[rank].busy + result.per_stage[rank].idle, result.makespan);
    EXPECT_EQ(result.per_stage[rank].stage, static_cast<int>(rank));
  }
}

TEST(SimulatorTest, InvalidScheduleIsRefusedWithTheMarkedGrid) {
  Schedule schedule = GPipe(2, 2);
  std::swap(schedule.per_stage[0][0], schedule.per_stage[0][3]);
  try {
    Simulate(schedule);
    FAIL() << "expected an exception";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("<-- ERROR HERE"), std::string::npos);
  }
}

TEST(SimulatorTest, CostsForAMissingVirtualStageAreRefused) {
  EXPECT_THROW(Simulate(GPipe(2, 2), ParseCosts("F@2=1")), Error);
  EXPECT_NO_THROW(Simulate(Interleaved1F1B(2, 2, 2), ParseCosts("F@3=1")));
}

}  // namespace
}  // namespace baton
