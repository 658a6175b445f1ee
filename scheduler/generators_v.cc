// V-layout generators (docs/schedules.md, "Chunk layouts"): stage s holds chunk 0 = virtual stage s
// and chunk 1 = virtual stage 2p-1-s, so a micro-batch runs down the stages and back up, and stage
// 0 computes both the first and the last virtual stage.
#include <algorithm>

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

}  // namespace baton
