// What a finished run leaves in output.dir besides the report (metrics.jsonl is written while
// the run trains: launcher/step_metrics.h):
//   trace.json     a Chrome/Perfetto trace of the last traced steps, one track per stage with
//                  the F/B/I/W spans, the waits on peers and the optimizer step;
//   timeline.svg   the last traced step drawn like `baton schedule --format svg`, with each
//                  stage's measured bubble fraction beside the simulator's prediction.
// Both are built from the ranks' final results (plan/codec.h RankResult) and written
// atomically.
#pragma once

#include <string>
#include <vector>

#include "plan/codec.h"
#include "planner/planner.h"
#include "scheduler/simulator.h"

namespace baton {

std::string ChromeTrace(const Plan& plan, const std::vector<RankResult>& results);
// The simulator's figures for `plan` with per-virtual-stage costs from the cost model's FLOPs.
SimulationResult PredictTimeline(const Plan& plan);
std::string MeasuredTimelineSvg(const Plan& plan, const std::vector<RankResult>& results);

// Writes the two files into `dir` (created if needed).
void WriteRunOutputs(const std::string& dir, const Plan& plan,
                     const std::vector<RankResult>& results);

}  // namespace baton
