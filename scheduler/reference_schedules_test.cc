// An independent check of the generators (generators.h): reference generators written from the
// published rules, and hand-derived tables for small cases, compared with Baton's generators
// action by action; then each schedule's makespan, bubble and peak in-flight count, timed by the
// simulator with the unit costs of docs/schedules.md, against the papers' formulas.
//
// Where each rule comes from (none of it is read from scheduler/generators*.cc):
//   1F1B         PipeDream-Flush (Narayanan et al. 2021, "Memory-Efficient Pipeline-Parallel DNN
//                Training") as Megatron-LM's forward_backward_pipelining_without_interleaving:
//                warm-up p-s-1 forwards, steady one F one B, cool-down the remaining B's.
//   interleaved  Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
//                Clusters Using Megatron-LM", Sec. 2.2.2, as Megatron-LM's
//                forward_backward_pipelining_with_interleaving (warm-up length,
//                get_model_chunk_id); the padding of m to a multiple of p from docs/schedules.md.
//   ZB-H1        Qi et al. 2023, "Zero Bubble Pipeline Parallelism", handcrafted schedule ZB-H1
//                (its Fig. 3), with the W placement docs/schedules.md states.
//   ZB-V         Qi et al. 2023, same paper, the V-shape schedule ZB-V, with the phases of
//                docs/schedules.md; the loop bounds and the order of the last W's as
//                torch.distributed.pipelining's ScheduleZBVZeroBubble writes them.
//   DualPipeV    DeepSeek-V3 Technical Report, Sec. 3.2.1 (DualPipe), folded into a V as in
//                DeepSeek's DualPipe repository (dualpipev.py): its eight steps, as
//                docs/schedules.md lists them; W's deferred in a FIFO (its WeightGradStore).
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "scheduler/generators.h"
#include "scheduler/schedule.h"
#include "scheduler/simulator.h"
#include "scheduler/validator.h"

