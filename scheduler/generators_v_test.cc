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
#include "scheduler/generators_test_util.h"
#include "scheduler/simulator.h"
#include "scheduler/validator.h"

namespace baton {
namespace {

using generator_testing::ExpectRunnable;
using generator_testing::Row;
using generator_testing::Shape;

// 1F1B's largest per-stage peak, in whole-stage micro-batches: min(p, m).
int OneF1BPeak(int p, int m) { return std::min(p, m); }

TEST(GeneratorsVTest, ChunksForGivesVSchedulesTwoChunks) {
  for (const char* name : {"zb-v", "v-half", "v-min", "dualpipev"}) {
    EXPECT_EQ(ChunksFor(name, 1), 2) << name;
    EXPECT_EQ(MakeSchedule(name, 3, 4).layout, ChunkLayout::kV) << name;
  }
  EXPECT_EQ(ChunksFor("looped-bfs", 3), 3);
  EXPECT_THROW(ChunksFor("looped-bfs", 1), Error);
  EXPECT_EQ(ChunksFor("zb-h2", 1), 1);
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

// ---- V-Half and V-Min ----

TEST(GeneratorsVTest, VMinAndVHalfRepeatABuildingBlockEverySixUnits) {
  const Schedule v_min = VMin(2, 2);
  EXPECT_EQ(v_min.name, "v-min");
  EXPECT_EQ(v_min.layout, ChunkLayout::kV);
  EXPECT_EQ(Row(v_min, 0), "F0 3F0 3I0 3W0 F1 I0 W0 3F1 3I1 3W1 I1 W1");
  EXPECT_EQ(Row(v_min, 1), "F0 2F0 2I0 I0 F1 2F1 2W0 W0 2I1 I1 2W1 W1");
  const Schedule v_half = VHalf(2, 2);
  EXPECT_EQ(v_half.name, "v-half");
  EXPECT_EQ(v_half.chunks, 2);
  EXPECT_EQ(Row(v_half, 0), "F0 3F0 3I0 F1 3W0 3F1 3I1 I0 3W1 W0 I1 W1");
  EXPECT_EQ(Row(v_half, 1), "F0 2F0 2I0 F1 2F1 I0 2W0 W0 2I1 I1 2W1 W1");
  EXPECT_EQ(MakeSchedule("v-min", 2, 2), v_min);
  EXPECT_EQ(MakeSchedule("v-half", 2, 2, 2), v_half);
}

TEST(GeneratorsVTest, VMinAndVHalfValidateAndDryRunForEveryShape) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 3 * p + 2; ++m) {
      SCOPED_TRACE(Shape(p, m));
      ExpectRunnable(VMin(p, m));
      ExpectRunnable(VHalf(p, m));
    }
  }
}

// The paper's activation memory, in whole-stage micro-batches: V-Min floor((p+4)/3), V-Half
// floor((p+2)/2), against 1F1B's p; here in chunk-micro-batches (twice that). Reached once the
// block repeats often enough (m >= 2p), never exceeded.
TEST(GeneratorsVTest, VMinHoldsAThirdAndVHalfHalfOfOneF1BsPeak) {
  for (int p = 1; p <= 8; ++p) {
    const int v_min_peak = 2 * ((p + 4) / 3);
    const int v_half_peak = 2 * ((p + 2) / 2);
    for (int m = 1; m <= 3 * p + 2; ++m) {
      int min_peak = 0;
      int half_peak = 0;
      for (const StageFigures& figures : Simulate(VMin(p, m)).per_stage) {
        min_peak = std::max(min_peak, figures.peak_in_flight);
      }
      for (const StageFigures& figures : Simulate(VHalf(p, m)).per_stage) {
        half_peak = std::max(half_peak, figures.peak_in_flight);
      }
      EXPECT_LE(min_peak, v_min_peak) << Shape(p, m);
      EXPECT_LE(half_peak, v_half_peak) << Shape(p, m);
      if (m >= 2 * p) {
        EXPECT_EQ(min_peak, v_min_peak) << Shape(p, m);
        EXPECT_EQ(half_peak, v_half_peak) << Shape(p, m);
      }
    }
  }
}

// The block has no bubble in its steady state; the bubble is the squeezed warm-up and cool-down.
// The paper: about 2p/3m for V-Min and p/2m for V-Half against 1F1B's p/m (F = B = W). Here, with
// F = I = W = 1 per chunk (a stage-micro-batch is 6), each stage idles at most 4p-3 (V-Min; 4p-5
// except where residues collide, p = 6) and exactly floor(7p/2)-4 for m >= p (V-Half), against
// 1F1B's 6(p-1); V-Half's bubble <= V-Min's <= 1F1B's for every shape.
TEST(GeneratorsVTest, VMinAndVHalfBubblesSitBetweenZeroBubbleAndOneF1B) {
  for (int p = 2; p <= 8; ++p) {
    for (int m = 1; m <= 3 * p + 2; ++m) {
      const SimulationResult v_min = Simulate(VMin(p, m));
      const SimulationResult v_half = Simulate(VHalf(p, m));
      const double one_f_one_b = Simulate(OneFOneB(p, m)).bubble_fraction;
      EXPECT_LE(v_min.makespan - 6 * m, 4 * p - 3) << Shape(p, m);
      EXPECT_LE(v_half.makespan - 6 * m, 4 * p - 5) << Shape(p, m);
      if (m >= p) {
        EXPECT_EQ(v_half.makespan - 6 * m, 7 * p / 2 - 4) << Shape(p, m);
      }
      EXPECT_LE(v_half.bubble_fraction, v_min.bubble_fraction + 1e-12) << Shape(p, m);
      EXPECT_LE(v_min.bubble_fraction, one_f_one_b + 1e-12) << Shape(p, m);
    }
  }
  // p = 4, m = 8: V-Min 59 (bubble 11/59), V-Half 58 (10/58), 1F1B 3/11.
  EXPECT_EQ(Simulate(VMin(4, 8)).makespan, 59);
  EXPECT_EQ(Simulate(VHalf(4, 8)).makespan, 58);
  EXPECT_EQ(Simulate(VMin(1, 3)).makespan, 18);  // one stage: no bubble
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
