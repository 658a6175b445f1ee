// V-layout generators (docs/schedules.md, "Chunk layouts"): stage s holds chunk 0 = virtual stage s
// and chunk 1 = virtual stage 2p-1-s, so a micro-batch runs down the stages and back up, and stage
// 0 computes both the first and the last virtual stage.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "scheduler/generators.h"
#include "scheduler/generators_internal.h"

namespace baton {

using generators_internal::EmptySchedule;
using generators_internal::StageProgram;

Schedule ZeroBubbleV(int stages, int microbatches) {
  Schedule schedule = EmptySchedule("zb-v", stages, microbatches, 2, ChunkLayout::kV);
  const int p = stages;
  // The pattern needs 2p-1 micro-batches to reach its steady state; fewer are scheduled as 2p-1
  // with the padding deleted.
  const int padded = std::max(microbatches, 2 * p - 1);
  constexpr ActionKind F = ActionKind::kForward;
  constexpr ActionKind I = ActionKind::kBackwardInput;
  constexpr ActionKind W = ActionKind::kBackwardWeight;
  for (int s = 0; s < p; ++s) {
    StageProgram program{&schedule.per_stage[static_cast<size_t>(s)], s, microbatches};
    int forward0 = 0, forward1 = 0;  // next F of chunk 0 / chunk 1
    int input0 = 0, input1 = 0;      // next I
    int weight0 = 0, weight1 = 0;    // next W
    // Warm-up 1: chunk-0 forwards until the first micro-batch can come back up to this stage
    // (2(p-s)-1 of them: down to stage p-1 and back, one F per stage and chunk).
    for (int i = 0; i < 2 * (p - s) - 1; ++i) program.Add(F, forward0++, 0);
    // Warm-up 2: chunk-1 forwards start arriving; alternate them with chunk-0 forwards.
    for (int i = 0; i < s; ++i) {
      program.Add(F, forward1++, 1);
      program.Add(F, forward0++, 0);
    }
    // Warm-up 3: the first gradients arrive on chunk 1; its W runs at once (memory stays at 2p).
    for (int i = 0; i < p - s; ++i) {
      program.Add(F, forward1++, 1);
      program.Add(I, input1++, 1);
      program.Add(W, weight1++, 1);
    }
    // Steady state: F I W on chunk 0, then F I W on chunk 1; 2p chunk-micro-batches in flight.
    while (forward1 < forward0 || forward0 < padded) {
      if (forward0 < padded) program.Add(F, forward0++, 0);
      program.Add(I, input0++, 0);
      program.Add(W, weight0++, 0);
      program.Add(F, forward1++, 1);
      program.Add(I, input1++, 1);
      program.Add(W, weight1++, 1);
    }
    // Cool-down: the remaining I's, most W's deferred to fill the wait for the next gradient.
    for (int i = 0; i < s; ++i) {
      program.Add(I, input0++, 0);
      program.Add(I, input1++, 1);
    }
    for (int i = 0; i < p - s; ++i) {
      program.Add(I, input0++, 0);
      program.Add(W, weight0++, 0);
    }
    while (weight1 < input1) program.Add(W, weight1++, 1);
    while (weight0 < input0) program.Add(W, weight0++, 0);
  }
  return schedule;
}

namespace {

// One stage's DualPipeV program: forwards and backwards of each chunk in micro-batch order, and the
// queue of W's whose I ran with the backward split (DeepSeek's WeightGradStore).
class DualPipeProgram {
 public:
  DualPipeProgram(std::vector<Action>* actions, int stage, int microbatches)
      : program_{actions, stage, microbatches} {}

