// Fit to a budget: search precision x checkpoint policy x micro-batches x stages for the
// fastest configuration whose predicted peak (memory_planner.h) fits a memory budget.
//
// The levers, cheapest first (docs/memory.md, "Fit to a budget"):
//   1. precision: bf16 storage when the config is fp32 (fp16 has bf16's footprint and also needs
//      loss scaling, so it is not searched separately);
//   2. activation checkpointing: selective, every:K for K = 1, 2, 4, ... up to a stage's layers;
//   3. more micro-batches (a divisor of the batch size above the configured count): smaller
//      micro-batches, fewer bytes in flight under 1F1B;
//   4. more stages (up to `max_stages`), each cut under the budget (PartitionWithinBudget).
// Every combination is a candidate; its level is the costliest lever it pulls. The search keeps
// the lowest level at which any candidate fits and, within it, picks the fastest predicted step
// (step_time.h: simulator with FLOP costs, recompute included), ties going to fewer changes. No
// candidate fitting is an error naming the smallest peak any of them reaches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launcher/plan.h"
#include "model/config.h"

namespace baton {

struct FitOptions {
  int64_t budget = 0;             // bytes per rank
  double flops_per_second = 1e9;  // scales predicted step times; the choice does not depend on it
  int max_stages = 0;             // 0: twice the configured stages, at most the graph's layers
};

struct FitCandidate {
  DType dtype = DType::kF32;
  CheckpointPolicy checkpoint;
  int micro_batches = 1;
  int stages = 1;
  int level = 0;       // 0 as configured, 1 precision, 2 checkpointing, 3 micro-batches, 4 stages
  bool valid = false;  // a plan could be made; else `note` says why not
  bool fits = false;
  int64_t peak = 0;         // largest predicted total over ranks (of the budgeted cut when it fits)
  double step_flops = 0;    // the simulated step's makespan in FLOPs: what candidates compare by
  double step_seconds = 0;  // step_flops at FitOptions::flops_per_second
  std::string note;         // the partition's bound, or why the candidate is invalid
};

struct FitResult {
  std::vector<FitCandidate> candidates;  // in search order
  int chosen = -1;                       // index into candidates
  Config config;                         // the chosen configuration
};

// Throws baton::Error when no candidate fits, naming the smallest peak reachable.
FitResult FitToBudget(const Config& config, const FitOptions& options);

// The plan `baton plan` and `baton run` use: `config` cut under `budget` (0: none) or, with
// `fit`, the configuration FitToBudget chooses at FLOP rate `flops_per_second` (the search is
// returned in `*search` when given). Throws baton::Error when the budget cannot be met.
Plan PlanForBudget(const Config& config, int64_t budget, bool fit, int max_stages,
                   double flops_per_second, FitResult* search);

// The rate predicted step times are quoted at: the host's measured sgemm rate on the config's
// threads (kernels/cpu/gemm_peak.h) for CPU stages, a nominal 100 TFLOP/s for GPU stages.
double FlopRateFor(const Config& config);

// The candidates as a table, the chosen one marked, then a line saying what was chosen and why.
std::string FormatFitTable(const FitResult& result, int64_t budget);

}  // namespace baton
