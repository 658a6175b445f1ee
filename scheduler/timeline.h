// Timeline renderings of a simulated schedule: a text Gantt grid, a JSON summary, an SVG picture
// and a Chrome/Perfetto trace. Pure functions of (schedule, simulation); the figures they print are
// defined in simulator.h and docs/schedules.md.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "scheduler/schedule.h"
#include "scheduler/simulator.h"

namespace baton {

// `text` with < > & " ' as character references: safe as XML/HTML text and inside a quoted
// attribute (the timeline's labels, the run page's every value).
std::string XmlEscape(std::string_view text);

// One row per stage, time to the right. Each cell is the shortest compute action's duration; an
// action shows its text form ("F3", "5B2" for chunk 1 of stage 1 in a 4-stage pipeline) and fills
// the cells it spans with '-'; '.' is idle. Then makespan, bubble fraction and a per-stage table.
std::string RenderText(const Schedule& schedule, const SimulationResult& simulation);

// {"schedule", "stages", "microbatches", "makespan", "bubble_fraction",
//  "per_stage": [{"stage", "busy", "idle", "peak_in_flight"}]}, in that order.
std::string RenderJson(const Schedule& schedule, const SimulationResult& simulation);

// How RenderSvg labels a picture: the unit of its times (the simulator's cost units, or "ms" for
// a measured or rescaled timeline) and lines of notes under the legend.
struct SvgLabels {
  std::string unit = "cost units";
  std::vector<std::string> notes;
};

// A standalone SVG: one lane per stage, a box per compute action colored by kind (F, B, I, W; later
// chunks lighter) labelled with its micro-batch, a time axis in `labels.unit`, a legend, the
// figures and `labels.notes`. Its viewBox lets a page scale it to its width.
std::string RenderSvg(const Schedule& schedule, const SimulationResult& simulation,
                      const SvgLabels& labels = {});

// Chrome trace-event JSON ({"traceEvents": [...]}, open in chrome://tracing or ui.perfetto.dev):
// a complete event (ph "X") per compute action with pid = tid = stage; one cost unit is 1 ms.
std::string RenderChromeTrace(const Schedule& schedule, const SimulationResult& simulation);

}  // namespace baton
