// The search's levers (see candidates.h).
#include "planner/candidates.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "model/from_config.h"
#include "model/sublayer.h"

namespace baton {

std::string PrecisionName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "fp32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "fp16";
    case DType::kI32:
    case DType::kU8:
    case DType::kI8:
      break;
  }
  BATON_FAIL("{} is not a training precision", Name(dtype));
}

Config Apply(const Config& base, const Levers& levers) {
  Config config = base;
  config.precision.dtype = levers.dtype;
  config.parallel.checkpoint = levers.checkpoint;
  config.train.micro_batches = levers.micro_batches;
  config.parallel.stages = levers.stages;
  config.optimizer.state = levers.state;
  config.parallel.tensor = levers.tensor;
  if (levers.stages != base.parallel.stages) config.parallel.cut.clear();
  if (levers.replicas != base.parallel.replicas) {
    config.parallel.replicas = levers.replicas;
    config.parallel.zero = levers.replicas > 1 ? levers.zero : 0;
  }
  config.parallel.experts = levers.experts;
  Validate(config);
  return config;
}

std::vector<CheckpointPolicy> CheckpointPolicies(int max_layers, const CheckpointPolicy& first) {
  std::vector<CheckpointPolicy> policies = {first};
  const auto add = [&](const CheckpointPolicy& p) {
    if (std::find(policies.begin(), policies.end(), p) == policies.end()) policies.push_back(p);
  };
  add(CheckpointPolicy::None());
  add(CheckpointPolicy::Selective());
  for (int k = 1;; k *= 2) {
    add(CheckpointPolicy::Every(std::min(k, max_layers)));
    if (k >= max_layers) break;
  }
  return policies;
}

std::vector<int> MicroBatchCounts(const Config& config, int from) {
  std::vector<int> counts;
  for (int m = std::max(1, from); m <= config.train.batch_size; ++m) {
    if (config.train.batch_size % m == 0) counts.push_back(m);
  }
  return counts;
}

std::vector<int> TensorCounts(const Config& config, int from, int stages, int max_processes) {
  std::vector<int> counts = {from};
  const ModelDims dims = DimsOf(config.model);
  const std::vector<LayerSpec> graph = GraphOf(config.model);
  const int64_t experts = config.model.moe.num_experts;
  for (int t = 2 * from; t * stages <= max_processes; t *= 2) {
    if (!BlocksSplitOver(graph, dims, t)) break;
    // Each tensor rank's fold splits over the expert group.
    if (config.parallel.experts > 1 && experts % (t * config.parallel.experts) != 0) break;
    counts.push_back(t);
  }
  return counts;
}

std::vector<int> ExpertCounts(const Config& config, int replicas, int tensor) {
  std::vector<int> counts;
  const int64_t experts = config.model.moe.num_experts;
  for (int e = 2; e <= replicas; ++e) {
    if (replicas % e == 0 && experts % (tensor * e) == 0) counts.push_back(e);
  }
  return counts;
}

std::string SetFlags(const Config& chosen, const Config& base) {
  std::vector<std::string> flags;
  const ParallelConfig &p = chosen.parallel, &b = base.parallel;
  if (p.schedule != b.schedule) {
    flags.push_back(fmt::format("parallel.schedule={}", Name(p.schedule)));
  }
  if (p.chunks != b.chunks) flags.push_back(fmt::format("parallel.chunks={}", p.chunks));
  if (chosen.precision.dtype != base.precision.dtype) {
    flags.push_back("precision.dtype=" + PrecisionName(chosen.precision.dtype));
  }
  if (!(p.checkpoint == b.checkpoint)) {
    flags.push_back("parallel.checkpoint=" + p.checkpoint.ToString());
  }
  if (chosen.train.micro_batches != base.train.micro_batches) {
    flags.push_back(fmt::format("train.micro_batches={}", chosen.train.micro_batches));
  }
  if (chosen.optimizer.state != base.optimizer.state) {
    flags.push_back(fmt::format("optimizer.state={}", Name(chosen.optimizer.state)));
  }
  if (p.stages != b.stages) flags.push_back(fmt::format("parallel.stages={}", p.stages));
  if (p.tensor != b.tensor) flags.push_back(fmt::format("parallel.tensor={}", p.tensor));
  if (p.replicas != b.replicas) flags.push_back(fmt::format("parallel.replicas={}", p.replicas));
  if (p.zero != b.zero) flags.push_back(fmt::format("parallel.zero={}", p.zero));
  if (p.experts != b.experts) flags.push_back(fmt::format("parallel.experts={}", p.experts));
  if (p.cut != b.cut) flags.push_back("parallel.cut=" + p.cut);
  std::string out;
  for (const std::string& f : flags) out += (out.empty() ? "--set " : " --set ") + f;
  return out;
}

}  // namespace baton
