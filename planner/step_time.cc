// Step-time prediction from FLOPs (see step_time.h).
#include "planner/step_time.h"

#include "core/error.h"
#include "model/cost.h"
#include "scheduler/simulator.h"

namespace baton {

Costs FlopCosts(const Plan& plan, const std::vector<LayerRange>& virtual_stages) {
  const std::vector<LayerRange>& ranges =
      virtual_stages.empty() ? plan.virtual_stages : virtual_stages;
  const MicroBatchShape shape = plan.micro_batch_shape();
  const CheckpointPolicy& policy = plan.config.parallel.checkpoint;
  Costs costs;
  for (size_t j = 0; j < ranges.size(); ++j) {
    double forward = 0;
    double recompute = 0;
    for (int i = ranges[j].first; i <= ranges[j].last; ++i) {
      const LayerSpec& spec = plan.graph[static_cast<size_t>(i)];
      // One pass over the output on top of the GEMMs, so no layer (the embedding) is free.
      // With T tensor ranks each does a T-th of the layer (their sums are not costed here).
      const double layer_forward = (static_cast<double>(ForwardFlops(spec, plan.dims, shape)) +
                                    static_cast<double>(shape.batch_size * shape.seq_len) *
                                        static_cast<double>(plan.dims.width)) /
                                   plan.num_tensor();
      forward += layer_forward;
      if (policy.kind == CheckpointPolicy::Kind::kEvery) recompute += layer_forward;
      recompute += static_cast<double>(RecomputeFlops(spec, plan.dims, shape)) / plan.num_tensor();
    }
    ActionCosts c;
    c.forward = forward;
    c.backward = 2 * forward + recompute;
    c.backward_input = forward + recompute;
    c.backward_weight = forward;
    c.communication = 0;
    costs.per_virtual_stage[static_cast<int>(j)] = c;
  }
  return costs;
}

double PredictStepSeconds(const Plan& plan, const StepRates& rates) {
  const double rate = rates.For(plan.config.precision.dtype);
  BATON_CHECK(rate > 0, "the FLOP rate must be positive, got {}", rate);
  return Simulate(plan.schedule, FlopCosts(plan)).makespan / rate;
}

}  // namespace baton
