// Fit to a budget: search precision x checkpoint policy x micro-batches x stages for the
// fastest configuration whose predicted peak (memory_planner.h) fits a memory budget.
//
// The levers, cheapest first (docs/memory.md, "Fitting a budget"):
//   1. precision: bf16 storage when the config is fp32 (fp16 has bf16's footprint and also needs
//      loss scaling, so it is not searched separately);
//   2. activation checkpointing: selective, every:K for K = 1, 2, 4, ... up to a stage's layers;
//   3. more micro-batches (a divisor of the batch size above the configured count): smaller
//      micro-batches, fewer bytes in flight under 1F1B;
//   4. 8-bit optimizer state (optimizer.state int8, when it is f32): AdamW's moments quantized,
//      a quarter of their bytes, at no device's cost;
//   5. more stages (up to `max_stages`), each cut under the budget (PartitionWithinBudget);
//   6. tensor ranks (parallel.tensor T = 2, 4, ...: each rank holds 1/T of every layer's
//      matrices), only when `max_processes` allows stages x T processes and T divides the heads,
//      key/value heads and hidden units: they come after more stages, so in practice when a
//      layer alone does not fit a rank (docs/parallel.md, "--fit"); the fewest that fit win
//      (the step-time models do not cost their sums), then the fastest;
//   7. data-parallel replicas with ZeRO-1 (parallel.zero 1: each replica keeps 1/R of the
//      optimizer state and runs 1/R of the micro-batches), only when `max_processes` allows
//      stages x T x replicas processes; replicas must divide the micro-batches;
//   8. the same replicas with ZeRO-2 (parallel.zero 2: a layer's gradients outside the replica's
//      shard are held from its first backward of a step to its last only; docs/parallel.md);
//   9. the same replicas with ZeRO-3 (parallel.zero 3: a layer's parameters outside the shard
//      are held only while the layer runs, gathered for each use).
// A mixture of experts also splits each MoE layer's experts over the replicas, configured or
// added (parallel.experts E > 1 dividing the replicas, T E dividing the experts, no ZeRO: each
// replica holds 1/E of its tensor rank's experts and their optimizer state), on the replicas'
// level 7 beside ZeRO-1:
// over the configured replicas it adds no process.
// Every combination is a candidate; its level is the costliest lever it pulls. The configuration
// as it is wins when it fits. Otherwise precision and checkpointing compete on predicted step
// time on this machine (with FitOptions::measured, measured_costs.h: each layer kind profiled
// here in each precision, through the simulator; else step_time.h: the simulator with FLOP
// costs, recompute included, at the machine's rate for each precision), so that bf16 is not chosen
// where it is slower than an fp32 checkpointed candidate that fits (CPUs); more micro-batches come
// next, then 8-bit optimizer state, then more stages, then tensor ranks, then replicas, each only
// when nothing cheaper fits, again the fastest within the level. Ties go to fewer changes. No
// candidate fitting is an error naming the smallest peak any of them reaches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "plan/plan.h"
#include "planner/candidates.h"
#include "planner/measured_costs.h"
#include "planner/step_time.h"

namespace baton {

struct FitOptions {
  int64_t budget = 0;  // bytes per rank
  StepRates rates;     // FLOP/s per precision on the machine that runs the job (MeasureStepRates)
  int max_stages = 0;  // 0: twice the configured stages, at most the graph's layers
  int max_processes = 0;  // > 0: tensor ranks and replicas may be added while stages x T x R <=
  // When given (FitProfileRequest's profile), candidates compare by the step time these measured
  // costs predict (PredictMeasuredStep) instead of FLOPs at `rates`.
  const MeasuredCosts* measured = nullptr;
};

// A candidate: the levers it pulls (planner/candidates.h), and how it came out.
struct FitCandidate : Levers {
  int level = 0;       // 0 as configured, 1 precision, 2 checkpointing, 3 micro-batches, 4 8-bit
                       // optimizer state, 5 stages, 6 tensor ranks, 7 replicas (ZeRO-1, or
                       // experts split over them), 8 ZeRO-2, 9 ZeRO-3
  bool valid = false;  // a plan could be made; else `note` says why not
  bool fits = false;
  int64_t peak = 0;         // largest predicted total over ranks (of the budgeted cut when it fits)
  double step_seconds = 0;  // the predicted step (measured costs, else FLOPs at FitOptions::rates)
  std::string note;         // the partition's bound, or why the candidate is invalid
  int64_t replica_bytes = 0;  // ReplicaBytesPerStep of its plan
};

// What one replica of a plan's busiest stage sends its other replicas in a step, from the
// stage's parameter count N (over T tensor ranks) and R replicas (docs/parallel.md, "Bytes per
// step"): ZeRO-0's all-reduce 2 (R-1)/R N x 4 bytes; ZeRO-1/2 a reduce-scatter of the f32
// gradients and an all-gather of the values, (R-1)/R N (4 + b), b bytes per value; ZeRO-3 with
// zero3_keep step the same, with microbatch (R-1)/R N (4 + u b), u = each replica's
// micro-batches x (forward, backward, a checkpointed recompute, a split W). With expert
// parallelism (E > 1, no ZeRO) the split experts' X elements (whole) leave the all-reduce, and
// with R > E the expert-data-parallel all-gather of every source's gradients sends
// (R/E - 1) X x 4 more. 0 without replicas.
int64_t ReplicaBytesPerStep(const Plan& plan);

struct FitResult {
  std::vector<FitCandidate> candidates;  // in search order
  int chosen = -1;                       // index into candidates
  Config config;                         // the chosen configuration
  std::string set_flags;  // the `--set` flags that turn the given config into it ("" if none)
};

// Throws baton::Error when no candidate fits, naming the smallest peak reachable.
FitResult FitToBudget(const Config& config, const FitOptions& options);

// The plan `baton plan` and `baton run` use: `config` cut under `budget` (0: none) or, with
// `fit`, the configuration FitToBudget chooses at FLOP rates `rates` (the search is
// returned in `*search` when given). Throws baton::Error when the budget cannot be met.
Plan PlanForBudget(const Config& config, int64_t budget, bool fit, int max_stages,
                   const StepRates& rates, FitResult* search, int max_processes = 0,
                   const MeasuredCosts* measured = nullptr);

// What --fit profiles (measured_costs.h): the config's precision and bf16 when it is fp32, the
// micro-batch sizes of every micro-batch count it searches, the configured optimizer state and
// int8 when it is f32.
ProfileRequest FitProfileRequest(const Config& config);

// The rates predicted step times are quoted at: for CPU stages the CPU backend's own Matmul timed
// here in f32 and in bf16 on the config's threads (a 512 x 512 x 512 product, alternately, best of
// 7); for GPU
// stages nominal figures (60 TFLOP/s exact f32, 800 TFLOP/s bf16: an H100/H200's order).
StepRates MeasureStepRates(const Config& config);

// The candidates as a table, the chosen one marked, then a line saying what was chosen and why.
std::string FormatFitTable(const FitResult& result, int64_t budget);

}  // namespace baton
