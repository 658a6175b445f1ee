#include "scheduler/timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace baton {
namespace {

std::string Number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.6g", value);
  return buffer;
}

std::string Percent(double fraction) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f%%", 100 * fraction);
  return buffer;
}

std::string Headline(const Schedule& schedule, const SimulationResult& simulation,
                     const std::string& unit = "cost units") {
  return "schedule " + schedule.name + ": " + std::to_string(schedule.stages) + " stages, " +
         std::to_string(schedule.microbatches) + " micro-batches, " +
         std::to_string(schedule.chunks) + " chunk(s) per stage; makespan " +
         Number(simulation.makespan) + " " + unit + ", bubble fraction " +
         Number(simulation.bubble_fraction) + " (" + Percent(simulation.bubble_fraction) + ")";
}

std::string_view KindCategory(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return "forward";
    case ActionKind::kBackward:
      return "backward";
    case ActionKind::kBackwardInput:
      return "backward-input";
    case ActionKind::kBackwardWeight:
      return "backward-weight";
    case ActionKind::kSendForward:
    case ActionKind::kRecvForward:
    case ActionKind::kSendBackward:
    case ActionKind::kRecvBackward:
      return "communication";
  }
  return "unknown";
}

std::string_view KindColor(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return "#4c78a8";
    case ActionKind::kBackward:
      return "#54a24b";
    case ActionKind::kBackwardInput:
      return "#f58518";
    case ActionKind::kBackwardWeight:
      return "#b279a2";
    case ActionKind::kSendForward:
    case ActionKind::kRecvForward:
    case ActionKind::kSendBackward:
    case ActionKind::kRecvBackward:
      return "#999999";
  }
  return "#000000";
}

// The grid's time step: the shortest compute action (1 for unit costs).
double Quantum(const SimulationResult& simulation) {
  double quantum = 0;
  for (const auto& timeline : simulation.timeline) {
    for (const TimedAction& timed : timeline) {
      const double duration = timed.end - timed.start;
      if (duration > 0 && (quantum == 0 || duration < quantum)) quantum = duration;
    }
  }
  return quantum > 0 ? quantum : 1;
}

}  // namespace

std::string XmlEscape(std::string_view text) {
  std::string escaped;
  for (char c : text) {
    switch (c) {
      case '<':
        escaped += "&lt;";
        break;
      case '>':
        escaped += "&gt;";
        break;
      case '&':
        escaped += "&amp;";
        break;
      case '"':
        escaped += "&quot;";
        break;
      case '\'':
        escaped += "&#39;";
        break;
      default:
        escaped += c;
    }
  }
  return escaped;
}

std::string RenderText(const Schedule& schedule, const SimulationResult& simulation) {
  const double quantum = Quantum(simulation);
  const auto cell_of = [&](double time) { return static_cast<int>(std::lround(time / quantum)); };
  const int cells = cell_of(simulation.makespan);
  size_t width = 3;
  for (const auto& timeline : simulation.timeline) {
    for (const TimedAction& timed : timeline) {
      width = std::max(width, ToString(timed.action, schedule.stages, schedule.layout).size() + 1);
    }
  }
  const std::string margin(10, ' ');
  std::string axis = "time";
  axis.resize(margin.size(), ' ');
  for (int cell = 0; cell < cells; cell += 5) {
    axis.resize(margin.size() + cell * width, ' ');
    axis += Number(cell * quantum);
  }
  std::string text = Headline(schedule, simulation) + "\n" + axis + "\n";
  for (size_t rank = 0; rank < simulation.timeline.size(); ++rank) {
    std::string row(cells * width, ' ');
    for (int cell = 0; cell < cells; ++cell) row[cell * width] = '.';
    for (const TimedAction& timed : simulation.timeline[rank]) {
      const int first = std::min(cell_of(timed.start), cells);
      const int span = std::max(1, cell_of(timed.end) - first);
      std::string box = ToString(timed.action, schedule.stages, schedule.layout);
      box.resize(span * width - 1, span > 1 ? '-' : ' ');
      row.replace(first * width, box.size(), box);
    }
    std::string label = "stage " + std::to_string(rank);
    label.resize(margin.size(), ' ');
    while (!row.empty() && row.back() == ' ') row.pop_back();
    text += label + row + "\n";
  }
  text += "(one cell = " + Number(quantum) + " time unit(s); '.' = idle)\n";
  if (schedule.chunks > 1) {  // cells then carry a virtual stage
    text +=
        "(a cell is [virtual stage]KIND micro-batch: F forward, B backward, I input gradient, W "
        "weight gradient; the prefix names a chunk other than the stage's first, e.g. 3F1 = "
        "virtual stage 3's forward of micro-batch 1)\n";
  }
  text += "\n";
  text += "stage  busy        idle        peak_in_flight\n";
  for (const StageFigures& figures : simulation.per_stage) {
    char line[128];
    std::snprintf(line, sizeof line, "%-6d %-11s %-11s %d\n", figures.stage,
                  Number(figures.busy).c_str(), Number(figures.idle).c_str(),
                  figures.peak_in_flight);
    text += line;
  }
  return text;
}