namespace baton {
namespace {

// ---------------------------------------------------------------------------------------------
// Helpers

std::string Shape(int p, int m, int v = 1) {
  return "p=" + std::to_string(p) + " m=" + std::to_string(m) + " v=" + std::to_string(v);
}

Schedule EmptySchedule(int p, int m, int v, ChunkLayout layout) {
  Schedule schedule;
  schedule.name = "reference";
  schedule.stages = p;
  schedule.microbatches = m;
  schedule.chunks = v;
  schedule.layout = layout;
  schedule.per_stage.resize(static_cast<size_t>(p));
  return schedule;
}

// Deletes every action of micro-batches >= m: how Baton (interleaved, ZB-V, DualPipeV) runs an m
// the construction can't take, by scheduling a larger one and dropping the padding.
void DropPadding(Schedule& schedule, int m) {
  for (auto& program : schedule.per_stage) {
    std::erase_if(program, [m](const Action& action) { return action.microbatch >= m; });
  }
  schedule.microbatches = m;
}

// Stage `stage`'s program in the CSV cell form, e.g. "F0,F1,3F0,3I0".
std::string Row(const Schedule& schedule, int stage) {
  std::string text;
  for (const Action& action : schedule.per_stage[static_cast<size_t>(stage)]) {
    text += (text.empty() ? "" : ",") + ToString(action, schedule.stages, schedule.layout);
  }
  return text;
}

void ExpectSamePrograms(const Schedule& expected, const Schedule& actual) {
  ASSERT_EQ(actual.stages, expected.stages);
  EXPECT_EQ(actual.microbatches, expected.microbatches);
  EXPECT_EQ(actual.chunks, expected.chunks);
  EXPECT_EQ(actual.layout, expected.layout);
  for (int stage = 0; stage < expected.stages; ++stage) {
    EXPECT_EQ(Row(actual, stage), Row(expected, stage)) << "stage " << stage;
  }
}

// A V-layout schedule from hand-written rows in the CSV cell form.
Schedule FromRows(int p, int m, const std::vector<std::string>& rows) {
  std::string csv = "# baton schedule: name=table stages=" + std::to_string(p) +
                    " microbatches=" + std::to_string(m) + " chunks=2 layout=v\n";
  for (const std::string& row : rows) csv += row + "\n";
  return ScheduleFromCsv(csv);
}

std::vector<int> Peaks(const SimulationResult& result) {
  std::vector<int> peaks;
  for (const StageFigures& figures : result.per_stage) peaks.push_back(figures.peak_in_flight);
  return peaks;
}

// ---------------------------------------------------------------------------------------------
// Reference generators

Action Make(int stage, ActionKind kind, int microbatch, int chunk = 0) {
  return Action{stage, kind, microbatch, chunk};
}

// 1F1B: stage s runs min(p-s-1, m) warm-up forwards, then one forward and one backward (oldest
// first), then the backwards left.
Schedule ReferenceOneFOneB(int p, int m) {
  Schedule schedule = EmptySchedule(p, m, 1, ChunkLayout::kLoop);
  for (int s = 0; s < p; ++s) {
    auto& program = schedule.per_stage[static_cast<size_t>(s)];
    const int warmup = std::min(p - s - 1, m);
    for (int k = 0; k < warmup; ++k) program.push_back(Make(s, ActionKind::kForward, k));
    for (int k = 0; k < m - warmup; ++k) {
      program.push_back(Make(s, ActionKind::kForward, warmup + k));
      program.push_back(Make(s, ActionKind::kBackward, k));
    }
    for (int k = m - warmup; k < m; ++k) program.push_back(Make(s, ActionKind::kBackward, k));
  }
  return schedule;
}

// Megatron's interleaved 1F1B. The k-th forward of a stage is in group k / p of p micro-batches
// and runs chunk (k / p) % v on micro-batch (k / (p*v)) * p + k % p; the k-th backward the same
// micro-batch on chunk v-1 - (k / p) % v. Stage r warms up with 2(p-r-1) + (v-1)p forwards,
// capped at m*v. Choice: older Megatron releases also make *every* forward warm-up when m == p;
// the doc's rule has no such case, so neither has this reference (nor, the test shows, Baton).
Schedule ReferenceInterleaved(int p, int m, int v) {
  const int padded = (m + p - 1) / p * p;  // docs/schedules.md: m rounded up to a multiple of p
  const int total = padded * v;
  Schedule schedule = EmptySchedule(p, padded, v, ChunkLayout::kLoop);
  for (int r = 0; r < p; ++r) {
    auto& program = schedule.per_stage[static_cast<size_t>(r)];
    const auto microbatch = [&](int k) { return k / (p * v) * p + k % p; };
    const auto forward = [&](int k) {
      program.push_back(Make(r, ActionKind::kForward, microbatch(k), k / p % v));
    };
    const auto backward = [&](int k) {
      program.push_back(Make(r, ActionKind::kBackward, microbatch(k), v - 1 - k / p % v));
    };
    const int warmup = std::min(2 * (p - r - 1) + (v - 1) * p, total);
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int k = 0; k < total - warmup; ++k) {
      forward(warmup + k);
      backward(k);
    }
    for (int k = total - warmup; k < total; ++k) backward(k);
  }
  DropPadding(schedule, m);
  return schedule;
}

// ZB-H1: 1F1B's order on F and I (warm-up min(p-s-1, m) forwards, then F, I), with W's deferred
// on stage s: the W of micro-batch i-s follows the I of micro-batch i in the steady phase, each
// I of the cool-down is followed by the oldest deferred W, and the W's left come last.
// Choice: the doc leaves open which W follows a cool-down I when fewer than s W's are held back
// (only when m < p-1); this reference takes the oldest micro-batch whose I has run, which may be
// the one just finished. The paper's figure (m >= p) has no such case; the generator agrees.
Schedule ReferenceZeroBubbleH1(int p, int m) {
  Schedule schedule = EmptySchedule(p, m, 1, ChunkLayout::kLoop);
  for (int s = 0; s < p; ++s) {
    auto& program = schedule.per_stage[static_cast<size_t>(s)];
    int next_weight = 0;
    const int warmup = std::min(p - s - 1, m);
    for (int k = 0; k < warmup; ++k) program.push_back(Make(s, ActionKind::kForward, k));
    for (int i = 0; i < m - warmup; ++i) {
      program.push_back(Make(s, ActionKind::kForward, warmup + i));
      program.push_back(Make(s, ActionKind::kBackwardInput, i));
      if (i - s >= 0) program.push_back(Make(s, ActionKind::kBackwardWeight, next_weight++));
    }
    for (int i = m - warmup; i < m; ++i) {
      program.push_back(Make(s, ActionKind::kBackwardInput, i));
      program.push_back(Make(s, ActionKind::kBackwardWeight, next_weight++));
    }
    while (next_weight < m) program.push_back(Make(s, ActionKind::kBackwardWeight, next_weight++));
  }
  return schedule;
}

// One stage's program for the V schedules, which name actions by (kind, chunk): a chunk runs its
// forwards, its backwards (B or I) and its W's each in micro-batch order, so an action's
// micro-batch is its chunk's next one of that kind, as torch's and DeepSeek's code count them.
class VStageProgram {
 public:
  explicit VStageProgram(int stage) : stage_(stage) {}