  void Forward(int chunk) { program_.Add(ActionKind::kForward, next_forward_[chunk]++, chunk); }
  // The backward of the next micro-batch of `chunk`: a full B, or with `split` an I whose W waits
  // in the queue for a Weight().
  void Backward(int chunk, bool split = false) {
    const int microbatch = next_backward_[chunk]++;
    if (!split) {
      program_.Add(ActionKind::kBackward, microbatch, chunk);
      return;
    }
    program_.Add(ActionKind::kBackwardInput, microbatch, chunk);
    deferred_.push_back({microbatch, chunk});
  }
  // The oldest deferred W.
  void Weight() {
    const auto [microbatch, chunk] = deferred_.front();
    deferred_.erase(deferred_.begin());
    program_.Add(ActionKind::kBackwardWeight, microbatch, chunk);
  }
  // F of one chunk paired with B of the other: DeepSeek overlaps the two; Baton runs them in turn.
  void ForwardBackward(int forward_chunk, int backward_chunk) {
    Forward(forward_chunk);
    Backward(backward_chunk);
  }
  bool Done(int microbatches) const {
    return deferred_.empty() && next_forward_[0] == microbatches &&
           next_forward_[1] == microbatches && next_backward_[0] == microbatches &&
           next_backward_[1] == microbatches;
  }