std::string RenderJson(const Schedule& schedule, const SimulationResult& simulation) {
  nlohmann::ordered_json json;
  json["schedule"] = schedule.name;
  json["stages"] = schedule.stages;
  json["microbatches"] = schedule.microbatches;
  json["makespan"] = simulation.makespan;
  json["bubble_fraction"] = simulation.bubble_fraction;
  json["per_stage"] = nlohmann::ordered_json::array();
  for (const StageFigures& figures : simulation.per_stage) {
    nlohmann::ordered_json stage;
    stage["stage"] = figures.stage;
    stage["busy"] = figures.busy;
    stage["idle"] = figures.idle;
    stage["peak_in_flight"] = figures.peak_in_flight;
    json["per_stage"].push_back(stage);
  }
  return json.dump(2) + "\n";
}

std::string RenderSvg(const Schedule& schedule, const SimulationResult& simulation,
                      const SvgLabels& labels) {
  constexpr double kLeft = 80, kTop = 50, kLane = 30, kBox = 24, kNote = 16;
  const double makespan = simulation.makespan > 0 ? simulation.makespan : 1;
  const double scale = std::clamp(1200 / makespan, 2.0, 40.0);  // pixels per time unit
  const double lanes_bottom = kTop + kLane * schedule.stages;
  const double width = kLeft + makespan * scale + 20;
  const double notes_top = lanes_bottom + 70;
  const double height =
      notes_top + (labels.notes.empty() ? 0 : kNote * static_cast<double>(labels.notes.size() + 1));
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Number(width) +
                    "\" height=\"" + Number(height) + "\" viewBox=\"0 0 " + Number(width) + " " +
                    Number(height) + "\" font-family=\"sans-serif\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"10\" y=\"24\" font-size=\"15\">" +
         XmlEscape(Headline(schedule, simulation, labels.unit) +
                   "; bubble fraction = idle / makespan, the stages' mean") +
         "</text>\n";
  for (int rank = 0; rank < schedule.stages; ++rank) {
    const double y = kTop + kLane * rank;
    svg += "<text x=\"10\" y=\"" + Number(y + kBox * 0.7) + "\" font-size=\"12\">stage " +
           std::to_string(rank) + "</text>\n";
    svg += "<rect x=\"" + Number(kLeft) + "\" y=\"" + Number(y) + "\" width=\"" +
           Number(makespan * scale) + "\" height=\"" + Number(kBox) + "\" fill=\"#eeeeee\"/>\n";
    for (const TimedAction& timed : simulation.timeline[rank]) {
      const double x = kLeft + timed.start * scale;
      const double w = (timed.end - timed.start) * scale;
      const double opacity = 1.0 - 0.5 * timed.action.chunk / schedule.chunks;
      svg += "<g><title>" + XmlEscape(ToString(timed.action, schedule.stages, schedule.layout)) +
             " chunk " + std::to_string(timed.action.chunk) + " [" + Number(timed.start) + ", " +
             Number(timed.end) + ")</title><rect x=\"" + Number(x) + "\" y=\"" + Number(y) +
             "\" width=\"" + Number(w) + "\" height=\"" + Number(kBox) + "\" fill=\"" +
             std::string(KindColor(timed.action.kind)) + "\" fill-opacity=\"" + Number(opacity) +
             "\" stroke=\"white\"/>";
      if (w >= 12) {
        svg += "<text x=\"" + Number(x + w / 2) + "\" y=\"" + Number(y + kBox * 0.7) +
               "\" font-size=\"11\" text-anchor=\"middle\" fill=\"white\">" +
               std::to_string(timed.action.microbatch) + "</text>";
      }
      svg += "</g>\n";
    }
  }
  const double step = std::max(1.0, std::ceil(60 / scale));  // a tick every >= 60 px
  for (double t = 0; t <= makespan; t += step) {
    svg += "<text x=\"" + Number(kLeft + t * scale) + "\" y=\"" + Number(lanes_bottom + 14) +
           "\" font-size=\"10\" text-anchor=\"middle\">" + Number(t) + "</text>\n";
  }
  svg += "<text x=\"10\" y=\"" + Number(lanes_bottom + 14) + "\" font-size=\"10\">time (" +
         XmlEscape(labels.unit) + ")</text>\n";
  double x = kLeft;
  for (ActionKind kind : {ActionKind::kForward, ActionKind::kBackward, ActionKind::kBackwardInput,
                          ActionKind::kBackwardWeight}) {
    svg += "<rect x=\"" + Number(x) + "\" y=\"" + Number(lanes_bottom + 32) +
           "\" width=\"14\" height=\"14\" fill=\"" + std::string(KindColor(kind)) + "\"/>";
    svg += "<text x=\"" + Number(x + 20) + "\" y=\"" + Number(lanes_bottom + 44) +
           "\" font-size=\"12\">" + std::string(KindName(kind)) + " " +
           std::string(KindCategory(kind)) + "</text>\n";
    x += 150;
  }
  svg += "<text x=\"" + Number(x) + "\" y=\"" + Number(lanes_bottom + 44) +
         "\" font-size=\"12\">idle = grey; later chunks lighter; numbers = micro-batch</text>\n";
  if (!labels.notes.empty()) {
    svg += "<text font-family=\"monospace\" font-size=\"12\" y=\"" + Number(notes_top) + "\">";
    for (const std::string& note : labels.notes) {
      svg += "<tspan x=\"10\" dy=\"" + Number(kNote) + "\">" + XmlEscape(note) + "</tspan>";
    }
    svg += "</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

std::string RenderChromeTrace(const Schedule& schedule, const SimulationResult& simulation) {
  constexpr double kMicrosecondsPerUnit = 1000;
  nlohmann::json events = nlohmann::json::array();
  for (int rank = 0; rank < static_cast<int>(simulation.timeline.size()); ++rank) {
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", rank},
                      {"tid", rank},
                      {"args", {{"name", "stage " + std::to_string(rank)}}}});
    for (const TimedAction& timed : simulation.timeline[rank]) {
      const Action& action = timed.action;
      events.push_back({{"name", ToString(action, schedule.stages, schedule.layout)},
                        {"cat", KindCategory(action.kind)},
                        {"ph", "X"},
                        {"ts", timed.start * kMicrosecondsPerUnit},
                        {"dur", (timed.end - timed.start) * kMicrosecondsPerUnit},
                        {"pid", rank},
                        {"tid", rank},
                        {"args",
                         {{"microbatch", action.microbatch},
                          {"chunk", action.chunk},
                          {"virtual_stage", schedule.VirtualStageOf(action)}}}});
    }
  }
  nlohmann::json trace = {{"traceEvents", events},
                          {"displayTimeUnit", "ms"},
                          {"otherData",
                           {{"schedule", schedule.name},
                            {"makespan", simulation.makespan},
                            {"bubble_fraction", simulation.bubble_fraction}}}};
  return trace.dump() + "\n";
}

}  // namespace baton
