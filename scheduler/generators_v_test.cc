// The schedules with split backward beyond ZB-H1 and the V-layout ones: their shape, and their
// simulated bubble and per-stage peak against the papers' formulas. Costs are the papers' unit
// costs: F = I = W = 1 per chunk action (B = 2 for 1F1B), communication 0. Peaks are in
// chunk-micro-batches; with 2 chunks one whole-stage micro-batch is 2 of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "scheduler/communication.h"
#include "scheduler/generators.h"
#include "scheduler/simulator.h"
#include "scheduler/validator.h"

namespace baton {
namespace {

std::string Row(const Schedule& schedule, int stage) {
  std::string text;
  for (const Action& action : schedule.per_stage[static_cast<size_t>(stage)]) {
    text += (text.empty() ? "" : " ") + ToString(action, schedule.stages, schedule.layout);
  }
  return text;
}

std::string Shape(int p, int m) { return "p=" + std::to_string(p) + " m=" + std::to_string(m); }

// 1F1B's largest per-stage peak, in whole-stage micro-batches: min(p, m).
int OneF1BPeak(int p, int m) { return std::min(p, m); }

// Validates `compute` as generated, with communication in both placements, under both send
// semantics where the placement promises them, and after the runtime's lowering.
void ExpectRunnable(const Schedule& compute) {
  const ValidationResult bare = Validate(compute);
  ASSERT_TRUE(bare) << bare.message;
  const ValidationResult just_in_time =
      Validate(InsertCommunication(compute, CommPlacement::kJustInTime), CommSemantics::kAsync);
  ASSERT_TRUE(just_in_time) << just_in_time.message;
  const Schedule safe = InsertCommunication(compute, CommPlacement::kRendezvousSafe);
  for (const CommSemantics semantics : {CommSemantics::kAsync, CommSemantics::kRendezvous}) {
    const ValidationResult placed = Validate(safe, semantics);
    ASSERT_TRUE(placed) << placed.message;
  }
  if (compute.stages > 1) {
    const ValidationResult lowered = Validate(PostReceivesEarly(safe), CommSemantics::kRendezvous);
    ASSERT_TRUE(lowered) << lowered.message;
  }
}

TEST(GeneratorsVTest, ChunksForGivesVSchedulesTwoChunks) {
  EXPECT_EQ(ChunksFor("zb-v", 1), 2);
  EXPECT_EQ(ChunksFor("zb-v", 2), 2);
  EXPECT_THROW(ChunksFor("zb-v", 3), Error);
  EXPECT_EQ(ChunksFor("interleaved", 3), 3);
  EXPECT_THROW(ChunksFor("interleaved", 1), Error);
  EXPECT_EQ(ChunksFor("1f1b", 1), 1);
  EXPECT_THROW(ChunksFor("1f1b", 2), Error);
  EXPECT_THROW(ChunksFor("2f2b", 1), Error);
}

// ---- ZB-V ----

TEST(GeneratorsVTest, ZeroBubbleVRunsDownAndBackUpTheStages) {
  const Schedule schedule = ZeroBubbleV(2, 3);
  EXPECT_EQ(schedule.name, "zb-v");
  EXPECT_EQ(schedule.chunks, 2);
  EXPECT_EQ(schedule.layout, ChunkLayout::kV);
  // Stage 0 holds virtual stages 0 and 3; stage 1 holds 1 and 2.
  EXPECT_EQ(Row(schedule, 0), "F0 F1 F2 3F0 3I0 3W0 3F1 3I1 3W1 I0 W0 3F2 3I2 3W2 I1 W1 I2 W2");
  EXPECT_EQ(Row(schedule, 1), "F0 2F0 F1 2F1 2I0 2W0 F2 I0 W0 2F2 2I1 2W1 I1 2I2 I2 W1 2W2 W2");
  EXPECT_EQ(MakeSchedule("zb-v", 2, 3), schedule);
  EXPECT_EQ(MakeSchedule("zb-v", 2, 3, 2), schedule);
}

TEST(GeneratorsVTest, ZeroBubbleVValidatesAndDryRunsForEveryShape) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 3 * p + 2; ++m) {
      SCOPED_TRACE(Shape(p, m));
      ExpectRunnable(ZeroBubbleV(p, m));
    }
  }
}

// Makespan 6m + p-1 once m >= 2p-1 (the p-1 start-up is the whole bubble): bubble
// (p-1)/(6m+p-1). Below, the pattern runs as for 2p-1 micro-batches: 4m + 4p-2.
TEST(GeneratorsVTest, ZeroBubbleVMakespanIsSixMicrobatchesPlusStagesMinusOne) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 3 * p + 2; ++m) {
      const SimulationResult result = Simulate(ZeroBubbleV(p, m));
      EXPECT_EQ(result.makespan, std::max(6 * m + p - 1, 4 * m + 4 * p - 2)) << Shape(p, m);
      if (m >= 2 * p - 1) {
        EXPECT_NEAR(result.bubble_fraction, (p - 1.0) / (6 * m + p - 1), 1e-12) << Shape(p, m);
      }
    }
  }
}

