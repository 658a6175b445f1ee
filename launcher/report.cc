// The run report and `baton eval`'s answer (docs/outputs.md), from every rank's result.
#include "launcher/report.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "core/files.h"
#include "model/cost.h"
#include "planner/memory_planner.h"
#include "worker/run_data.h"
#include "worker/trainer.h"

namespace baton {

using nlohmann::json;

json MemoryJson(const MemoryFigures& figures) {
  json j = json::object();
  for (const auto& [key, bytes] : MemoryEntries(figures)) j[key] = bytes;
  return j;
}

// Assembles the run report from every rank's final results (worker_main.cc, TrainRank) and the
// steps the monitors logged.
json BuildReport(const Plan& plan, const std::vector<RankMemory>& predicted,
                 const std::vector<RankResult>& results, const RunSteps& run_steps) {
  BATON_CHECK(predicted.size() == static_cast<size_t>(plan.world_size()),
              "a memory prediction for {} ranks, the job has {}", predicted.size(),
              plan.world_size());
  json report;
  json job_predicted = json::object();
  report["schedule"] = plan.schedule.name;
  report["config"] = ToJson(plan.config);
  std::vector<std::pair<int, uint64_t>> digests;
  json stages = json::array();
  json job_peak = json::object();
  double wall_s = 0;
  const ParallelLayout layout = plan.layout();
  for (const RankResult& r : results) {
    const Coordinates at = layout.At(r.rank);
    if (at.replica == 0) {
      digests.insert(digests.end(), r.digests.begin(), r.digests.end());
    } else {
      // Every replica takes the identical step: its layers must hold replica 0's bits.
      const RankResult& first =
          results.at(static_cast<size_t>(layout.GroupOf(Axis::kData, r.rank).front()));
      BATON_CHECK(r.digests == first.digests,
                  "replica {} of stage {} ends with parameters that differ from replica 0's: the "
                  "replicas diverged (a bug; please report it with this run's config)",
                  at.replica, at.stage);
    }
    const double stage_wall = r.wall_s;
    const double busy = stage_wall > 0 ? r.compute_s / stage_wall : 0.0;
    const std::vector<LayerRange> ranges = plan.ChunkRanges(at.stage);
    json chunks = json::array();
    for (const LayerRange& range : ranges) chunks.push_back({range.first, range.last});
    json stage = {{"stage", at.stage},
                  {"layers", {ranges.front().first, ranges.back().last}},
                  {"chunks", chunks},
                  {"memory",
                   {{"peak", MemoryJson(r.memory_peak)},
                    {"predicted", MemoryJson(predicted.at(static_cast<size_t>(r.rank)).peak)}}},
                  {"busy_fraction", busy},
                  {"bubble_fraction", 1.0 - busy}};
    if (layout.replicas() > 1) stage["replica"] = at.replica;
    if (layout.tensor() > 1) stage["tensor"] = at.tensor;
    if (layout.replicas() > 1 || layout.tensor() > 1) stage["rank"] = r.rank;
    stages.push_back(stage);
    for (const auto& [key, bytes] : MemoryEntries(r.memory_peak)) {
      job_peak[key] = std::max(job_peak.value(key, int64_t{0}), bytes);
    }
    for (const auto& [key, bytes] : stage["memory"]["predicted"].items()) {
      job_predicted[key] = std::max(job_predicted.value(key, int64_t{0}), bytes.get<int64_t>());
    }
    wall_s = std::max(wall_s, stage_wall);
  }
  report["steps"] = run_steps.steps;
  const Config& config = plan.config;
  // wall_s is the final attempt's: its steps are the ones that count here.
  const double steps_run = static_cast<double>(run_steps.in_final_attempt);
  const double tokens = static_cast<double>(config.train.batch_size) *
                        static_cast<double>(SequenceLength(config)) * steps_run;
  report["tokens_per_s"] = wall_s > 0 ? tokens / wall_s : 0.0;
  report["param_checksum"] = CombineLayerDigests(digests);
  report["memory"] = {{"peak", job_peak}, {"predicted", job_predicted}};
  if (plan.memory_budget > 0) {
    report["memory"]["budget"] = plan.memory_budget;
    report["memory"]["partition_bound"] = plan.partition_bound;
  }
  report["stages"] = stages;
  return report;
}

void WriteReport(const json& report, const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) MakeDirectories(parent.string());
  WriteFileAtomically(path, report.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
}

void Summarise(const json& report, const std::string& report_path) {
  const json& steps = report["steps"];
  if (!steps.empty()) {
    const std::string line = fmt::format(
        "done: {} steps, final loss {:.4f}, {:.0f} tokens/s, param checksum {}", steps.size(),
        steps.back()["loss"].get<double>(), report["tokens_per_s"].get<double>(),
        report["param_checksum"].get<std::string>());
    // The run's result: printed at any --log-level (quieter levels get it plain, on stdout).
    if (spdlog::should_log(spdlog::level::info)) {
      spdlog::info("{}", line);
    } else {
      std::cout << line << std::endl;
    }
  }
  if (!report_path.empty()) spdlog::info("report written to {}", report_path);
}

// Each category's largest peak over the ranks, and the largest total.
MemoryFigures PeakOverRanks(const std::vector<RankResult>& results) {
  MemoryFigures peak;
  for (const RankResult& r : results) {
    for (size_t c = 0; c < peak.bytes.size(); ++c) {
      peak.bytes[c] = std::max(peak.bytes[c], r.memory_peak.bytes[c]);
    }
    peak.total = std::max(peak.total, r.memory_peak.total);
  }
  return peak;
}

// `baton eval`'s evaluation: the first head rank's (the stage holding the head has the loss).
const EvalRecord& HeadEval(const std::vector<RankResult>& results) {
  const auto head = std::find_if(results.begin(), results.end(),
                                 [](const RankResult& r) { return r.holds_head; });
  BATON_CHECK(head != results.end(), "no rank holds the head");
  BATON_CHECK(head->eval.has_value(), "rank {} returned no evaluation", head->rank);
  return *head->eval;
}

// `baton eval`'s answer: one line, or a JSON object.
void PrintEval(const Plan& plan, const std::string& weights, const std::vector<RankResult>& results,
               bool as_json, std::ostream& out) {
  const EvalRecord& eval = HeadEval(results);
  const Config& config = plan.config;
  const std::string source = EvalSource(config.data);
  if (as_json) {
    const json j = {{"loss", eval.loss},
                    {"perplexity", std::exp(eval.loss)},
                    {"batches", eval.batches},
                    {"windows_per_batch", config.train.batch_size},
                    {"seq_len", SequenceLength(config)},
                    {"tokens", eval.tokens},
                    {"data", source},
                    {"weights", weights},
                    {"stages", plan.num_stages()},
                    {"seconds", eval.seconds},
                    {"memory_peak", MemoryJson(PeakOverRanks(results))}};
    out << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  } else {
    out << fmt::format(
        "eval loss {:.6f} | perplexity {:.4f} | {} batches x {} windows x {} tokens = {} tokens "
        "of {} | weights {} | {} stage(s), {:.2f} s\n",
        eval.loss, std::exp(eval.loss), eval.batches, config.train.batch_size,
        SequenceLength(config), eval.tokens, source, weights, plan.num_stages(), eval.seconds);
  }
  out.flush();
}

}  // namespace baton