  void Forward(int chunk) { Add(ActionKind::kForward, chunk, forwards_[chunk]++); }
  void Backward(int chunk) { Add(ActionKind::kBackward, chunk, backwards_[chunk]++); }
  // I, its W deferred: OldestDeferredWeight() takes the W's first in, first out.
  void BackwardInput(int chunk) {
    deferred_.emplace_back(chunk, backwards_[chunk]);
    Add(ActionKind::kBackwardInput, chunk, backwards_[chunk]++);
  }
  // ZB-V's W: the chunk's next W in micro-batch order.
  void Weight(int chunk) { Add(ActionKind::kBackwardWeight, chunk, weights_[chunk]++); }
  // DualPipeV's W: the oldest deferred one.
  void OldestDeferredWeight() {
    const auto [chunk, microbatch] = deferred_.front();
    deferred_.pop_front();
    Add(ActionKind::kBackwardWeight, chunk, microbatch);
  }
  bool HasDeferredWeight() const { return !deferred_.empty(); }
  int forwards(int chunk) const { return forwards_[chunk]; }
  int weights(int chunk) const { return weights_[chunk]; }
  std::vector<Action> Take() { return std::move(actions_); }

 private:
  void Add(ActionKind kind, int chunk, int microbatch) {
    actions_.push_back(Make(stage_, kind, microbatch, chunk));
  }

