// What --fit (planner/fit.h) and `baton tune` (planner/tune.h) search over, in one place: the
// levers a candidate pulls, the values each lever takes, how a candidate becomes a config (the
// ZeRO rule with it), and the `--set` flags that say so.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"

namespace baton {

struct Levers {
  DType dtype = DType::kF32;  // precision.dtype
  CheckpointPolicy checkpoint;
  int micro_batches = 1;
  int stages = 1;
  int replicas = 1;
  OptimizerState state = OptimizerState::kF32;  // optimizer.state
  int tensor = 1;                               // parallel.tensor
  int zero = 1;     // with replicas added: parallel.zero where it applies (1, 2 or 3)
  int experts = 1;  // parallel.experts: each MoE layer's experts split over this many replicas

  bool operator==(const Levers&) const = default;
};

// `base` with `levers` pulled, validated (throws baton::Error when invalid). An explicit
// parallel.cut is for its own stage count: other counts are cut by parallel.partition. Replicas
// other than the configured count get ZeRO at `levers.zero` (1, 2 or 3): the replicas then
// divide the optimizer state too, 8-bit or f32. Experts split over the replicas (`levers.experts`
// > 1) take no ZeRO (they do not combine).
Config Apply(const Config& base, const Levers& levers);

// The checkpoint policies for chunks of up to `max_layers` layers: `first`, none, selective,
// then every:K for K = 1, 2, 4, ... (one segment per chunk at the last), each once.
std::vector<CheckpointPolicy> CheckpointPolicies(int max_layers, const CheckpointPolicy& first);

// The micro-batch counts from `from` up that divide the batch.
std::vector<int> MicroBatchCounts(const Config& config, int from);

// Tensor ranks: `from`, then 2, 4, ... times it while each divides the heads, the key/value heads,
// the MLP's hidden units and a mixture's experts (T x parallel.experts of them, where expert
// groups split each tensor rank's fold), and `stages` x T <= max_processes.
std::vector<int> TensorCounts(const Config& config, int from, int stages, int max_processes);

// Expert groups for `replicas` replicas of a mixture of experts on `tensor` tensor ranks: every
// E > 1 dividing the replicas, with T E dividing model.moe.num_experts, smallest first; none for a
// dense model.
std::vector<int> ExpertCounts(const Config& config, int replicas, int tensor);

// precision.dtype's spelling of a training precision: "fp32", "bf16", "fp16".
std::string PrecisionName(DType dtype);

// The `--set` flags that turn `base` into `chosen` (the searched keys: schedule, chunks, stages,
// tensor, replicas, zero, micro-batches, checkpoint, precision, optimizer state, cut), "" if none.
std::string SetFlags(const Config& chosen, const Config& base);

}  // namespace baton
