// Simulator: times a valid schedule under per-action costs and reports the figures that compare
// schedules. Definitions (also in docs/schedules.md), for p stages:
//   makespan        time from 0 until the last compute action ends.
//   busy(r)         total cost of stage r's compute actions.
//   idle(r)         makespan - busy(r).
//   bubble fraction sum_r idle(r) / (p * makespan): the share of stage-time spent waiting.
//   peak in-flight  the largest number of (micro-batch, chunk) pairs stage r holds activations for
//   at
//                   once: a pair enters with the start of its F and leaves with the end of its B,
//                   or of its W when the backward is split (W needs the stashed input). Counted in
//                   the stage's action order, which equals the maximum over time because a stage
//                   runs one action at a time; so it does not depend on the costs.
// Timing follows the dry run (dry_run.h) with CommSemantics::kAsync: each action starts when its
// stage is free and its inputs have arrived; SEND/RECV take no stage time; messages take
// `communication` to arrive. Compute-only schedules are timed as if messages were sent at once.
#pragma once

#include <vector>

#include "scheduler/costs.h"
#include "scheduler/schedule.h"

namespace baton {

struct TimedAction {
  Action action;
  double start = 0;
  double end = 0;
};

struct StageFigures {
  int stage = 0;  // stage
  double busy = 0;
  double idle = 0;
  int peak_in_flight = 0;
};

struct SimulationResult {
  // timeline[r]: stage r's compute actions (F/B/I/W) in execution order, with their times.
  std::vector<std::vector<TimedAction>> timeline;
  double makespan = 0;
  double bubble_fraction = 0;
  std::vector<StageFigures> per_stage;  // one per stage
};

// Throws baton::Error (with the marked grid) when the schedule fails Validate(), or when
// `costs` names a virtual stage the schedule doesn't have.
SimulationResult Simulate(const Schedule& schedule, const Costs& costs = {});

// Peak in-flight (micro-batch, chunk) pairs of one stage's action list; see the file comment.
int PeakInFlight(const std::vector<Action>& actions);

}  // namespace baton
