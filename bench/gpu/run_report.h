// The GPU benchmark's figures from one `baton run --report` JSON, and the loss comparison of two
// runs. Every figure is defined in bench/README.md (GPU section) and docs/cuda.md:
//   tokens/s  = tokens per step x measured steps / sum of their step times (last stage's
//               records; the first `warmup_steps` steps are not measured)
//   model FLOP/s = tokens/s x ModelFlopsPerToken (model/cost.h: 6 N + 12 L T C for GPT)
//   MFU       = model FLOP/s / (gpus x the device's dense bf16 peak)
// Pure functions over parsed JSON: tested without a GPU (run_report_test.cc).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/units.h"

namespace baton::gpu_bench {

struct StagePeak {
  int stage = 0;
  int64_t total_bytes = 0;  // the ledger's peak of the sum of all categories
  std::vector<std::pair<std::string, int64_t>> by_category;  // peak per category
};

struct RunFigures {
  int64_t steps_measured = 0;
  double tokens_per_step = 0;
  double measured_s = 0;  // sum of the measured steps' step_s
  double tokens_per_s = 0;
  double model_flops_per_token = 0;
  double model_flops_per_s = 0;
  double first_loss = 0;
  double last_loss = 0;
  std::vector<StagePeak> stages;
};

// The run's config, read back from the report (its "config" object uses the YAML schema's keys).
Config ConfigOfReport(const nlohmann::json& report);

// Throws baton::Error when the report has no more than `warmup_steps` steps, or a loss that is
// not finite.
RunFigures Summarise(const nlohmann::json& report, int warmup_steps);

// model FLOP/s over gpus x peak; 0 when the peak is unknown (<= 0).
double Mfu(double model_flops_per_s, double peak_flops_per_s, int gpus);

struct LossComparison {
  int64_t steps = 0;
  double max_relative_diff = 0;  // max over steps of |a - b| / max(|a|, 1)
  int64_t worst_step = 0;
  double tolerance = 0;
  bool ok = false;
  std::string Describe() const;  // "20 steps, max relative difference 3e-5 at step 17 (<= 1e-3)"
};

// Step by step, the candidate's losses against the reference's; the runs must have the same
// number of steps.
LossComparison CompareLosses(const nlohmann::json& reference, const nlohmann::json& candidate,
                             double tolerance);

}  // namespace baton::gpu_bench
