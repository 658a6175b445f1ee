#include "scheduler/generators.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>

#include "core/error.h"
#include "scheduler/generators_test_util.h"
#include "scheduler/simulator.h"

namespace baton {
namespace {

using generator_testing::Row;

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

TEST(GeneratorsTest, ZeroBubbleH2RunsExtraWarmupForwardsAndDefersWeightGradients) {
  const Schedule schedule = ZeroBubbleH2(2, 3);
  EXPECT_EQ(schedule.name, "zb-h2");
  EXPECT_EQ(Row(schedule, 0), "F0 F1 F2 I0 W0 I1 W1 I2 W2");
  EXPECT_EQ(Row(schedule, 1), "F0 I0 F1 I1 F2 I2 W0 W1 W2");
  EXPECT_EQ(MakeSchedule("zb-h2", 2, 3), schedule);
}

TEST(GeneratorsTest, ZeroBubbleH2ValidatesAndDryRunsForEveryShape) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 3 * p + 2; ++m) {
      SCOPED_TRACE(generator_testing::Shape(p, m));
      generator_testing::ExpectRunnable(ZeroBubbleH2(p, m));
    }
  }
}

// F = I = W = 1. With m >= 2p-1 stage s works without a gap from s to s + 3m: the only idle time
// is the p-1 steps of start-up (stage s waits s) and cool-down (it ends p-1-s before the last),
// which the paper removes by bypassing the optimizer-step synchronisation so that iterations
// overlap. Makespan max(3m + p-1, 2m + 2p-1); peak min(2p-1, m) on stage 0, no more elsewhere.
TEST(GeneratorsTest, ZeroBubbleH2StagesWorkWithoutAGapAndHoldAtMostTwoPMinusOne) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 3 * p + 2; ++m) {
      const SimulationResult result = Simulate(ZeroBubbleH2(p, m));
      const std::string shape = generator_testing::Shape(p, m);
      EXPECT_EQ(result.makespan, std::max(3 * m + p - 1, 2 * m + 2 * p - 1)) << shape;
      EXPECT_LE(result.bubble_fraction, Simulate(ZeroBubbleH1(p, m)).bubble_fraction) << shape;
      EXPECT_EQ(result.per_stage[0].peak_in_flight, std::min(2 * p - 1, m)) << shape;
      for (int s = 0; s < p; ++s) {
        EXPECT_LE(result.per_stage[s].peak_in_flight, std::min(2 * p - 1, m)) << shape;
        if (m < 2 * p - 1) continue;
        const auto& timeline = result.timeline[static_cast<size_t>(s)];
        EXPECT_EQ(timeline.front().start, s) << shape << " stage " << s;
        EXPECT_EQ(timeline.back().end, s + 3 * m) << shape << " stage " << s;
      }
    }
  }
  // p = 4, m = 8: makespan 27 as ZB-H1, but no stage has a gap inside its busy span.
  EXPECT_DOUBLE_EQ(Simulate(ZeroBubbleH2(4, 8)).bubble_fraction, 3.0 / 27);
}

TEST(GeneratorsTest, LoopedBfsRunsEveryChunksForwardsThenTheBackwardsInReverse) {
  const Schedule schedule = LoopedBFS(2, 2, 2);
  EXPECT_EQ(schedule.name, "looped-bfs");
  EXPECT_EQ(schedule.layout, ChunkLayout::kLoop);
  EXPECT_EQ(Row(schedule, 0), "F0 F1 2F0 2F1 2B0 2B1 B0 B1");
  EXPECT_EQ(Row(schedule, 1), "F0 F1 3F0 3F1 3B0 3B1 B0 B1");
  EXPECT_EQ(MakeSchedule("looped-bfs", 2, 2, 2), schedule);
  EXPECT_THROW(MakeSchedule("looped-bfs", 2, 2), Error);
  EXPECT_THROW(LoopedBFS(2, 2, 1), Error);
}

TEST(GeneratorsTest, LoopedBfsValidatesAndDryRunsForEveryShape) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 3 * p + 2; ++m) {
      for (int v = 2; v <= 3; ++v) {
        SCOPED_TRACE(generator_testing::Shape(p, m) + " v=" + std::to_string(v));
        generator_testing::ExpectRunnable(LoopedBFS(p, m, v));
      }
    }
  }
}

// GPipe's memory (every chunk of every micro-batch: m*v chunk-micro-batches) and, with F = 1,
// B = 2 per chunk action and m >= p, interleaving's bubble (p-1)/(vm + p-1).
TEST(GeneratorsTest, LoopedBfsHoldsWhatGPipeHoldsWithInterleavingsBubble) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 3 * p + 2; ++m) {
      for (int v = 2; v <= 3; ++v) {
        const SimulationResult result = Simulate(LoopedBFS(p, m, v));
        const std::string shape = generator_testing::Shape(p, m) + " v=" + std::to_string(v);
        EXPECT_EQ(result.makespan, 3 * (v * m + p - 1) + 3 * (v - 1) * std::max(0, p - m)) << shape;
        if (m >= p) {
          EXPECT_NEAR(result.bubble_fraction, (p - 1.0) / (v * m + p - 1), 1e-12) << shape;
        }
        for (const StageFigures& figures : result.per_stage) {
          EXPECT_EQ(figures.peak_in_flight, m * v) << shape;
        }
      }
    }
  }
}

TEST(GeneratorsTest, GeneratorsProduceComputeOnlySchedules) {
  for (const Schedule& schedule : {GPipe(3, 4), OneFOneB(3, 4), Interleaved1F1B(3, 4, 2),
                                   ZeroBubbleH1(3, 4), ZeroBubbleH2(3, 4), LoopedBFS(3, 4, 2),
                                   ZeroBubbleV(3, 4), VHalf(3, 4), VMin(3, 4), DualPipeV(3, 4)}) {
    EXPECT_FALSE(HasCommunication(schedule)) << schedule.name;
    EXPECT_EQ(schedule.per_stage.size(), 3u);
  }
}

// Interleaved zero bubble with one chunk is ZB-H1 (the same warm-up and W deferral) for
// m >= p - 1 (with fewer, ZB-H1 runs a held-back W after each cool-down I, torch's rule keeps them
// to the end); with more chunks it keeps ZB-H1's rule per rank: W's held back = the stage index.
TEST(GeneratorsTest, InterleavedZeroBubbleOfOneChunkIsZbH1) {
  for (int p = 1; p <= 6; ++p) {
    for (int m = std::max(1, p - 1); m <= 13; ++m) {
      EXPECT_EQ(InterleavedZeroBubble(p, m, 1).per_stage, ZeroBubbleH1(p, m).per_stage)
          << "p=" << p << " m=" << m;
    }
  }
  const Schedule two = InterleavedZeroBubble(4, 8, 2);
  for (int s = 0; s < 4; ++s) {
    const auto& actions = two.per_stage[static_cast<size_t>(s)];
    const auto first_weight = std::find_if(actions.begin(), actions.end(), [](const Action& a) {
      return a.kind == ActionKind::kBackwardWeight;
    });
    const auto inputs_before = std::count_if(actions.begin(), first_weight, [](const Action& a) {
      return a.kind == ActionKind::kBackwardInput;
    });
    EXPECT_EQ(inputs_before, s + 1) << "stage " << s;
  }
}

TEST(GeneratorsTest, MakeScheduleLooksUpEveryName) {
  for (const std::string& name : ScheduleNames()) {
    const int chunks = ChunksFor(name, FindScheduleKind(name)->chunks == ChunkRule::kMany ? 2 : 1);
    EXPECT_EQ(MakeSchedule(name, 2, 3, chunks).name, name);
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
