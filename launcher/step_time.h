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

#include "launcher/plan.h"
#include "scheduler/costs.h"
#include "worker/stage_model.h"

namespace baton {

// Per-virtual-stage costs in FLOPs for `virtual_stages` (the plan's own when empty).
Costs FlopCosts(const Plan& plan, const std::vector<LayerRange>& virtual_stages = {});

// Predicted seconds per training step at `flops_per_second` (compute only: communication and
// the optimizer step are not charged).
double PredictStepSeconds(const Plan& plan, double flops_per_second);

}  // namespace baton
