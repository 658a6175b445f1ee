#include "launcher/outputs.h"

#include <filesystem>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "core/files.h"
#include "scheduler/costs.h"
#include "scheduler/timeline.h"

namespace baton {

using nlohmann::json;

std::string ChromeTrace(const std::vector<json>& results) {
  double origin = std::numeric_limits<double>::infinity();
  for (const json& r : results) {
    for (const json& step : r.at("trace")) {
      for (const json& span : step.at("spans")) origin = std::min(origin, span[2].get<double>());
    }
  }
  json events = json::array();
  for (const json& r : results) {
    const int rank = r.at("rank").get<int>();
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", rank},
                      {"args", {{"name", fmt::format("stage {}", rank)}}}});
    for (const json& step : r.at("trace")) {
      for (const json& span : step.at("spans")) {
        const double start = span[2].get<double>() - origin;
        events.push_back(
            {{"name", span[0]},
             {"cat", span[0].get<std::string>().starts_with("wait") ? "wait" : "compute"},
             {"ph", "X"},
             {"ts", start},
             {"dur", span[3].get<double>() - span[2].get<double>()},
             {"pid", 0},
             {"tid", rank},
             {"args", {{"step", step.at("step")}, {"microbatch", span[1]}}}});
      }
    }
  }
  return json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n";
}

SimulationResult PredictTimeline(const Plan& plan) {
  const MicroBatchShape shape = plan.micro_batch_shape();
  Costs costs;
  for (int j = 0; j < static_cast<int>(plan.virtual_stages.size()); ++j) {
    const LayerRange& r = plan.virtual_stages[static_cast<size_t>(j)];
    const double forward =
        static_cast<double>(ForwardFlops(plan.graph, r.first, r.last, plan.dims, shape));
    ActionCosts c;
    c.forward = forward;
    c.backward = 2 * forward;
    c.backward_input = forward;
    c.backward_weight = forward;
    costs.per_virtual_stage[j] = c;
  }
  return Simulate(plan.schedule, costs);
}

std::string MeasuredTimelineSvg(const Plan& plan, const std::vector<json>& results) {
  // The last traced step, its compute spans as a timeline in milliseconds from its start.
  SimulationResult measured;
  measured.timeline.resize(results.size());
  double start = std::numeric_limits<double>::infinity(), end = 0;
  for (const json& r : results) {
    if (r.at("trace").empty()) return "";
    for (const json& span : r.at("trace").back().at("spans")) {
      start = std::min(start, span[2].get<double>());
      end = std::max(end, span[3].get<double>());
    }
  }
  const int p = plan.num_ranks();
  for (const json& r : results) {
    const int rank = r.at("rank").get<int>();
    StageFigures figures;
    figures.stage = rank;
    for (const json& span : r.at("trace").back().at("spans")) {
      const std::string name = span[0].get<std::string>();
      if (name.starts_with("wait") || name == "optimizer") continue;
      TimedAction t;
      t.action = ParseAction(name, rank, p);
      t.start = (span[2].get<double>() - start) / 1000.0;
      t.end = (span[3].get<double>() - start) / 1000.0;
      figures.busy += t.end - t.start;
      measured.timeline[static_cast<size_t>(rank)].push_back(t);
    }
    measured.per_stage.push_back(figures);
  }
  measured.makespan = (end - start) / 1000.0;
  double idle = 0;
  for (StageFigures& f : measured.per_stage) {
    f.idle = measured.makespan - f.busy;
    idle += f.idle;
  }
  measured.bubble_fraction = idle / (static_cast<double>(p) * measured.makespan);
  std::string svg = RenderSvg(plan.schedule, measured);
  // Measured against predicted, per stage, under the picture.
  const SimulationResult predicted = PredictTimeline(plan);
  std::string notes;
  for (int r = 0; r < p; ++r) {
    const StageFigures& m = measured.per_stage[static_cast<size_t>(r)];
    const StageFigures& s = predicted.per_stage[static_cast<size_t>(r)];
    notes += fmt::format(
        "<tspan x=\"10\" dy=\"16\">stage {}: measured bubble {:.3f}, predicted {:.3f}</tspan>", r,
        m.idle / measured.makespan, s.idle / predicted.makespan);
  }
  const size_t close = svg.rfind("</svg>");
  if (close == std::string::npos) return svg;
  const size_t height_pos = svg.find("height=\"");
  double height = 0;
  if (height_pos != std::string::npos) height = std::stod(svg.substr(height_pos + 8));
  const int extra = 16 * (p + 2);
  if (height_pos != std::string::npos) {
    const size_t quote = svg.find('"', height_pos + 8);
    svg.replace(height_pos + 8, quote - (height_pos + 8), fmt::format("{}", height + extra));
  }
  svg.insert(close, fmt::format("<text font-family=\"monospace\" font-size=\"12\" y=\"{}\">"
                                "<tspan x=\"10\">measured step (ms) vs simulator (FLOP costs)"
                                "</tspan>{}</text>\n",
                                height + 4, notes));
  return svg;
}

void WriteRunOutputs(const std::string& dir, const Plan& plan, const std::vector<json>& results) {
  MakeDirectories(dir);
  WriteFileAtomically(dir + "/trace.json", ChromeTrace(results));
  const std::string svg = MeasuredTimelineSvg(plan, results);
  if (!svg.empty()) WriteFileAtomically(dir + "/timeline.svg", svg);
}

}  // namespace baton
