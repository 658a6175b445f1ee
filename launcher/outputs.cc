#include "launcher/outputs.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "coordinator/coordinator_types.h"
#include "core/error.h"
#include "core/files.h"
#include "core/units.h"
#include "scheduler/costs.h"
#include "scheduler/timeline.h"
#include "worker/flight_recorder.h"

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
    const int stage = plan.layout().StageOf(r.rank);
    StageFigures figures;
    figures.stage = stage;
    for (const TraceSpan& span : r.trace.back().spans) {
      if (span.kind != TraceSpan::Kind::kCompute) continue;
      TimedAction t;
      t.action = span.action;
      t.start = (span.start_us - start) / 1000.0;
      t.end = (span.end_us - start) / 1000.0;
      figures.busy += t.end - t.start;
      measured.timeline[static_cast<size_t>(stage)].push_back(t);
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
  // Measured against predicted, per stage, under the picture: the headline's bubble fraction is
  // the mean of these.
  const SimulationResult predicted = PredictTimeline(plan);
  SvgLabels labels{.unit = "ms",
                   .notes = {"bubble fraction per stage, measured step vs simulator (FLOP costs)"}};
  for (int r = 0; r < plan.num_stages(); ++r) {
    const StageFigures& m = measured.per_stage[static_cast<size_t>(r)];
    const StageFigures& s = predicted.per_stage[static_cast<size_t>(r)];
    labels.notes.push_back(fmt::format("stage {}: measured {:.3f}, predicted {:.3f}", r,
                                       m.idle / measured.makespan, s.idle / predicted.makespan));
  }
  return RenderSvg(plan.schedule, measured, labels);
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
  return RenderSvg(plan.schedule, simulated, {.unit = "ms", .notes = {}});
}

void WriteRunOutputs(const std::string& dir, const Plan& plan,
                     const std::vector<RankResult>& results) {
  MakeDirectories(dir);
  WriteFileAtomically(dir + "/trace.json", ChromeTrace(plan, results));
  // The timeline is one pipeline's, in stage order: replica 0's at tensor rank 0 (every replica
  // and tensor rank runs the same schedule).
  std::vector<RankResult> pipeline;
  for (int rank : plan.layout().GroupOf(Axis::kPipeline, 0)) {
    if (rank < static_cast<int>(results.size())) pipeline.push_back(results[rank]);
  }
  const std::string svg = MeasuredTimelineSvg(plan, pipeline);
  if (svg.empty()) return;
  WriteFileAtomically(dir + "/timeline.svg", svg);
  WriteFileAtomically(dir + "/timeline_simulated.svg",
                      SimulatedTimelineSvg(plan, MeasuredTimeline(plan, pipeline).makespan));
}

// docs/protocol.md, "Reports, heartbeats and hang diagnosis".
void CollectFlightRecords(const Plan& plan, int attempt) {
  const ParallelLayout layout = plan.layout();
  std::vector<FlightRecord> records;
  for (int rank = 0; rank < plan.world_size(); ++rank) {
    std::optional<FlightRecord> record =
        ReadFlightRecord(FlightRecorderPath(plan.config.output.dir, rank));
    if (record) records.push_back(std::move(*record));
  }
  if (records.empty()) return;  // no worker got as far as training (or they ran elsewhere)
  nlohmann::json body = FlightRecordsJson(records);
  body["attempt"] = attempt;
  const std::string path =
      (std::filesystem::path(plan.config.output.dir) / "flight_recorder.json").string();
  try {
    WriteFileAtomically(path, body.dump(1) + "\n");
  } catch (const Error& e) {
    spdlog::warn("could not write {}: {}", path, e.what());
  }
  const auto describe = [&layout](int rank) {
    if (rank < 0 || rank >= layout.world_size()) return fmt::format("rank {}", rank);
    const Coordinates at = layout.At(rank);
    return DescribeRank(rank, at.stage, layout.replicas() > 1 ? at.replica : -1,
                        layout.tensor() > 1 ? at.tensor : -1);
  };
  spdlog::error("{}(all of it in {})",
                SummariseFlightRecords(records, static_cast<int64_t>(WallMicros()), describe),
                path);
}

}  // namespace baton
