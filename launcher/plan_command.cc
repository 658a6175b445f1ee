// `baton plan`, and the planning `baton run` shares with it: a config under --memory-budget and
// --fit.
#include "launcher/plan_command.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/memory.h"
#include "launcher/hf_model.h"
#include "launcher/report.h"
#include "launcher/run.h"
#include "model/cost.h"
#include "planner/measured_costs.h"
#include "planner/memory_planner.h"
#include "planner/planner.h"

namespace baton {
namespace {

using nlohmann::json;

// Runs `step` (planning, predicting memory) on the config loaded from `config_path`. A config
// that loads but cannot be planned (more stages than layers, a schedule file that does not fit
// it, a budget no cut meets) is an error naming the file: every value these steps read came from
// it or from its --set.
template <typename Step>
auto NamingConfig(const std::string& config_path, Step step) -> decltype(step()) {
  try {
    return step();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: plan: {}", config_path, e.what()));
  }
}

json FitJson(const FitResult& fit) {
  json candidates = json::array();
  for (const FitCandidate& c : fit.candidates) {
    candidates.push_back({{"stages", c.stages},
                          {"micro_batches", c.micro_batches},
                          {"checkpoint", c.checkpoint.ToString()},
                          {"dtype", std::string(Name(c.dtype))},
                          {"replicas", c.replicas},
                          {"optimizer_state", std::string(Name(c.state))},
                          {"level", c.level},
                          {"valid", c.valid},
                          {"fits", c.fits},
                          {"peak", c.peak},
                          {"step_s", c.step_seconds},
                          {"note", c.note}});
  }
  return {{"candidates", candidates}, {"chosen", fit.chosen}, {"set_flags", fit.set_flags}};
}

}  // namespace

int64_t BudgetBytes(const MemoryArgs& args) {
  if (args.fit && args.budget.empty()) BATON_FAIL("--fit needs --memory-budget");
  return args.budget.empty() ? 0 : ParseByteSize(args.budget);
}

Plan PlanConfig(const Config& config, const std::string& config_path, int64_t budget,
                const MemoryArgs& memory, FitResult* fit) {
  return NamingConfig(config_path, [&] {
    // --fit ranks by measured costs on CPU stages; GPU stages cannot be profiled here, so they
    // keep the FLOP model at nominal rates.
    const bool measure = memory.fit && config.device.type == DeviceType::kCpu;
    const MeasuredCosts measured =
        measure ? MeasureCosts(config, FitProfileRequest(config)) : MeasuredCosts();
    if (measure) spdlog::debug("--fit measured:\n{}", FormatMeasuredCosts(measured));
    if (measure && measured.spread > kUnsteadySpread) {
      spdlog::warn(
          "--fit's timing profile spread {:.0f}% over its rounds (the machine's load changed "
          "while profiling): candidates whose predicted steps are close may rank the other way on "
          "a second run; run it again on a quiet machine to be sure of the choice",
          100 * measured.spread);
    }
    return PlanForBudget(config, budget, memory.fit, memory.max_stages,
                         memory.fit && !measure ? MeasureStepRates(config) : StepRates(), fit,
                         memory.max_processes, measure ? &measured : nullptr);
  });
}

int PlanCommand(const PlanOptions& options, std::ostream& out) {
  const Config config = NamingConfig(options.config.path, [&] {
    return WithHfLlamaModel(LoadConfig(options.config.path, options.config.overrides));
  });
  const int64_t budget = BudgetBytes(options.memory);
  FitResult fit;
  const Plan plan = PlanConfig(config, options.config.path, budget, options.memory, &fit);
  const std::vector<RankMemory> predicted =
      NamingConfig(options.config.path, [&] { return PredictMemory(plan); });
  if (options.format == "json") {
    json j = {{"schedule", plan.schedule.name},
              {"parameters", ParamCount(plan.graph, plan.dims)},
              {"active_parameters", ActiveParamCount(plan.graph, plan.dims)},
              {"split_share_groups", SplitShareGroups(plan)},
              {"memory_budget", plan.memory_budget},
              {"partition_bound", plan.partition_bound},
              {"replica_bytes_per_step", ReplicaBytesPerStep(plan)},
              {"stages", json::array()}};
    const ParallelLayout layout = plan.layout();
    for (int r = 0; r < layout.world_size(); ++r) {
      const Coordinates at = layout.At(r);
      json chunks = json::array();
      for (const LayerRange& c : plan.ChunkRanges(at.stage)) {
        chunks.push_back({c.first, c.last});
      }
      j["stages"].push_back(
          {{"stage", at.stage},
           {"replica", at.replica},
           {"tensor", at.tensor},
           {"rank", r},
           {"layers", {chunks.front()[0], chunks.back()[1]}},
           {"chunks", chunks},
           {"peak_in_flight", predicted[static_cast<size_t>(r)].peak_in_flight},
           {"memory", {{"predicted", MemoryJson(predicted[static_cast<size_t>(r)].peak)}}}});
    }
    if (options.memory.fit) j["fit"] = FitJson(fit);
    out << j.dump(2) << "\n";
  } else {
    if (options.memory.fit) out << FormatFitTable(fit, budget) << "\n";
    const int64_t params = ParamCount(plan.graph, plan.dims);
    const int64_t active = ActiveParamCount(plan.graph, plan.dims);
    out << fmt::format("model: {} parameters{} ({})\n", params,
                       active == params ? "" : fmt::format(", {} active per token", active),
                       ToString(plan.dims))
        << FormatPartitionTable(plan) << "\n"
        << FormatMemoryTable(plan, predicted);
  }
  return 0;
}

}  // namespace baton
