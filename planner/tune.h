// The tuner's search (`baton tune`, docs/memory.md "Tuning"): schedule x stages x tensor ranks x
// replicas x micro-batches x checkpoint policy x cut (the levers and their values:
// planner/candidates.h, as --fit's), ranked by the step time the measured costs predict
// (measured_costs.h), under a memory budget checked by the exact memory planner.
//
// For each combination: the plan (planner.h) is cut to balance the measured per-layer costs
// (F + B, recompute included), then the cut is improved by moving one boundary at a time by one
// layer while the simulated step gets shorter (the simulator decides, not the balance). Memory
// is then checked on that cut (PartitionWithinBudget, which with one chunk per stage moves
// layers off the stages over budget). The memory check is the costly part (a meta run per rank),
// so candidates are checked in order of their unbudgeted predicted time, and the search stops
// checking once `top` candidates fit and every unchecked one is predicted slower than the
// top-th: a budgeted cut is never faster than the cut the simulator chose without the budget.
//
// Thread-safe: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "model/graph.h"
#include "planner/candidates.h"
#include "planner/measured_costs.h"

namespace baton {

// A schedule the tuner searches: a name MakeSchedule knows (scheduler/generators.h) and its model
// chunks per stage.
struct TunableSchedule {
  std::string name;
  int chunks = 1;
};

// The schedules searched: every kind of scheduler/schedule_kinds.h's table, one-chunk kinds first.
const std::vector<TunableSchedule>& TunableSchedules();

struct TuneOptions {
  int64_t budget = 0;  // bytes per rank; 0: none
  int max_stages = 0;  // 0: max_processes, at most the graph's layers
  // stages x tensor ranks x replicas <= this; 0: this machine's cores / device.threads, or
  // max_stages if more
  int max_processes = 0;
  std::vector<TunableSchedule> schedules;  // empty: TunableSchedules()
  int top = 15;                            // candidates the ranking must get exactly right
};

// A candidate: its schedule, the levers it pulls (planner/candidates.h; the tuner keeps the
// config's precision and optimizer state), and how it came out.
struct TuneCandidate : Levers {
  Config config;  // the candidate as a config, parallel.cut set to `cut`
  std::string schedule;
  int chunks = 1;
  std::vector<LayerRange> cut;
  StepPrediction prediction;    // on `cut`
  bool memory_checked = false;  // peaks and fits are known
  bool fits = false;
  std::vector<int64_t> peaks;  // predicted total per stage (replica 0's tensor rank 0)
  std::string note;            // what bound the cut
};

struct TuneResult {
  // Memory-checked candidates: those that fit, fastest first, then those that do not.
  std::vector<TuneCandidate> ranked;
  int searched = 0;       // combinations that made a plan and were timed
  int invalid = 0;        // combinations that could not be planned (e.g. more stages than layers)
  int checked = 0;        // of the searched, how many had their memory predicted
  std::string set_flags;  // `--set` flags turning the given config into the best
};

// --max-processes' default: this machine's cores / device.threads, at least 1.
int DefaultMaxProcesses(const Config& config);

// The micro-batch sizes (sequences) the search needs profiled: batch_size / m for every m
// searched (each divisor of train.batch_size).
std::vector<int64_t> TuneMicroBatchSizes(const Config& config);

// Throws baton::Error when no candidate fits the budget, naming the smallest peak any reaches and
// the candidate reaching it, or when the options are out of range.
TuneResult Tune(const Config& config, const MeasuredCosts& measured, const TuneOptions& options);

// The ranked table: rank, schedule, stages, replicas, micro-batches, checkpoint, predicted step
// (ms), simulated bubble (%), each stage's predicted peak (MiB), fits; the best `top` rows, then
// how many were searched.
std::string FormatTuneTable(const TuneResult& result, int64_t budget, int top = 15);

}  // namespace baton
