// What a finished run leaves in output.dir besides the report (metrics.jsonl is written while
// the run trains: launcher/step_metrics.h):
//   trace.json     a Chrome/Perfetto trace of the last traced steps, one track per stage with
//                  the F/B/I/W spans, the waits on peers and the optimizer step;
//   timeline.svg   the last traced step drawn like `baton schedule --format svg`, with each
//                  stage's measured bubble fraction beside the simulator's prediction;
//   timeline_simulated.svg  the simulator's step (PredictTimeline) drawn the same way, its
//                  FLOP costs scaled so that its makespan is the measured step's.
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
// The last traced step of `results` (one pipeline's ranks, in stage order; each drawn in the
// lane of its stage, Plan::layout().StageOf) in milliseconds from its start, as the simulator's
// result type; an empty timeline when a rank traced no step.
SimulationResult MeasuredTimeline(const Plan& plan, const std::vector<RankResult>& results);
// The measured step drawn, with each stage's bubble measured and predicted under it; "" when a
// rank traced no step.
std::string MeasuredTimelineSvg(const Plan& plan, const std::vector<RankResult>& results);
// PredictTimeline(plan) drawn with its times scaled so that the makespan is `makespan` (the
// measured step's, so the two pictures share a time axis; bubble fractions are unchanged).
std::string SimulatedTimelineSvg(const Plan& plan, double makespan);

// Writes the files into `dir` (created if needed): the timelines only when every rank traced a
// step.
void WriteRunOutputs(const std::string& dir, const Plan& plan,
                     const std::vector<RankResult>& results);

// After a failed attempt whose workers have stopped: the ranks' flight records
// (worker/flight_recorder.h) gathered into output.dir/flight_recorder.json, and each rank's last
// entry and the likely culprit logged as an error. Nothing when no rank left a record.
void CollectFlightRecords(const Plan& plan, int attempt);

}  // namespace baton
