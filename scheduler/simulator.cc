#include "scheduler/simulator.h"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <utility>

#include "core/error.h"
#include "scheduler/dry_run.h"
#include "scheduler/validator.h"

namespace baton {

int PeakInFlight(const std::vector<Action>& actions) {
  // A pair leaves with its B, or with its W when a W for it is still to come.
  std::set<std::pair<int, int>> split;  // (micro-batch, chunk) whose backward is split
  for (const Action& action : actions) {
    if (action.kind == ActionKind::kBackwardWeight) split.emplace(action.microbatch, action.chunk);
  }
  int in_flight = 0;
  int peak = 0;
  for (const Action& action : actions) {
    const bool is_split = split.contains({action.microbatch, action.chunk});
    if (action.kind == ActionKind::kForward) {
      peak = std::max(peak, ++in_flight);
    } else if ((action.kind == ActionKind::kBackward && !is_split) ||
               action.kind == ActionKind::kBackwardWeight) {
      --in_flight;
    }
  }
  return peak;
}

SimulationResult Simulate(const Schedule& schedule, const Costs& costs) {
  CheckValid(schedule);
  for (const auto& [stage, ignored] : costs.per_virtual_stage) {
    if (stage < 0 || stage >= schedule.num_virtual_stages()) {
      throw Error("costs name virtual stage " + std::to_string(stage) + ", but schedule '" +
                  schedule.name + "' has " + std::to_string(schedule.num_virtual_stages()));
    }
  }
  const DryRunResult run = DryRun(schedule, CommSemantics::kAsync, costs);
  if (!run.ok) throw Error("dry run failed after validation: " + run.reason);

  SimulationResult result;
  const int p = schedule.stages;
  result.timeline.resize(p);
  for (int rank = 0; rank < p; ++rank) {
    const auto& actions = schedule.per_stage[rank];
    for (size_t step = 0; step < actions.size(); ++step) {
      if (!IsCompute(actions[step].kind)) continue;
      result.timeline[rank].push_back({actions[step], run.start[rank][step], run.end[rank][step]});
      result.makespan = std::max(result.makespan, run.end[rank][step]);
    }
  }
  double total_idle = 0;
  for (int rank = 0; rank < p; ++rank) {
    StageFigures figures{rank, 0, 0, PeakInFlight(schedule.per_stage[rank])};
    for (const TimedAction& timed : result.timeline[rank]) figures.busy += timed.end - timed.start;
    figures.idle = result.makespan - figures.busy;
    total_idle += figures.idle;
    result.per_stage.push_back(figures);
  }
  result.bubble_fraction = result.makespan > 0 ? total_idle / (p * result.makespan) : 0;
  return result;
}

}  // namespace baton
