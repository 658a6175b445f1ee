// Measured costs: what each layer kind of a config's model takes on this machine, timed with a
// few real repetitions on the CPU backend, and the step time they predict for a plan
// (docs/memory.md, "Tuning"). `baton tune` and `--fit` rank candidates by it.
//
// Profiled, per precision and micro-batch size (sequences), for every layer kind of the graph
// (embedding, block, MLP block, head; a kind's layers all cost the same): the forward (F), the
// full backward (B), the input backward (I) and the weight backward (W), each with everything
// stashed and under selective recompute (whose B and I include what they recompute). Per precision
// and optimizer state: a layer's share of the step end (zeroing its gradients, their sum of
// squares for the clip, one AdamW step). Per number of processes P the job may run: how much
// slower a block computes when P copies run at once (MeasuredCosts::slowdown). Once: the latency of
// a small message between two Gloo ranks over loopback and the rate of an activation-sized one.
// Every figure is the median of the repetitions after one warm-up.
//
// What the simulator (scheduler/simulator.h) is charged per virtual stage: F = the sum of its
// layers' F; B = their B plus, under every:K, their F again (the engine reruns each segment's
// forward before its backward); I likewise; W = their W; each times the slowdown of the plan's
// process count; COMM = latency + activation bytes / rate.
// The predicted step adds to the simulated makespan the slowest rank's step end and the step
// end's collectives (PredictMeasuredStep). Memory is not measured here: the memory planner
// (memory_planner.h) is exact already.
//
// Thread-safe: pure functions; MeasureCosts runs its layers on its own backend.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "plan/plan.h"
#include "scheduler/costs.h"
#include "scheduler/simulator.h"

namespace baton {

// Seconds one layer takes for one micro-batch.
struct LayerTimes {
  double forward = 0;          // F
  double backward = 0;         // B: input and weight gradients
  double backward_input = 0;   // I
  double backward_weight = 0;  // W
};

struct KindTimes {
  LayerTimes plain;      // everything stashed
  LayerTimes selective;  // selective recompute: less stashed, B and I recompute the rest
};

struct MeasuredCosts {
  // (precision, micro-batch size in sequences) -> layer kind -> times.
  std::map<std::pair<DType, int64_t>, std::map<LayerKind, KindTimes>> layers;
  // (precision, optimizer state) -> layer kind -> seconds of its step-end share.
  std::map<std::pair<DType, OptimizerState>, std::map<LayerKind, double>> update;
  // Parameters of one layer of each kind (update / params is the step end per parameter).
  std::map<LayerKind, int64_t> params;
  double message_latency_s = 0;    // one small message, one way
  double message_bytes_per_s = 0;  // transfer rate of an activation-sized message
  // The activation-sized message took no clearly longer than a small one (under 2x: the
  // difference is noise), so message_bytes_per_s is its bytes over its whole time: a lower bound
  // on the rate, not a measurement of it.
  bool message_rate_bounded = false;
  // Processes busy at once -> how much slower each computes than one alone (a block's F + B at
  // the config's micro-batch size run in that many threads at once); 1 for one process. A plan of
  // P processes has its compute and step end scaled by slowdown[P] (else the largest measured
  // below P; none: 1); where P exceeds `cores`, by at least slowdown[cores] x P / cores.
  std::map<int, double> slowdown;
  // How many processes can compute at once here: hardware threads / device.threads when
  // profiled (0: unknown, no oversubscription charged). More processes than that time-share.
  int cores = 0;
  // How steady the machine was while profiling: (max - min) / median of a block's F + B at the
  // config's micro-batch size over the rounds (0 when it was not profiled). Above about 0.25 the
  // machine's load changed while profiling and the figures deserve a second run.
  double spread = 0;
};

// The spread above which a profile is called unsteady (FormatMeasuredCosts, plan --fit).
inline constexpr double kUnsteadySpread = 0.25;

// What to profile: every combination of these (default: the config's own).
struct ProfileRequest {
  std::vector<DType> dtypes;
  std::vector<int64_t> micro_batch_sizes;  // sequences per micro-batch
  std::vector<OptimizerState> states;
  int repeats = 5;                     // timed repetitions after one warm-up; the median is kept
  std::vector<int> concurrency = {1};  // process counts whose slowdown is measured
};

// Times the config's layer kinds on the CPU backend with device.threads threads (GPU stages are
// profiled on the CPU too: a bound, not their speed; the caller should say so). Throws
// baton::Error on an empty request or a model that cannot be built.
MeasuredCosts MeasureCosts(const Config& config, const ProfileRequest& request);

// Per-layer cost the partitioner balances: F + B of each layer under the plan's precision,
// micro-batch size and checkpoint policy (recompute included), in seconds.
std::vector<double> MeasuredLayerCosts(const Plan& plan, const MeasuredCosts& measured);

// The simulator's costs for the plan's cut (seconds), as in the file comment.
Costs MeasuredScheduleCosts(const Plan& plan, const MeasuredCosts& measured);

struct StepPrediction {
  double seconds = 0;      // makespan + step end + collectives: the predicted step time
  double makespan = 0;     // the simulated schedule, seconds
  double step_end = 0;     // the slowest rank's step end (optimizer, clip), seconds
  double collectives = 0;  // the step end's all-reduces (flags, tied and replica gradients)
  double bubble = 0;       // the simulated bubble fraction
};

// Throws baton::Error when `measured` lacks the plan's precision, micro-batch size or state.
StepPrediction PredictMeasuredStep(const Plan& plan, const MeasuredCosts& measured);

// The profile as a short table (per kind and micro-batch size: F, B, I, W, selective B; the
// step end per parameter; the message figures), for `baton tune` to print.
std::string FormatMeasuredCosts(const MeasuredCosts& measured);

}  // namespace baton
