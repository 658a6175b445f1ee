// Fit to a budget (see fit.h).
#include "launcher/fit.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/gemm_peak.h"
#include "launcher/memory_planner.h"
#include "launcher/step_time.h"
#include "model/from_config.h"

namespace baton {
namespace {

std::string PrecisionName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "fp32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "fp16";
    case DType::kI32:
      break;
  }
  BATON_FAIL("{} is not a training precision", Name(dtype));
}

// Every checkpoint policy worth trying for stages of up to `max_layers` layers: none, selective,
// then every:K for K = 1, 2, 4, ... (one segment per stage at the last).
std::vector<CheckpointPolicy> Policies(const CheckpointPolicy& configured, int max_layers) {
  std::vector<CheckpointPolicy> policies = {configured};
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

struct Lever {
  DType dtype;
  CheckpointPolicy checkpoint;
  int micro_batches;
  int stages;
};

std::vector<Lever> Levers(const Config& config, int max_stages, int num_layers) {
  std::vector<DType> dtypes = {config.precision.dtype};
  if (config.precision.dtype == DType::kF32) dtypes.push_back(DType::kBF16);
  std::vector<int> micro_batches;
  for (int m = config.train.micro_batches; m <= config.train.batch_size; ++m) {
    if (config.train.batch_size % m == 0) micro_batches.push_back(m);
  }
  std::vector<Lever> levers;
  for (int p = config.parallel.stages; p <= max_stages; ++p) {
    const int stage_layers = (num_layers + p - 1) / p;
    for (int m : micro_batches) {
      for (const CheckpointPolicy& policy : Policies(config.parallel.checkpoint, stage_layers)) {
        for (DType dtype : dtypes) levers.push_back({dtype, policy, m, p});
      }
    }
  }
  return levers;
}

int LevelOf(const Lever& lever, const Config& config) {
  if (lever.stages != config.parallel.stages) return 4;
  if (lever.micro_batches != config.train.micro_batches) return 3;
  if (!(lever.checkpoint == config.parallel.checkpoint)) return 2;
  if (lever.dtype != config.precision.dtype) return 1;
  return 0;
}

Config Apply(const Config& base, const Lever& lever) {
  Config config = base;
  config.precision.dtype = lever.dtype;
  config.parallel.checkpoint = lever.checkpoint;
  config.train.micro_batches = lever.micro_batches;
  config.parallel.stages = lever.stages;
  Validate(config);
  return config;
}

FitCandidate Evaluate(const Config& base, const Lever& lever, const FitOptions& options) {
  FitCandidate c;
  c.dtype = lever.dtype;
  c.checkpoint = lever.checkpoint;
  c.micro_batches = lever.micro_batches;
  c.stages = lever.stages;
  c.level = LevelOf(lever, base);
  Plan plan;
  try {
    plan = MakePlan(Apply(base, lever));
  } catch (const Error& e) {
    c.note = e.what();
    return c;
  }
  c.valid = true;
  const BudgetedPartition cut = PartitionWithinBudget(plan, options.budget);
  if (cut.fits) plan.virtual_stages = cut.virtual_stages;  // else time the balanced cut
  c.fits = cut.fits;
  c.peak = *std::max_element(cut.totals.begin(), cut.totals.end());
  c.step_flops = PredictStepSeconds(plan, 1.0);
  c.step_seconds = c.step_flops / options.flops_per_second;
  c.note = cut.bound;
  return c;
}

}  // namespace

