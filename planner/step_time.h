// Step-time prediction: the schedule simulator (scheduler/simulator.h) charged with per-stage
// costs from the cost model's FLOPs, recompute included (docs/memory.md, "Step time").
//
// A virtual stage's F costs the forward FLOPs of its layers; B costs the backward FLOPs (2x
// forward) plus what the checkpoint policy recomputes: every:K reruns the whole chunk's forward,
// selective reruns RecomputeFlops (attention scores and c_fc). The zero-bubble split charges I
// the input half of backward plus the recompute, W the weight half. Times are FLOPs divided by
// a rate, so candidates compare fairly whatever the rate.
#pragma once

#include <vector>

#include "model/graph.h"
#include "plan/plan.h"
#include "scheduler/costs.h"

namespace baton {

// Per-virtual-stage costs in FLOPs for `virtual_stages` (the plan's own when empty).
Costs FlopCosts(const Plan& plan, const std::vector<LayerRange>& virtual_stages = {});

// FLOP rates by the precision a stage computes in: what a FLOP costs on the machine the job runs
// on. On CPUs 16-bit storage is staged through f32 (kernels/cpu/f32_staging.h), so bf16 is slower
// than fp32 there; on GPUs it is much faster. Candidates in different precisions compare only
// through these rates.
struct StepRates {
  double f32 = 1e9;   // FLOP/s with f32 parameters and activations
  double half = 1e9;  // FLOP/s with bf16 or fp16 parameters and activations
  StepRates() = default;
  StepRates(double all) : f32(all), half(all) {}  // NOLINT(runtime/explicit): one rate for all
  StepRates(double f32_rate, double half_rate) : f32(f32_rate), half(half_rate) {}
  double For(DType dtype) const { return dtype == DType::kF32 ? f32 : half; }
};

// Predicted seconds per training step at `rates` (compute only: communication and the optimizer
// step are not charged).
double PredictStepSeconds(const Plan& plan, const StepRates& rates);

}  // namespace baton
