// The run report (docs/outputs.md, "report.json") and `baton eval`'s answer, from the results
// every rank hands back (plan/result.h) and the steps the launcher's monitors logged.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "core/memory.h"
#include "plan/plan.h"
#include "plan/result.h"
#include "planner/memory_planner.h"

namespace baton {

// A ledger's figures as {"category": bytes, ..., "total": bytes}.
nlohmann::json MemoryJson(const MemoryFigures& figures);

// The steps of every attempt, as the launcher's monitors logged them (report_steps()), and how
// many of them the final attempt ran.
struct RunSteps {
  nlohmann::json steps = nlohmann::json::array();
  size_t in_final_attempt = 0;
};

// Assembles the run report from every rank's final results (job/worker_main.cc), the memory the
// run's start predicted for each (by world rank: PredictMemory, once per run) and the steps the
// monitors logged; checks that every data-parallel replica ended with replica 0's parameters.
nlohmann::json BuildReport(const Plan& plan, const std::vector<RankMemory>& predicted,
                           const std::vector<RankResult>& results, const RunSteps& run_steps);
void WriteReport(const nlohmann::json& report, const std::string& path);
// The run's result line ("done: N steps, final loss ..."), printed at any --log-level.
void Summarise(const nlohmann::json& report, const std::string& report_path);

// Each category's largest peak over the ranks, and the largest total.
MemoryFigures PeakOverRanks(const std::vector<RankResult>& results);
// `baton eval`'s evaluation: the first rank holding the head (it has the loss).
const EvalRecord& HeadEval(const std::vector<RankResult>& results);
// `baton eval`'s answer on `out`: one line, or a JSON object.
void PrintEval(const Plan& plan, const std::string& weights, const std::vector<RankResult>& results,
               bool as_json, std::ostream& out);

}  // namespace baton