// The check: p = 4, m = 8, at 1F1B's activation memory, a third of 1F1B's bubble or less.
TEST(GeneratorsVTest, ZeroBubbleVBubbleIsAtMostAThirdOfOneF1BsAtEqualMemory) {
  const SimulationResult zb_v = Simulate(ZeroBubbleV(4, 8));
  const SimulationResult one_f_one_b = Simulate(OneFOneB(4, 8));  // F = 1, B = 2
  EXPECT_EQ(zb_v.makespan, 51);
  EXPECT_DOUBLE_EQ(zb_v.bubble_fraction, 3.0 / 51);
  EXPECT_DOUBLE_EQ(one_f_one_b.bubble_fraction, 3.0 / 11);
  EXPECT_LE(zb_v.bubble_fraction, one_f_one_b.bubble_fraction / 3);
  for (const StageFigures& figures : zb_v.per_stage) EXPECT_EQ(figures.peak_in_flight, 2 * 4);
  // And for every shape once the pattern is full.
  for (int p = 2; p <= 8; ++p) {
    for (int m = 2 * p - 1; m <= 4 * p; ++m) {
      EXPECT_LE(Simulate(ZeroBubbleV(p, m)).bubble_fraction,
                Simulate(OneFOneB(p, m)).bubble_fraction / 3)
          << Shape(p, m);
    }
  }
}

// Every stage holds at most 2 min(p, m) chunk-micro-batches, 1F1B's peak of min(p, m) whole-stage
// micro-batches, and some stage reaches it (with m >= 2p-1, every stage does).
TEST(GeneratorsVTest, ZeroBubbleVPeakIsOneF1BsPeak) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 3 * p + 2; ++m) {
      const SimulationResult result = Simulate(ZeroBubbleV(p, m));
      int peak = 0;
      for (const StageFigures& figures : result.per_stage) {
        peak = std::max(peak, figures.peak_in_flight);
        if (m >= 2 * p - 1) {
          EXPECT_EQ(figures.peak_in_flight, 2 * p) << Shape(p, m);
        }
      }
      EXPECT_EQ(peak, 2 * OneF1BPeak(p, m)) << Shape(p, m);
    }
  }
}

// ---- DualPipeV ----

TEST(GeneratorsVTest, DualPipeVPairsTheForwardOfOneChunkWithTheBackwardOfTheOther) {
  const Schedule schedule = DualPipeV(2, 4);
  EXPECT_EQ(schedule.name, "dualpipev");
  EXPECT_EQ(schedule.chunks, 2);
  EXPECT_EQ(schedule.layout, ChunkLayout::kV);
  EXPECT_EQ(Row(schedule, 0), "F0 F1 F2 3F0 3I0 3W0 3F1 F3 3B1 3F2 B0 3B2 3F3 B1 3B3 I2 W2 I3 W3");
  EXPECT_EQ(Row(schedule, 1), "F0 2F0 F1 2F1 F2 2B0 2F2 B0 F3 2B1 2F3 B1 2B2 B2 2I3 I3 2W3 W3");
  EXPECT_EQ(MakeSchedule("dualpipev", 2, 4), schedule);
}

TEST(GeneratorsVTest, DualPipeVValidatesAndDryRunsForEveryShape) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 3 * p + 2; ++m) {
      SCOPED_TRACE(Shape(p, m));
      ExpectRunnable(DualPipeV(p, m));
    }
  }
}

// DeepSeek's table (DualPipeV on PP/2 devices): bubble (PP/2-1)(F&B + B - 3W), activation PP+1
// chunks, here PP = 2p. Without the F&B overlap (F&B = F + B = 3, B = 2, W = 1 per chunk) the
// table allows 2(p-1) idle per stage; the construction idles p-1: makespan 6m + p-1 for m >= 2p.
TEST(GeneratorsVTest, DualPipeVBubbleAndPeakMeetDeepSeeksTable) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 3 * p + 2; ++m) {
      const SimulationResult result = Simulate(DualPipeV(p, m));
      for (const StageFigures& figures : result.per_stage) {
        EXPECT_LE(figures.peak_in_flight, 2 * p + 1) << Shape(p, m);
        if (m >= 2 * p) {
          EXPECT_EQ(figures.peak_in_flight, 2 * p + 1) << Shape(p, m);
          EXPECT_EQ(figures.idle, p - 1) << Shape(p, m);
          EXPECT_LE(figures.idle, 2 * (p - 1)) << Shape(p, m);
        }
      }
      if (m >= 2 * p) {
        EXPECT_EQ(result.makespan, 6 * m + p - 1) << Shape(p, m);
      }
    }
  }
  EXPECT_DOUBLE_EQ(Simulate(DualPipeV(4, 8)).bubble_fraction, 3.0 / 51);
}

}  // namespace
}  // namespace baton
