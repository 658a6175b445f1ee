#include "launcher/outputs.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "scheduler/costs.h"
#include "scheduler/timeline.h"

namespace baton {

using nlohmann::json;

namespace {
// Chrome trace categories: what the time was spent on.
const char* SpanCategory(TraceSpan::Kind kind) {
  switch (kind) {
    case TraceSpan::Kind::kCompute:
    case TraceSpan::Kind::kOptimizer:
      return "compute";
    case TraceSpan::Kind::kWait:
    case TraceSpan::Kind::kExchange:
      return "wait";
    case TraceSpan::Kind::kStepStart:
      return "data";
  }
  BATON_FAIL("unknown trace span kind {}", static_cast<int>(kind));
}
}  // namespace

std::string ChromeTrace(const Plan& plan, const std::vector<RankResult>& results) {
  double origin = std::numeric_limits<double>::infinity();
  for (const RankResult& r : results) {
    for (const StepTrace& step : r.trace) {
      for (const TraceSpan& span : step.spans) origin = std::min(origin, span.start_us);
    }
  }
  json events = json::array();
  for (const RankResult& r : results) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", r.rank},
                      {"args", {{"name", plan.layout().Place(r.rank)}}}});
    for (const StepTrace& step : r.trace) {
      for (const TraceSpan& span : step.spans) {
        json args = {{"step", step.step}};
        if (span.HasAction()) args["microbatch"] = span.action.microbatch;
        events.push_back({{"name", span.Name(plan.num_stages(), plan.schedule.layout)},
                          {"cat", SpanCategory(span.kind)},
                          {"ph", "X"},
                          {"ts", span.start_us - origin},
                          {"dur", span.end_us - span.start_us},
                          {"pid", 0},
                          {"tid", r.rank},
                          {"args", args}});
      }
    }
  }
  return json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump(
             -1, ' ', false, json::error_handler_t::replace) +
         "\n";
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

SimulationResult MeasuredTimeline(const Plan& plan, const std::vector<RankResult>& results) {
  // The last traced step, its compute spans as a timeline in milliseconds from its start.
  SimulationResult measured;
  double start = std::numeric_limits<double>::infinity(), end = 0;
  for (const RankResult& r : results) {
    if (r.trace.empty()) return measured;
    for (const TraceSpan& span : r.trace.back().spans) {
      if (span.kind == TraceSpan::Kind::kStepStart) continue;  // the picture starts at an action
      start = std::min(start, span.start_us);
      end = std::max(end, span.end_us);
    }
  }
  measured.timeline.resize(results.size());
  for (const RankResult& r : results) {
    StageFigures figures;
    figures.stage = r.rank;
    for (const TraceSpan& span : r.trace.back().spans) {
      if (span.kind != TraceSpan::Kind::kCompute) continue;
      TimedAction t;
      t.action = span.action;
      t.start = (span.start_us - start) / 1000.0;
      t.end = (span.end_us - start) / 1000.0;
      figures.busy += t.end - t.start;
      measured.timeline[static_cast<size_t>(r.rank)].push_back(t);
    }
    measured.per_stage.push_back(figures);
  }
  measured.makespan = (end - start) / 1000.0;
  double idle = 0;
  for (StageFigures& f : measured.per_stage) {
    f.idle = measured.makespan - f.busy;
    idle += f.idle;
  }
  measured.bubble_fraction = idle / (static_cast<double>(plan.num_stages()) * measured.makespan);
  return measured;
}

std::string MeasuredTimelineSvg(const Plan& plan, const std::vector<RankResult>& results) {
  const SimulationResult measured = MeasuredTimeline(plan, results);
  if (measured.timeline.empty()) return "";
  const int p = plan.num_stages();
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

std::string SimulatedTimelineSvg(const Plan& plan, double makespan) {
  SimulationResult simulated = PredictTimeline(plan);
  const double factor = makespan / simulated.makespan;
  for (std::vector<TimedAction>& stage : simulated.timeline) {
    for (TimedAction& t : stage) {
      t.start *= factor;
      t.end *= factor;
    }
  }
  for (StageFigures& f : simulated.per_stage) {
    f.busy *= factor;
    f.idle *= factor;
  }
  simulated.makespan = makespan;
  return RenderSvg(plan.schedule, simulated);
}

void WriteRunOutputs(const std::string& dir, const Plan& plan,
                     const std::vector<RankResult>& results) {
  MakeDirectories(dir);
  WriteFileAtomically(dir + "/trace.json", ChromeTrace(plan, results));
  // The timeline is one pipeline's: replica 0's (every replica runs the same schedule).
  const std::vector<RankResult> pipeline(
      results.begin(), results.begin() + std::min<ptrdiff_t>(plan.num_stages(), results.size()));
  const std::string svg = MeasuredTimelineSvg(plan, pipeline);
  if (svg.empty()) return;
  WriteFileAtomically(dir + "/timeline.svg", svg);
  WriteFileAtomically(dir + "/timeline_simulated.svg",
                      SimulatedTimelineSvg(plan, MeasuredTimeline(plan, pipeline).makespan));
}

}  // namespace baton