 private:
  generators_internal::StageProgram program_;
  int next_forward_[2] = {0, 0};
  int next_backward_[2] = {0, 0};
  std::vector<std::pair<int, int>> deferred_;  // (micro-batch, chunk) of I's without their W
};

}  // namespace

Schedule DualPipeV(int stages, int microbatches) {
  Schedule schedule = EmptySchedule("dualpipev", stages, microbatches, 2, ChunkLayout::kV);
  const int p = stages;
  // DeepSeek's construction needs m >= 2p; fewer are scheduled as 2p with the padding deleted.
  const int padded = std::max(microbatches, 2 * p);
  for (int s = 0; s < p; ++s) {
    DualPipeProgram stage(&schedule.per_stage[static_cast<size_t>(s)], s, microbatches);
    // 1. Chunk-0 forwards until chunk 1's first input can come back: 2(p-s-1).
    for (int i = 0; i < 2 * (p - s - 1); ++i) stage.Forward(0);
    // 2. Pairs of forwards, one per chunk.
    for (int i = 0; i < s + 1; ++i) {
      stage.Forward(0);
      stage.Forward(1);
    }
    // 3. Chunk 1's first backwards, split, each W at once; then a chunk-1 forward.
    for (int i = 0; i < p - s - 1; ++i) {
      stage.Backward(1, /*split=*/true);
      stage.Weight();
      stage.Forward(1);
    }
    // 4. Steady state: F(0) with B(1), then F(1) with B(0).
    for (int i = 0; i < padded - 2 * p + s + 1; ++i) {
      stage.ForwardBackward(0, 1);
      stage.ForwardBackward(1, 0);
    }
    // 5. Chunk 0 has no forwards left: B(1), then F(1) with B(0).
    for (int i = 0; i < p - s - 1; ++i) {
      stage.Backward(1);
      stage.ForwardBackward(1, 0);
    }
    // 6. Backwards only, B(1) then B(0); from the middle on split, their W's deferred to fill the
    // wait for the next gradient (the chunk that switches first alternates with the stage).
    bool split = false;
    for (int i = 0; i < s + 1; ++i) {
      if (i == (s + 1) / 2 && s % 2 == 1) split = true;
      stage.Backward(1, split);
      if (i == (s + 1) / 2 && s % 2 == 0) split = true;
      stage.Backward(0, split);
    }
    // 7. Deferred W's interleaved with chunk 0's last backwards, split.
    for (int i = 0; i < p - s - 1; ++i) {
      stage.Weight();
      stage.Backward(0, /*split=*/true);
    }
    // 8. The W's still deferred.
    for (int i = 0; i < s + 1; ++i) stage.Weight();
    if (!stage.Done(padded)) throw Error("dualpipev: internal error: stage program incomplete");
  }
  return schedule;
}

namespace {

// The V building block (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"): the 6p
// actions of one micro-batch (F, I, W on 2p virtual stages), each at a time offset, such that on
// every stage the six offsets differ modulo 6, the work one micro-batch brings a stage (unit
// costs). Micro-batch k repeats the block 6k later, so the repetition never collides and the steady
// state has no bubble; a stage runs its actions in time order, and the simulator (or the runtime)
// then starts each as early as its inputs allow, which squeezes the warm-up and cool-down.
//
// Offsets are chosen greedily along the micro-batch's path: each F one unit after the previous
// virtual stage's F (`chunk1_forward_gap` units on the way back up), each I one unit after the next
// virtual stage's I, each W one unit after its I; an action whose residue is taken on its stage
// moves later until it finds a free one. A stage's peak memory is set by the lifespans F..W of its
// two chunks divided by 6, so the gaps trade memory against bubble: gap 1 is V-Min, gap 2 on chunk
// 1 is V-Half (docs/schedules.md).
constexpr int kBlockPeriod = 6;

struct TimedBlockAction {
  int time;
  ActionKind kind;
  int chunk;
};

std::vector<std::vector<TimedBlockAction>> VBuildingBlock(int stages, int chunk1_forward_gap) {
  const int p = stages;
  std::vector<std::vector<TimedBlockAction>> block(static_cast<size_t>(p));
  std::vector<std::vector<bool>> taken(static_cast<size_t>(p),
                                       std::vector<bool>(kBlockPeriod, false));
  auto place = [&](ActionKind kind, int virtual_stage, int earliest) {
    const int stage = StageOfVirtualStage(virtual_stage, p, ChunkLayout::kV);
    auto& residues = taken[static_cast<size_t>(stage)];
    int time = earliest;
    while (residues[static_cast<size_t>(time % kBlockPeriod)]) ++time;
    residues[static_cast<size_t>(time % kBlockPeriod)] = true;
    block[static_cast<size_t>(stage)].push_back({time, kind, virtual_stage / p});
    return time;
  };
  // Forward down the stages (chunk 0) and back up (chunk 1).
  int time = place(ActionKind::kForward, 0, 0);
  for (int j = 1; j < 2 * p; ++j) {
    time = place(ActionKind::kForward, j, time + (j > p ? chunk1_forward_gap : 1));
  }
  // Input gradients back along the same path.
  std::vector<int> input_time(static_cast<size_t>(2 * p));
  for (int j = 2 * p - 1; j >= 0; --j) {
    time = place(ActionKind::kBackwardInput, j, time + 1);
    input_time[static_cast<size_t>(j)] = time;
  }
  // Each W as soon after its I as a free residue allows (it frees the stash).
  for (int j = 2 * p - 1; j >= 0; --j) {
    place(ActionKind::kBackwardWeight, j, input_time[static_cast<size_t>(j)] + 1);
  }
  return block;
}

// The block repeated every kBlockPeriod for each micro-batch, each stage's actions in time order.
Schedule RepeatVBlock(std::string name, int stages, int microbatches, int chunk1_forward_gap) {
  Schedule schedule = EmptySchedule(std::move(name), stages, microbatches, 2, ChunkLayout::kV);
  const auto block = VBuildingBlock(stages, chunk1_forward_gap);
  for (int s = 0; s < stages; ++s) {
    std::vector<std::pair<int, Action>> timed;  // offsets are distinct per stage modulo the period
    for (const TimedBlockAction& each : block[static_cast<size_t>(s)]) {
      for (int mb = 0; mb < microbatches; ++mb) {
        timed.emplace_back(each.time + kBlockPeriod * mb, Action{s, each.kind, mb, each.chunk});
      }
    }
    std::sort(timed.begin(), timed.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    auto& actions = schedule.per_stage[static_cast<size_t>(s)];
    for (const auto& [time, action] : timed) actions.push_back(action);
  }
  return schedule;
}

}  // namespace

Schedule VHalf(int stages, int microbatches) {
  return RepeatVBlock("v-half", stages, microbatches, /*chunk1_forward_gap=*/2);
}

Schedule VMin(int stages, int microbatches) {
  return RepeatVBlock("v-min", stages, microbatches, /*chunk1_forward_gap=*/1);
}

}  // namespace baton
