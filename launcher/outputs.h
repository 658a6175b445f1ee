// What a finished run leaves in output.dir besides the report (metrics.jsonl is written while
// the run trains: launcher/step_metrics.h):
//   trace.json     a Chrome/Perfetto trace of the last traced steps, one track per stage with
//                  the F/B/I/W spans, the waits on peers and the optimizer step;
//   timeline.svg   the last traced step drawn like `baton schedule --format svg`, with each
//                  stage's measured bubble fraction beside the simulator's prediction.
// Both are built from the ranks' final results (worker_main.cc) and written atomically.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "planner/plan.h"
#include "scheduler/simulator.h"

namespace baton {

std::string ChromeTrace(const std::vector<nlohmann::json>& results);
// The simulator's figures for `plan` with per-virtual-stage costs from the cost model's FLOPs.
SimulationResult PredictTimeline(const Plan& plan);
std::string MeasuredTimelineSvg(const Plan& plan, const std::vector<nlohmann::json>& results);

// Writes the two files into `dir` (created if needed).
void WriteRunOutputs(const std::string& dir, const Plan& plan,
                     const std::vector<nlohmann::json>& results);

}  // namespace baton