FitResult FitToBudget(const Config& config, const FitOptions& options) {
  BATON_CHECK(options.budget > 0, "--fit needs a positive --memory-budget");
  const int num_layers = static_cast<int>(GraphOf(config.model).size());
  const int max_stages = options.max_stages > 0 ? options.max_stages
                                                : std::min(2 * config.parallel.stages, num_layers);
  FitResult result;
  for (const Lever& lever : Levers(config, max_stages, num_layers)) {
    result.candidates.push_back(Evaluate(config, lever, options));
  }
  std::vector<FitCandidate>& all = result.candidates;
  for (int level = 0; level <= 4 && result.chosen < 0; ++level) {
    for (size_t i = 0; i < all.size(); ++i) {
      if (!all[i].fits || all[i].level != level) continue;
      const bool faster = result.chosen < 0 ||
                          all[i].step_flops < all[static_cast<size_t>(result.chosen)].step_flops;
      if (faster) result.chosen = static_cast<int>(i);
    }
  }
  if (result.chosen < 0) {
    const FitCandidate* leanest = nullptr;
    for (const FitCandidate& c : all) {
      if (c.valid && (leanest == nullptr || c.peak < leanest->peak)) leanest = &c;
    }
    BATON_CHECK(leanest != nullptr, "--fit: no candidate configuration could be planned");
    BATON_FAIL(
        "no configuration fits the memory budget of {}: the smallest peak reachable is {} ({} "
        "stages, {} micro-batches, {}, checkpoint {}); raise the budget or allow more stages "
        "(--max-stages)",
        FormatBytes(options.budget), FormatBytes(leanest->peak), leanest->stages,
        leanest->micro_batches, PrecisionName(leanest->dtype), leanest->checkpoint.ToString());
  }
  const FitCandidate& chosen = all[static_cast<size_t>(result.chosen)];
  result.config =
      Apply(config, {chosen.dtype, chosen.checkpoint, chosen.micro_batches, chosen.stages});
  return result;
}

Plan PlanForBudget(const Config& config, int64_t budget, bool fit, int max_stages,
                   double flops_per_second, FitResult* search) {
  if (!fit) return MakePlan(config, budget);
  FitResult result = FitToBudget(config, {budget, flops_per_second, max_stages});
  Plan plan = MakePlan(result.config, budget);
  if (search != nullptr) *search = std::move(result);
  return plan;
}

double FlopRateFor(const Config& config) {
  if (config.device.type != DeviceType::kCpu) return 100e12;
  return MeasureSgemmGflops(512, 512, 512, 3, config.device.threads) * 1e9;
}

std::string FormatFitTable(const FitResult& result, int64_t budget) {
  static const char* kLevels[] = {"as configured", "precision", "checkpointing", "micro-batches",
                                  "stages"};
  std::string out =
      fmt::format("{:>1} {:>6} {:>5} {:>11} {:>7} {:>13} {:>12} {:>4}  {}\n", "", "stages", "mbs",
                  "checkpoint", "dtype", "peak", "step (s)", "fits", "lever / bound");
  for (size_t i = 0; i < result.candidates.size(); ++i) {
    const FitCandidate& c = result.candidates[i];
    const bool chosen = static_cast<int>(i) == result.chosen;
    if (!c.valid) {
      out += fmt::format("  {:>6} {:>5} {:>11} {:>7} {:>13} {:>12} {:>4}  {}\n", c.stages,
                         c.micro_batches, c.checkpoint.ToString(), PrecisionName(c.dtype), "-", "-",
                         "-", c.note);
      continue;
    }
    out += fmt::format("{:>1} {:>6} {:>5} {:>11} {:>7} {:>13} {:>12.4f} {:>4}  {}: {}\n",
                       chosen ? "*" : "", c.stages, c.micro_batches, c.checkpoint.ToString(),
                       PrecisionName(c.dtype), FormatBytes(c.peak), c.step_seconds,
                       c.fits ? "yes" : "no", kLevels[c.level], c.note);
  }
  if (result.chosen >= 0) {
    const FitCandidate& c = result.candidates[static_cast<size_t>(result.chosen)];
    out += fmt::format(
        "chosen: {} stages, {} micro-batches, checkpoint {}, {}: peak {} within {}, predicted "
        "{:.4f} s/step (the fastest fit with the cheapest lever: {})\n",
        c.stages, c.micro_batches, c.checkpoint.ToString(), PrecisionName(c.dtype),
        FormatBytes(c.peak), FormatBytes(budget), c.step_seconds, kLevels[c.level]);
  }
  return out;
}

}  // namespace baton
