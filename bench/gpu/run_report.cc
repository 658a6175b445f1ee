// The GPU benchmark's run figures and loss comparison (see run_report.h).
#include "bench/gpu/run_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/units.h"
#include "model/cost.h"
#include "model/from_config.h"

namespace baton::gpu_bench {

Config ConfigOfReport(const nlohmann::json& report) {
  BATON_CHECK(report.contains("config"), "the report has no \"config\"");
  // JSON is YAML: the typed parser validates it like a config file.
  return ParseConfigString(report["config"].dump(), "report config");
}

RunFigures Summarise(const nlohmann::json& report, int warmup_steps) {
  const Config config = ConfigOfReport(report);
  BATON_CHECK(report.contains("steps") && report["steps"].is_array(), "the report has no steps");
  const nlohmann::json& steps = report["steps"];
  BATON_CHECK(static_cast<int64_t>(steps.size()) > warmup_steps,
              "the report has {} steps, not more than the {} warm-up steps", steps.size(),
              warmup_steps);
  RunFigures f;
  const int64_t seq_len = SequenceLength(config);
  f.tokens_per_step = static_cast<double>(config.train.batch_size) * static_cast<double>(seq_len);
  for (size_t i = 0; i < steps.size(); ++i) {
    const double loss = steps[i].value("loss", std::nan(""));
    BATON_CHECK(std::isfinite(loss), "step {} has loss {}", i + 1, loss);
    if (i == 0) f.first_loss = loss;
    f.last_loss = loss;
    if (static_cast<int>(i) >= warmup_steps) {
      f.measured_s += steps[i]["step_s"].get<double>();
      ++f.steps_measured;
    }
  }
  f.tokens_per_s = f.measured_s > 0
                       ? f.tokens_per_step * static_cast<double>(f.steps_measured) / f.measured_s
                       : 0.0;
  f.model_flops_per_token =
      ModelFlopsPerToken(GraphOf(config.model), DimsOf(config.model), seq_len);
  f.model_flops_per_s = f.tokens_per_s * f.model_flops_per_token;
  if (report.contains("stages")) {
    for (const nlohmann::json& s : report["stages"]) {
      StagePeak peak;
      peak.stage = s["stage"].get<int>();
      for (const auto& [key, bytes] : s["memory"]["peak"].items()) {
        if (key == "total") {
          peak.total_bytes = bytes.get<int64_t>();
        } else {
          peak.by_category.emplace_back(key, bytes.get<int64_t>());
        }
      }
      f.stages.push_back(std::move(peak));
    }
  }
  return f;
}

double Mfu(double model_flops_per_s, double peak_flops_per_s, int gpus) {
  if (peak_flops_per_s <= 0 || gpus <= 0) return 0.0;
  return model_flops_per_s / (peak_flops_per_s * gpus);
}

std::string LossComparison::Describe() const {
  return fmt::format("{} steps, max relative loss difference {:.3g} at step {} ({} {:.3g})", steps,
                     max_relative_diff, worst_step, ok ? "<=" : "EXCEEDS", tolerance);
}

LossComparison CompareLosses(const nlohmann::json& reference, const nlohmann::json& candidate,
                             double tolerance) {
  const nlohmann::json& a = reference.at("steps");
  const nlohmann::json& b = candidate.at("steps");
  BATON_CHECK(a.size() == b.size() && !a.empty(), "the runs have {} and {} steps", a.size(),
              b.size());
  LossComparison c;
  c.tolerance = tolerance;
  c.steps = static_cast<int64_t>(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double la = a[i].at("loss").get<double>();
    const double lb = b[i].at("loss").get<double>();
    const double diff = std::isfinite(la) && std::isfinite(lb)
                            ? std::abs(la - lb) / std::max(std::abs(la), 1.0)
                            : std::numeric_limits<double>::infinity();
    if (diff > c.max_relative_diff || i == 0) {
      c.max_relative_diff = diff;
      c.worst_step = a[i].value("step", static_cast<int64_t>(i + 1));
    }
  }
  c.ok = c.max_relative_diff <= tolerance;
  return c;
}

}  // namespace baton::gpu_bench
