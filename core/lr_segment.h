// One segment of a learning-rate schedule that was extended (`baton run --resume ... --steps-more
// N`, docs/checkpoints.md): from step `from` the schedule decays afresh, from the rate it had
// reached at `from`, so that it ends at `to`. A plain value shared by the launcher (which resolves
// the segments once per run), the job plan, the checkpoint (state.json) and the optimizer.
#pragma once

#include <cstdint>

namespace baton {

// The most steps a run may train (train.steps, the end of a --steps-more extension): a billion,
// about 12 days at a millisecond a step. A bound, so that a step count from a file or the command
// line that is no run's (2^63 - 1) is an error rather than a run that never ends.
inline constexpr int64_t kMaxTrainSteps = 1'000'000'000;

struct LrSegment {
  int64_t from = 0;  // the segment covers steps from + 1 .. the next segment's `from`
  int64_t to = 0;    // the step at which this segment's schedule reaches train.min_lr
  bool operator==(const LrSegment&) const = default;
};

}  // namespace baton
