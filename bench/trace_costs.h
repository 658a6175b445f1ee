// From a run's trace.json to the simulator's bubble, and where a step's time went: the pieces of
// pipeline_bench that compare a measured pipeline with the simulator fed the run's own costs
// (bench/README.md, "pipeline_bench", defines every figure).
//
//   ReadChromeTrace     trace.json (launcher/outputs.cc ChromeTrace) back into per-stage steps
//                       of TraceSpans (plan/result.h), parsing each span's name.
//   DeriveCosts         per virtual stage the mean duration of F, B, I, W over the measured
//                       steps, the median message latency, the post (the stage's time in no span
//                       per SEND or RECV), and per stage the step's other parts
//                       (step start, update, the step end's intrinsic exchange, the gap between
//                       steps).
//   SimulateStep        the simulator on the run's schedule with those costs (under the run's
//                       send semantics), extended by the step's other parts so that it covers the
//                       span the measured bubble covers.
//   MeasureBreakdown    per stage, the measured step split by kind (compute, update, waits by
//                       RECV_F/RECV_B/SEND, step start, exchange, time in no span);
//                       SimulateStep gives the same split for the simulated step.
//   StepCosts,          each measured step replayed in the simulator with every action's own
//   ReplayedBubble      measured duration instead of its kind's mean, and their pooled bubble.
//
// Pure functions of their arguments; they throw baton::Error on a malformed trace or a trace
// that does not fit the schedule. Times are milliseconds.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plan/result.h"
#include "scheduler/costs.h"
#include "scheduler/dry_run.h"
#include "scheduler/schedule.h"
#include "scheduler/simulator.h"

namespace baton::bench {

// trace[stage] = that stage's traced steps in step order (replica 0's ranks: tid < num_stages).
using PipelineTrace = std::vector<std::vector<StepTrace>>;

// Parses ChromeTrace's "X" events: name (TraceSpan::Name under the schedule's chunk layout), tid
// (the rank), ts and dur (microseconds from the trace's origin), args.step.
PipelineTrace ReadChromeTrace(const nlohmann::json& trace, int num_stages, ChunkLayout layout);

// What a stage's step is made of, in milliseconds per step (means over the measured steps).
struct StepParts {
  double compute = 0;        // F/B/I/W spans
  double update = 0;         // the step end but its exchanges (clip, AdamW)
  double recv_forward = 0;   // waits for a RECV_F (an activation)
  double recv_backward = 0;  // waits for a RECV_B (a gradient)
  double send = 0;           // waits for a SEND to complete
  double step_start = 0;     // zeroing gradients, filling the micro-batches (data)
  double exchange = 0;       // the step end's exchanges (tied sums, norm), waiting included
  double uncovered = 0;      // inside the step but in no span: the engine between actions
  double step = 0;           // the whole step: first span's start to the last one's end
  double busy() const { return compute + update; }
};

// Per stage: its measured parts (measured steps only: step >= first_step).
std::vector<StepParts> MeasureBreakdown(const PipelineTrace& trace, int64_t first_step);

// Pooled bubble of per-stage parts: 1 - sum busy / sum step.
double BubbleOf(const std::vector<StepParts>& parts);

struct DerivedCosts {
  Costs costs;  // per virtual stage; communication: the median latency; post: its stage's time
                // in no span over its SEND and RECV actions
  int latency_samples = 0;         // messages whose receiver was already waiting
  std::vector<double> step_start;  // per stage, mean
  std::vector<double> update;      // per stage, mean
  std::vector<double> between;     // per stage, mean gap from a step's end to the next's start
  double exchange = 0;             // mean over steps of the least exchange time of any stage
};

// Over the steps >= first_step of `trace`, whose actions are those of `schedule` (with
// communication). Latency sample: a RECV wait that began before its producer's compute span
// ended gives (wait end - producer end).
DerivedCosts DeriveCosts(const PipelineTrace& trace, const Schedule& schedule, int64_t first_step);

struct SimulatedStep {
  double makespan = 0;           // the dry run's last action end, under `semantics`
  double period = 0;             // step start of stage 0 + update + between + makespan + exchange
  std::vector<StepParts> parts;  // per stage, the simulated step split like the measured one
  double bubble = 0;             // BubbleOf(parts)
  double async_bubble = 0;       // the same step with Simulate() (sends never block)
};

// The step under the communication semantics the run used: kRendezvous when its plan completes
// sends before each compute (Plan::sends_complete_before_compute; a SEND then holds its stage
// until the receive is posted), else kAsync. Times come from DryRun(), the engine of Simulate();
// async_bubble from Simulate() itself.
SimulatedStep SimulateStep(const Schedule& schedule, const DerivedCosts& costs,
                           CommSemantics semantics = CommSemantics::kAsync);

// Each measured step that every stage traced, as `derived` with that step's own compute
// durations action by action (Costs::per_action), step order: the run's own actions replayed
// with their own times, so a slow action delays its peers in the simulator as it did in the run.
std::vector<DerivedCosts> StepCosts(const PipelineTrace& trace, const Schedule& schedule,
                                    int64_t first_step, const DerivedCosts& derived);

// The replayed steps' bubble: SimulateStep of each, their parts pooled (BubbleOf).
double ReplayedBubble(const Schedule& schedule, const std::vector<DerivedCosts>& steps,
                      CommSemantics semantics = CommSemantics::kAsync);

}  // namespace baton::bench
