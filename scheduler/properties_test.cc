// Properties every generated schedule must have, over p in 1..8, m in 1..32 and v in 1..4
// (interleaved, 2..4 looped-bfs and interleaved-zb; 2 for the V schedules), including m < p and m
// not a multiple of p.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "scheduler/communication.h"
#include "scheduler/generators.h"
#include "scheduler/simulator.h"
#include "scheduler/validator.h"

namespace baton {
namespace {

// Calls `check` on every generated compute-only schedule of the sweep.
void ForEachGeneratedSchedule(const std::function<void(const Schedule&)>& check) {
  for (const std::string& name : ScheduleNames()) {
    const bool looped = FindScheduleKind(name)->chunks == ChunkRule::kMany;
    const int min_chunks = name == "interleaved" ? 1 : ChunksFor(name, looped ? 2 : 1);
    const int max_chunks = looped ? 4 : min_chunks;
    for (int p = 1; p <= 8; ++p) {
      for (int m = 1; m <= 32; ++m) {
        for (int v = min_chunks; v <= max_chunks; ++v) {
          SCOPED_TRACE(name + " p=" + std::to_string(p) + " m=" + std::to_string(m) +
                       " v=" + std::to_string(v));
          check(MakeSchedule(name, p, m, v));
        }
      }
    }
  }
}

TEST(PropertiesTest, EveryGeneratedScheduleValidatesAndDryRunsWithBufferedSends) {
  ForEachGeneratedSchedule([](const Schedule& compute) {
    const ValidationResult compute_only = Validate(compute);
    ASSERT_TRUE(compute_only) << compute_only.message;
    const ValidationResult full = Validate(InsertCommunication(compute), CommSemantics::kAsync);
    ASSERT_TRUE(full) << full.message;
  });
}

TEST(PropertiesTest, EveryRendezvousSafeScheduleDryRunsWithBlockingAndWithBufferedSends) {
  ForEachGeneratedSchedule([](const Schedule& compute) {
    const Schedule full = InsertCommunication(compute, CommPlacement::kRendezvousSafe);
    const ValidationResult strict = Validate(full, CommSemantics::kRendezvous);
    ASSERT_TRUE(strict) << strict.message;
    const ValidationResult buffered = Validate(full, CommSemantics::kAsync);
    ASSERT_TRUE(buffered) << buffered.message;
  });
}

// The planner's lowering (PostReceivesEarly) keeps every rank's actions and its compute order,
// survives blocking sends, and does not change the simulated timeline: a RECV takes no rank time
// and never blocks, so posting it earlier only lets a blocking send complete sooner.
TEST(PropertiesTest, ReceivesPostedEarlyKeepTheProgramValidAndItsTimeline) {
  ForEachGeneratedSchedule([](const Schedule& compute) {
    const Schedule placed = InsertCommunication(compute, CommPlacement::kRendezvousSafe);
    const Schedule lowered = PostReceivesEarly(placed);
    const ValidationResult strict = Validate(lowered, CommSemantics::kRendezvous);
    ASSERT_TRUE(strict) << strict.message;
    const SimulationResult before = Simulate(placed);
    const SimulationResult after = Simulate(lowered);
    ASSERT_EQ(after.makespan, before.makespan);
    for (int rank = 0; rank < compute.stages; ++rank) {
      const auto& actions = lowered.per_stage[static_cast<size_t>(rank)];
      ASSERT_EQ(actions.size(), placed.per_stage[static_cast<size_t>(rank)].size());
      const auto& a = after.timeline[static_cast<size_t>(rank)];
      const auto& b = before.timeline[static_cast<size_t>(rank)];
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i].action, b[i].action);
        ASSERT_EQ(a[i].start, b[i].start);
      }
    }
  });
}

TEST(PropertiesTest, ForwardOnlySchedulesValidateAndDryRunWithBlockingAndBufferedSends) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 16; ++m) {
      for (int v = 1; v <= 3; ++v) {
        SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m) +
                     " v=" + std::to_string(v));
        const Schedule compute = ForwardOnly(p, m, v);
        ASSERT_TRUE(Validate(compute));
        const Schedule full = InsertCommunication(compute, CommPlacement::kRendezvousSafe);
        const ValidationResult strict = Validate(full, CommSemantics::kRendezvous);
        ASSERT_TRUE(strict) << strict.message;
        const ValidationResult buffered =
            Validate(InsertCommunication(compute), CommSemantics::kAsync);
        ASSERT_TRUE(buffered) << buffered.message;
      }
    }
  }
}

TEST(PropertiesTest, EveryRankDoesAllItsWorkAndStaysWithinItsPeak) {
  ForEachGeneratedSchedule([](const Schedule& compute) {
    const SimulationResult result = Simulate(InsertCommunication(compute));
    bool split = false;  // backward split into I and W somewhere
    for (const auto& actions : compute.per_stage) {
      for (const Action& action : actions) split |= action.kind == ActionKind::kBackwardWeight;
    }
    const int p = compute.stages;
    const int m = compute.microbatches;
    const int v = compute.chunks;
    const int one_f_one_b_peak = std::min(p, m);
    for (const StageFigures& figures : result.per_stage) {
      EXPECT_EQ(figures.busy, 3.0 * m * v);  // F=1 + B=2, or F + I + W = 3, per (mb, chunk)
      EXPECT_GE(figures.idle, 0);
      EXPECT_GE(figures.peak_in_flight, 1);
      EXPECT_LE(figures.peak_in_flight, m * v);
      if (compute.name == "1f1b" || compute.name == "zb-h1" || compute.name == "zb-v") {
        // 1F1B's peak in whole-stage micro-batches; a chunk holds 1/v of a stage.
        EXPECT_LE(figures.peak_in_flight, one_f_one_b_peak * v);
      }
    }
    EXPECT_GE(result.bubble_fraction, 0);
    EXPECT_LT(result.bubble_fraction, 1);
    // No schedule beats the critical path of one micro-batch through every virtual stage (F and
    // B = 2, or F and I with the backward split).
    EXPECT_GE(result.makespan, (split ? 2.0 : 3.0) * p * v);
  });
}

}  // namespace
}  // namespace baton