  int stage_;
  int forwards_[2] = {0, 0};
  int backwards_[2] = {0, 0};
  int weights_[2] = {0, 0};
  std::deque<std::pair<int, int>> deferred_;  // (chunk, micro-batch) of I's whose W waits
  std::vector<Action> actions_;
};

// ZB-V, scheduled for max(m, 2p-1) micro-batches, the padding dropped.
Schedule ReferenceZeroBubbleV(int p, int m) {
  const int padded = std::max(m, 2 * p - 1);
  Schedule schedule = EmptySchedule(p, padded, 2, ChunkLayout::kV);
  for (int s = 0; s < p; ++s) {
    VStageProgram stage(s);
    // Warm-up: 2(p-s)-1 chunk-0 F's; s pairs (chunk-1 F, chunk-0 F); p-s times chunk-1 F I W.
    for (int k = 0; k < 2 * (p - s) - 1; ++k) stage.Forward(0);
    for (int k = 0; k < s; ++k) {
      stage.Forward(1);
      stage.Forward(0);
    }
    for (int k = 0; k < p - s; ++k) {
      stage.Forward(1);
      stage.BackwardInput(1);
      stage.Weight(1);
    }
    // Steady: F I W on chunk 0, then F I W on chunk 1, until chunk 1 has run every forward.
    // Chunk 0 is p-s-1 forwards ahead, so its F is left out of the last p-s-1 rounds.
    while (stage.forwards(1) < padded) {
      if (stage.forwards(0) < padded) stage.Forward(0);
      stage.BackwardInput(0);
      stage.Weight(0);
      stage.Forward(1);
      stage.BackwardInput(1);
      stage.Weight(1);
    }
    // Cool-down: s pairs of I's (chunk 0, chunk 1); p-s times chunk-0 I and W; the W's left.
    for (int k = 0; k < s; ++k) {
      stage.BackwardInput(0);
      stage.BackwardInput(1);
    }
    for (int k = 0; k < p - s; ++k) {
      stage.BackwardInput(0);
      stage.Weight(0);
    }
    // Choice: the doc says only "the remaining W's"; chunk 1's go first, as in torch.
    while (stage.weights(1) < padded) stage.Weight(1);
    while (stage.weights(0) < padded) stage.Weight(0);
    schedule.per_stage[static_cast<size_t>(s)] = stage.Take();
  }
  DropPadding(schedule, m);
  return schedule;
}

// DualPipeV in DeepSeek's eight steps, scheduled for max(m, 2p) micro-batches, the padding
// dropped. Choice: DeepSeek overlaps each "F(x)+B(y)" pair; Baton runs the pair in turn, and this
// reference puts the F first (the order the doc writes it in).
Schedule ReferenceDualPipeV(int p, int m) {
  const int padded = std::max(m, 2 * p);
  Schedule schedule = EmptySchedule(p, padded, 2, ChunkLayout::kV);
  for (int s = 0; s < p; ++s) {
    VStageProgram stage(s);
    const int below = p - s - 1;  // stages after s
    // 1: 2(p-s-1) chunk-0 F's.
    for (int k = 0; k < 2 * below; ++k) stage.Forward(0);
    // 2: s+1 pairs F(0) F(1).
    for (int k = 0; k < s + 1; ++k) {
      stage.Forward(0);
      stage.Forward(1);
    }
    // 3: p-s-1 times I(1), W (of that I), F(1).
    for (int k = 0; k < below; ++k) {
      stage.BackwardInput(1);
      stage.OldestDeferredWeight();
      stage.Forward(1);
    }
    // 4: steady, m - 2p + s + 1 times F(0)+B(1), F(1)+B(0).
    for (int k = 0; k < padded - 2 * p + s + 1; ++k) {
      stage.Forward(0);
      stage.Backward(1);
      stage.Forward(1);
      stage.Backward(0);
    }
    // 5: p-s-1 times B(1), F(1)+B(0).
    for (int k = 0; k < below; ++k) {
      stage.Backward(1);
      stage.Forward(1);
      stage.Backward(0);
    }
    // 6: s+1 times B(1) B(0); the second half of these 2(s+1) backwards is split (DeepSeek turns
    // zero bubble on at iteration (s+1)/2, before B(1) on odd stages and before B(0) on even ones:
    // either way backwards number s+1 .. 2s+1).
    for (int i = 0; i < s + 1; ++i) {
      for (const int chunk : {1, 0}) {
        const int number = 2 * i + (chunk == 1 ? 0 : 1);
        if (number >= s + 1) {
          stage.BackwardInput(chunk);
        } else {
          stage.Backward(chunk);
        }
      }
    }
    // 7: p-s-1 times W, I(0).
    for (int k = 0; k < below; ++k) {
      stage.OldestDeferredWeight();
      stage.BackwardInput(0);
    }
    // 8: the s+1 deferred W's.
    while (stage.HasDeferredWeight()) stage.OldestDeferredWeight();
    schedule.per_stage[static_cast<size_t>(s)] = stage.Take();
  }
  DropPadding(schedule, m);
  return schedule;
}

// ---------------------------------------------------------------------------------------------
// Hand-derived tables: each row worked out on paper from the phase lists of docs/schedules.md
// (ZB-V) and DeepSeek's eight steps (DualPipeV). Chunk 1 of stage s is virtual stage 2p-1-s,
// written before the kind ("3F0" on stage 0 of p = 2).

// clang-format off
const std::vector<std::string> kZeroBubbleVP2M4 = {
    "F0,F1,F2,3F0,3I0,3W0,3F1,3I1,3W1,F3,I0,W0,3F2,3I2,3W2,I1,W1,3F3,3I3,3W3,I2,W2,I3,W3",
    "F0,2F0,F1,2F1,2I0,2W0,F2,I0,W0,2F2,2I1,2W1,F3,I1,W1,2F3,2I2,2W2,I2,2I3,I3,W2,2W3,W3",
};
const std::vector<std::string> kZeroBubbleVP3M6 = {
    "F0,F1,F2,F3,F4,5F0,5I0,5W0,5F1,5I1,5W1,5F2,5I2,5W2,F5,I0,W0,5F3,5I3,5W3,I1,W1,"
    "5F4,5I4,5W4,I2,W2,5F5,5I5,5W5,I3,W3,I4,W4,I5,W5",
    "F0,F1,F2,4F0,F3,4F1,4I0,4W0,4F2,4I1,4W1,F4,I0,W0,4F3,4I2,4W2,F5,I1,W1,4F4,4I3,4W3,"
    "I2,W2,4F5,4I4,4W4,I3,4I5,I4,W3,I5,W4,4W5,W5",
    "F0,3F0,F1,3F1,F2,3F2,3I0,3W0,F3,I0,W0,3F3,3I1,3W1,F4,I1,W1,3F4,3I2,3W2,F5,I2,W2,"
    "3F5,3I3,3W3,I3,3I4,I4,3I5,I5,W3,3W4,3W5,W4,W5",
};
const std::vector<std::string> kDualPipeVP2M4 = {
    "F0,F1,F2,3F0,3I0,3W0,3F1,F3,3B1,3F2,B0,3B2,3F3,B1,3B3,I2,W2,I3,W3",
    "F0,2F0,F1,2F1,F2,2B0,2F2,B0,F3,2B1,2F3,B1,2B2,B2,2I3,I3,2W3,W3",
};
const std::vector<std::string> kDualPipeVP3M6 = {
    "F0,F1,F2,F3,F4,5F0,5I0,5W0,5F1,5I1,5W1,5F2,F5,5B2,5F3,B0,5B3,5F4,B1,5B4,5F5,B2,5B5,"
    "I3,W3,I4,W4,I5,W5",
    "F0,F1,F2,4F0,F3,4F1,4I0,4W0,4F2,F4,4B1,4F3,B0,F5,4B2,4F4,B1,4B3,4F5,B2,4B4,B3,4I5,I4,"
    "4W5,I5,W4,W5",
    "F0,3F0,F1,3F1,F2,3F2,F3,3B0,3F3,B0,F4,3B1,3F4,B1,F5,3B2,3F5,B2,3B3,B3,3B4,I4,3I5,I5,"
    "W4,3W5,W5",
};
// clang-format on

// ---------------------------------------------------------------------------------------------
// Tests. Costs are the simulator's defaults, F = 1, B = 2, I = W = 1 per (chunk) action: the
// docs' unit costs for every schedule here (B = I + W).

TEST(ReferenceSchedulesTest, OneFOneBMatchesPipeDreamFlushAndItsBubbleAndPeak) {
  for (const auto& [p, m] : std::vector<std::pair<int, int>>{
           {1, 1}, {2, 1}, {2, 4}, {4, 4}, {4, 8}, {3, 7}, {8, 3}, {5, 16}}) {
    SCOPED_TRACE(Shape(p, m));
    const Schedule generated = OneFOneB(p, m);
    ExpectSamePrograms(ReferenceOneFOneB(p, m), generated);
    const SimulationResult result = Simulate(generated);
    // Bubble (p-1)/(m+p-1): makespan 3(m+p-1), each stage busy 3m.
    EXPECT_EQ(result.makespan, 3.0 * (m + p - 1));
    EXPECT_DOUBLE_EQ(result.bubble_fraction, (p - 1.0) / (m + p - 1));
    for (int s = 0; s < p; ++s) {
      EXPECT_EQ(result.per_stage[static_cast<size_t>(s)].peak_in_flight, std::min(p - s, m))
          << "stage " << s;
    }
  }
}

TEST(ReferenceSchedulesTest, InterleavedMatchesMegatronAndItsBubbleAndPeak) {
  struct Case {
    int p, m, v;
  };
  // m a multiple of p: Megatron's own schedule, with its bubble (p-1)/(vm+p-1) and a peak of the
  // warm-up forwards plus the first steady one, capped at m*v.
  const std::vector<Case> multiples_of_p = {{1, 3, 2}, {2, 2, 2}, {2, 4, 2}, {4, 4, 2},
                                            {4, 8, 2}, {4, 8, 3}, {3, 9, 2}, {2, 6, 4}};
  for (const auto& [p, m, v] : multiples_of_p) {
    SCOPED_TRACE(Shape(p, m, v));
    const Schedule generated = Interleaved1F1B(p, m, v);
    ExpectSamePrograms(ReferenceInterleaved(p, m, v), generated);
    const SimulationResult result = Simulate(generated);
    EXPECT_EQ(result.makespan, 3.0 * (v * m + p - 1));
    EXPECT_DOUBLE_EQ(result.bubble_fraction, (p - 1.0) / (v * m + p - 1));
    for (int r = 0; r < p; ++r) {
      const int warmup = 2 * (p - r - 1) + (v - 1) * p;
      EXPECT_EQ(result.per_stage[static_cast<size_t>(r)].peak_in_flight,
                std::min(warmup + 1, m * v))
          << "stage " << r;
    }
  }
  // Any other m: Megatron's schedule for m rounded up to a multiple of p, the padding dropped;
  // valid, and no faster than the formula for m (the padding's slots stay idle).
  const std::vector<Case> others = {{2, 1, 2}, {4, 3, 2}, {4, 5, 2}, {4, 6, 2},
                                    {3, 4, 3}, {8, 3, 2}, {4, 10, 3}};
  for (const auto& [p, m, v] : others) {
    SCOPED_TRACE(Shape(p, m, v));
    const Schedule generated = Interleaved1F1B(p, m, v);
    ExpectSamePrograms(ReferenceInterleaved(p, m, v), generated);
    const ValidationResult valid = Validate(generated);
    EXPECT_TRUE(valid) << valid.message;
    EXPECT_GE(Simulate(generated).makespan, 3.0 * (v * m + p - 1));
  }
}

TEST(ReferenceSchedulesTest, ZeroBubbleH1MatchesThePapersRulesAndItsBubbleAndPeak) {
  for (const auto& [p, m] : std::vector<std::pair<int, int>>{
           {1, 1}, {2, 1}, {2, 4}, {4, 4}, {4, 8}, {3, 7}, {8, 3}, {4, 2}, {5, 2}, {6, 12}}) {
    SCOPED_TRACE(Shape(p, m));
    // (8, 3) and (5, 2) have m < p-1, where ReferenceZeroBubbleH1 had to choose.
    const Schedule generated = ZeroBubbleH1(p, m);
    ExpectSamePrograms(ReferenceZeroBubbleH1(p, m), generated);
    const SimulationResult result = Simulate(generated);
    // F = I = W = 1: makespan 3m+p-1, bubble (p-1)/(3m+p-1), for m >= p; 2(p+m)-1 below.
    if (m >= p) {
      EXPECT_EQ(result.makespan, 3.0 * m + p - 1);
      EXPECT_DOUBLE_EQ(result.bubble_fraction, (p - 1.0) / (3 * m + p - 1));
    } else {
      EXPECT_EQ(result.makespan, 2.0 * (p + m) - 1);
    }
    // Peak: stage 0 holds 1F1B's min(p, m), no stage more; with m >= p every stage holds p.
    const std::vector<int> peaks = Peaks(result);
    EXPECT_EQ(peaks[0], std::min(p, m));
    for (int s = 0; s < p; ++s) {
      EXPECT_LE(peaks[static_cast<size_t>(s)], std::min(p, m)) << "stage " << s;
      if (m >= p) {
        EXPECT_EQ(peaks[static_cast<size_t>(s)], p) << "stage " << s;
      }
    }
  }
}

// Each hand-derived V table (p, m, rows) equals both what `generator` and what `reference` build.
using VGenerator = Schedule (*)(int, int);
void ExpectTables(const std::vector<std::tuple<int, int, std::vector<std::string>>>& tables,
                  VGenerator generator, VGenerator reference) {
  for (const auto& [p, m, rows] : tables) {
    SCOPED_TRACE("table " + Shape(p, m, 2));
    const Schedule table = FromRows(p, m, rows);
    ExpectSamePrograms(table, generator(p, m));
    ExpectSamePrograms(table, reference(p, m));
  }
}

TEST(ReferenceSchedulesTest, ZeroBubbleVMatchesThePapersRulesAndItsBubbleAndPeak) {
  // The hand-derived tables pin both the generator and the reference.
  ExpectTables({{2, 4, kZeroBubbleVP2M4}, {3, 6, kZeroBubbleVP3M6}}, ZeroBubbleV,
               ReferenceZeroBubbleV);
  for (int p = 1; p <= 6; ++p) {
    for (int m = 1; m <= 4 * p; ++m) {
      SCOPED_TRACE(Shape(p, m, 2));
      const Schedule generated = ZeroBubbleV(p, m);
      ExpectSamePrograms(ReferenceZeroBubbleV(p, m), generated);
      const SimulationResult result = Simulate(generated);
      // F = I = W = 1 per chunk action: makespan max(6m+p-1, 4m+4p-2); for m >= 2p-1 only the
      // p-1 start-up steps idle, bubble (p-1)/(6m+p-1).
      EXPECT_EQ(result.makespan, std::max(6.0 * m + p - 1, 4.0 * m + 4 * p - 2));
      if (m >= 2 * p - 1) {
        EXPECT_DOUBLE_EQ(result.bubble_fraction, (p - 1.0) / (6 * m + p - 1));
      }
      // Peak: 1F1B's p whole-stage micro-batches, 2p chunk-micro-batches (2 min(p, m)), reached
      // on every stage once m >= 2p-1.
      const std::vector<int> peaks = Peaks(result);
      for (int s = 0; s < p; ++s) {
        EXPECT_LE(peaks[static_cast<size_t>(s)], 2 * std::min(p, m)) << "stage " << s;
        if (m >= 2 * p - 1) {
          EXPECT_EQ(peaks[static_cast<size_t>(s)], 2 * p) << "stage " << s;
        }
      }
    }
  }
}

TEST(ReferenceSchedulesTest, DualPipeVMatchesDeepSeeksEightStepsAndItsBubbleAndPeak) {
  ExpectTables({{2, 4, kDualPipeVP2M4}, {3, 6, kDualPipeVP3M6}}, DualPipeV, ReferenceDualPipeV);
  for (int p = 1; p <= 6; ++p) {
    for (int m = 1; m <= 4 * p; ++m) {
      SCOPED_TRACE(Shape(p, m, 2));
      const Schedule generated = DualPipeV(p, m);
      ExpectSamePrograms(ReferenceDualPipeV(p, m), generated);
      const SimulationResult result = Simulate(generated);
      // F = 1, B = 2, I = W = 1 per chunk action, m >= 2p: makespan 6m+p-1; peak 2p+1
      // chunk-micro-batches on every stage (DeepSeek's PP+1 with PP = 2p), at most that below.
      const std::vector<int> peaks = Peaks(result);
      if (m >= 2 * p) {
        EXPECT_EQ(result.makespan, 6.0 * m + p - 1);
        EXPECT_DOUBLE_EQ(result.bubble_fraction, (p - 1.0) / (6 * m + p - 1));
      }
      for (int s = 0; s < p; ++s) {
        EXPECT_LE(peaks[static_cast<size_t>(s)], 2 * p + 1) << "stage " << s;
        if (m >= 2 * p) {
          EXPECT_EQ(peaks[static_cast<size_t>(s)], 2 * p + 1) << "stage " << s;
        }
      }
    }
  }
}

}  // namespace
}  // namespace baton
