// The run page (report.html): one function per panel, each drawing what its inputs hold.
#include "launcher/run_page.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <sstream>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/files.h"
#include "core/memory.h"
#include "launcher/inline_svg.h"
#include "launcher/svg_plot.h"
#include "scheduler/timeline.h"  // XmlEscape

namespace baton {
namespace {

using nlohmann::json;

// clang-format off
constexpr const char* kStyle =
    "body{font-family:sans-serif;margin:24px;color:#222;max-width:1300px}"
    "h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px}"
    ".plots{display:flex;flex-wrap:wrap;gap:12px}.scroll{overflow-x:auto}"
    ".scroll svg{max-width:100%;height:auto}"
    ".missing{color:#a33;font-style:italic}.note{color:#555;font-size:13px}"
    "pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px}"
    "table{border-collapse:collapse}td{padding:2px 12px 2px 0}";
// clang-format on

// Series colours: one per part of the run (attempts, resumed runs), and the eval loss's.
constexpr const char* kLinePalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b"};
constexpr const char* kEvalPalette[] = {"#ff7f0e", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
constexpr const char* kCategoryColors[kNumMemCategories] = {
    "#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#9d755d"};

// metrics.jsonl's lines that parse as objects with a step and whose values have the types the
// page reads, in file order.
struct Metrics {
  std::vector<json> lines;
  int unreadable = 0;  // lines that did not parse (a line being written, a damaged file)
  // Lines that parsed but hold a value of the wrong type, each "metrics.jsonl line N: KEY is ...".
  std::vector<std::string> mistyped;
};

// What a value the page reads must be.
enum class Want { kNumber, kNumberOrNull, kInteger, kString, kObject, kArray };

bool Fits(const json& value, Want want) {
  switch (want) {
    case Want::kNumber:
      return value.is_number();
    case Want::kNumberOrNull:  // a value that was not finite is written as null
      return value.is_number() || value.is_null();
    case Want::kInteger:
      return value.is_number_integer();
    case Want::kString:
      return value.is_string();
    case Want::kObject:
      return value.is_object();
    case Want::kArray:
      return value.is_array();
  }
  return false;
}

const char* WantName(Want want) {
  switch (want) {
    case Want::kNumber:
      return "a number";
    case Want::kNumberOrNull:
      return "a number or null";
    case Want::kInteger:
      return "an integer";
    case Want::kString:
      return "a string";
    case Want::kObject:
      return "an object";
    case Want::kArray:
      return "an array";
  }
  return "?";
}

// What a value is, for a message ("a string", "a number with a fraction"), never its bytes.
std::string KindOf(const json& value) {
  if (value.is_number_float()) return "a number with a fraction";
  if (value.is_null()) return "null";
  const std::string name = value.type_name();
  return (name == "object" || name == "array" ? "an " : "a ") + name;
}

// `parent`.`key`, the key as a JSON string when it is not a plain name, cut short: a path for a
// message that never carries a file's raw bytes.
std::string KeyPath(const std::string& parent, const std::string& key) {
  const bool plain =
      !key.empty() && key.size() <= 40 && std::all_of(key.begin(), key.end(), [](unsigned char c) {
        return std::isalnum(c) != 0 || c == '_' || c == '-';
      });
  const std::string shown =
      plain ? key : json(key.substr(0, 40)).dump(-1, ' ', true, json::error_handler_t::replace);
  return parent.empty() ? shown : parent + "." + shown;
}

std::optional<std::string> Mistyped(const std::string& path, const json& value, Want want) {
  if (Fits(value, want)) return std::nullopt;
  return fmt::format("{} is {}, not {}", path, KindOf(value), WantName(want));
}

// The first value of `object`'s `fields` (where present) of the wrong type; with `required`, a
// missing one too.
std::optional<std::string> FieldProblem(const json& object, const std::string& path,
                                        std::initializer_list<std::pair<const char*, Want>> fields,
                                        const char* required = nullptr) {
  if (required != nullptr && !object.contains(required)) {
    return fmt::format("{} is missing", KeyPath(path, required));
  }
  for (const auto& [key, want] : fields) {
    if (!object.contains(key)) continue;
    if (auto problem = Mistyped(KeyPath(path, key), object[key], want)) return problem;
  }
  return std::nullopt;
}

// {"stage0": {"params": bytes, ...}, ...} (metrics.jsonl's memory_peak) or {"params": bytes, ...}
// (`depth` 1: the report's memory.peak): objects of numbers.
std::optional<std::string> PeaksProblem(const json& value, const std::string& path, int depth) {
  if (auto problem = Mistyped(path, value, Want::kObject)) return problem;
  for (const auto& [key, inner] : value.items()) {
    auto problem = depth > 1 ? PeaksProblem(inner, KeyPath(path, key), depth - 1)
                             : Mistyped(KeyPath(path, key), inner, Want::kNumber);
    if (problem) return problem;
  }
  return std::nullopt;
}

// A metrics.jsonl line (an object): every key the page reads, of its type.
std::optional<std::string> MetricsLineProblem(const json& line) {
  if (auto problem = FieldProblem(line, "",
                                  {{"step", Want::kNumber},
                                   {"attempt", Want::kInteger},
                                   {"elapsed_s", Want::kNumber},
                                   {"time", Want::kString},
                                   {"loss", Want::kNumberOrNull},
                                   {"eval_loss", Want::kNumberOrNull},
                                   {"lr", Want::kNumberOrNull},
                                   {"grad_norm", Want::kNumberOrNull},
                                   {"tokens_per_s", Want::kNumberOrNull}},
                                  "step")) {
    return problem;
  }
  if (!line.contains("memory_peak")) return std::nullopt;
  return PeaksProblem(line["memory_peak"], "memory_peak", 2);
}

// A report's stages[i]: its stage, replica, tensor rank and memory figures, of their types.
std::optional<std::string> ReportStageProblem(const json& stage, const std::string& path) {
  if (auto problem = Mistyped(path, stage, Want::kObject)) return problem;
  if (auto problem = FieldProblem(stage, path,
                                  {{"stage", Want::kInteger},
                                   {"replica", Want::kInteger},
                                   {"tensor", Want::kInteger},
                                   {"memory", Want::kObject}})) {
    return problem;
  }
  if (!stage.contains("memory")) return std::nullopt;
  for (const char* key : {"peak", "predicted"}) {
    if (!stage["memory"].contains(key)) continue;
    if (auto problem = PeaksProblem(stage["memory"][key], KeyPath(path + ".memory", key), 1)) {
      return problem;
    }
  }
  return std::nullopt;
}

// The run report's stages[] whose values have their types, and a message for each that does not.
struct ReportStages {
  bool present = false;  // the report has a stages array
  std::vector<json> stages;
  std::vector<std::string> mistyped;  // "report.json: stages[1].stage is a string, ..."
};

ReportStages CheckReportStages(const std::optional<json>& report, const std::string& file) {
  ReportStages checked;
  if (!report || !report->contains("stages")) return checked;
  const json& stages = (*report)["stages"];
  if (auto problem = Mistyped("stages", stages, Want::kArray)) {
    checked.mistyped.push_back(file + ": " + *problem);
    return checked;
  }
  checked.present = true;
  for (size_t i = 0; i < stages.size(); ++i) {
    const std::string path = fmt::format("stages[{}]", i);
    if (auto problem = ReportStageProblem(stages[i], path)) {
      checked.mistyped.push_back(file + ": " + *problem);
    } else {
      checked.stages.push_back(stages[i]);
    }
  }
  return checked;
}

// A stretch of lines of one attempt of one launch: a new one begins at every restart (the
// attempt changes) and every resumed run (the steps go back, or elapsed_s, counted from each
// `baton run`'s start, starts over).
struct Part {
  size_t begin = 0;
  size_t end = 0;
  int attempt = 0;
};

// `file`: metrics.jsonl's path, for messages.
Metrics ParseMetrics(const std::string& text, const std::string& file) {
  Metrics metrics;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) {
      ++metrics.unreadable;
    } else if (auto problem = MetricsLineProblem(j)) {
      metrics.mistyped.push_back(fmt::format("{} line {}: {}", file, number, *problem));
    } else {
      metrics.lines.push_back(std::move(j));
    }
  }
  return metrics;
}

double StepOf(const json& line) { return line["step"].get<double>(); }

double ElapsedOf(const json& line) {
  return line.contains("elapsed_s") && line["elapsed_s"].is_number()
             ? line["elapsed_s"].get<double>()
             : 0.0;
}

std::vector<Part> SplitParts(const Metrics& metrics) {
  std::vector<Part> parts;
  for (size_t i = 0; i < metrics.lines.size(); ++i) {
    const json& line = metrics.lines[i];
    const int attempt = line.value("attempt", 0);
    const bool new_part = parts.empty() || attempt != parts.back().attempt ||
                          StepOf(line) <= StepOf(metrics.lines[i - 1]) ||
                          ElapsedOf(line) < ElapsedOf(metrics.lines[i - 1]);
    if (new_part) parts.push_back({i, i, attempt});
    parts.back().end = i + 1;
  }
  return parts;
}

std::string PartLabel(const Metrics& metrics, const Part& part) {
  std::string label = fmt::format("steps {}-{}", StepOf(metrics.lines[part.begin]),
                                  StepOf(metrics.lines[part.end - 1]));
  if (part.attempt > 0) label += fmt::format(" (attempt {})", part.attempt);
  return label;
}

// One series per part: the lines' `key` where it is a number (NaN is written as null).
std::vector<PlotSeries> SeriesOf(const Metrics& metrics, const std::vector<Part>& parts,
                                 const std::string& key, const std::string& name,
                                 const char* const* palette, bool markers) {
  std::vector<PlotSeries> series;
  for (size_t p = 0; p < parts.size(); ++p) {
    PlotSeries s;
    s.label = parts.size() > 1 ? name + ", " + PartLabel(metrics, parts[p]) : name;
    s.color = palette[p % 5];
    s.markers = markers;
    for (size_t i = parts[p].begin; i < parts[p].end; ++i) {
      const json& line = metrics.lines[i];
      if (line.contains(key) && line[key].is_number()) {
        s.points.push_back({StepOf(line), line[key].get<double>()});
      }
    }
    if (!s.points.empty()) series.push_back(std::move(s));
  }
  return series;
}

// Mixture of experts: each MoE layer's busiest expert over its mean load (metrics.jsonl's
// "experts"), one series per layer over every part; none without experts.
std::vector<PlotSeries> ExpertLoadSeries(const Metrics& metrics, const char* const* palette) {
  std::map<std::string, PlotSeries> by_layer;
  for (const json& line : metrics.lines) {
    if (!line.contains("experts") || !line["experts"].is_object()) continue;
    for (const auto& [layer, figures] : line["experts"].items()) {
      if (!figures.is_object() || !figures.contains("max_over_mean") ||
          !figures["max_over_mean"].is_number()) {
        continue;
      }
      by_layer[layer].points.push_back({StepOf(line), figures["max_over_mean"].get<double>()});
    }
  }
  std::vector<PlotSeries> series;
  for (auto& [layer, s] : by_layer) {
    s.label = layer;
    s.color = palette[series.size() % 5];
    series.push_back(std::move(s));
  }
  return series;
}

// Dashed lines where each part after the first begins.
std::vector<std::pair<double, std::string>> PartMarkers(const Metrics& metrics,
                                                        const std::vector<Part>& parts) {
  std::vector<std::pair<double, std::string>> markers;
  for (size_t p = 1; p < parts.size(); ++p) {
    markers.emplace_back(StepOf(metrics.lines[parts[p].begin]),
                         parts[p].attempt > 0 ? fmt::format("restart {}", parts[p].attempt)
                                              : std::string("resumed"));
  }
  return markers;
}

// "2 line(s) with a value of the wrong type were skipped (A; B)", "" when there are none: at
// most three messages, then how many more.
std::string SkippedNote(const std::vector<std::string>& problems, const char* what) {
  if (problems.empty()) return "";
  std::string listed;
  for (size_t i = 0; i < std::min<size_t>(problems.size(), 3); ++i) {
    listed += (i > 0 ? "; " : "") + problems[i];
  }
  if (problems.size() > 3) listed += fmt::format("; and {} more", problems.size() - 3);
  return fmt::format("{} {} with a value of the wrong type were skipped ({})", problems.size(),
                     what, listed);
}

std::string NotYet(const std::string& file, const std::string& why = "not yet written") {
  return fmt::format("<p class=\"missing\">{}: {}</p>\n", XmlEscape(file), XmlEscape(why));
}

// Loss and eval loss, lr, grad norm and tokens/s against the step, one plot each.
std::string CurvesPanel(const std::optional<Metrics>& metrics) {
  std::string html = "<section id=\"curves\"><h2>Training curves</h2>\n";
  if (!metrics) return html + NotYet("metrics.jsonl") + "</section>\n";
  const std::vector<Part> parts = SplitParts(*metrics);
  const auto markers = PartMarkers(*metrics, parts);
  html += fmt::format(
      "<p class=\"note\">From metrics.jsonl: {} step(s) in {} part(s) (a new part at every "
      "restart and resumed run, dashed){}{}.</p>\n<div class=\"plots\">\n",
      metrics->lines.size(), parts.size(),
      metrics->unreadable > 0
          ? fmt::format("; {} line(s) that did not parse were skipped", metrics->unreadable)
          : "",
      metrics->mistyped.empty() ? "" : "; " + XmlEscape(SkippedNote(metrics->mistyped, "line(s)")));
  LinePlot loss{"plot-loss",
                "Loss",
                "step",
                "loss",
                SeriesOf(*metrics, parts, "loss", "loss", kLinePalette, false),
                markers};
  for (PlotSeries& eval : SeriesOf(*metrics, parts, "eval_loss", "eval loss", kEvalPalette, true)) {
    loss.series.push_back(std::move(eval));
  }
  html += LinePlotSvg(loss);
  const std::tuple<const char*, const char*, const char*, const char*> others[] = {
      {"plot-lr", "Learning rate", "lr", "lr"},
      {"plot-grad-norm", "Gradient norm (before clipping)", "grad_norm", "grad norm"},
      {"plot-tokens-per-s", "Throughput", "tokens_per_s", "tokens/s"}};
  for (const auto& [id, title, key, name] : others) {
    html +=
        LinePlotSvg(LinePlot{id, title, "step", name,
                             SeriesOf(*metrics, parts, key, name, kLinePalette, false), markers});
  }
  if (std::vector<PlotSeries> experts = ExpertLoadSeries(*metrics, kLinePalette);
      !experts.empty()) {
    html += LinePlotSvg(LinePlot{"plot-expert-load",
                                 "Expert load: the busiest expert over the mean, per MoE layer",
                                 "step", "max / mean", std::move(experts), markers});
  }
  return html + "</div></section>\n";
}

// A stage's ledger figures ({"params": bytes, ..., "total": bytes}) as a stacked bar in MiB.
Bar MemoryBar(const std::string& label, const json& figures) {
  constexpr double kMiB = 1024.0 * 1024.0;
  Bar bar{label, {}, std::nullopt};
  for (size_t c = 0; c < kAllMemCategories.size(); ++c) {
    const std::string category(Name(kAllMemCategories[c]));
    const double bytes = figures.contains(category) && figures[category].is_number()
                             ? figures[category].get<double>()
                             : 0.0;
    bar.segments.push_back({category, kCategoryColors[c], bytes / kMiB});
  }
  if (figures.contains("total") && figures["total"].is_number()) {
    bar.total = figures["total"].get<double>() / kMiB;
  }
  return bar;
}

// Per stage, measured beside predicted from the report; else the last step's measured peaks.
std::string MemoryPanel(const std::optional<Metrics>& metrics, const ReportStages& report) {
  std::string html = "<section id=\"memory\"><h2>Memory by stage</h2>\n";
  StackedBarChart chart{"plot-memory", "Peak memory by category", "MiB", {}, {}};
  for (size_t c = 0; c < kAllMemCategories.size(); ++c) {
    chart.legend.emplace_back(std::string(Name(kAllMemCategories[c])), kCategoryColors[c]);
  }
  std::string note;
  if (report.present) {
    for (const json& stage : report.stages) {  // checked: CheckReportStages
      std::string label = fmt::format("stage {}", stage.value("stage", -1));
      if (stage.contains("replica")) label += fmt::format(" replica {}", stage.value("replica", 0));
      if (stage.contains("tensor")) label += fmt::format(" tensor {}", stage.value("tensor", 0));
      const json memory = stage.value("memory", json::object());
      chart.groups.push_back({label,
                              {MemoryBar("measured", memory.value("peak", json::object())),
                               MemoryBar("predicted", memory.value("predicted", json::object()))}});
    }
    note =
        "From the run report: each rank's ledger peaks over the run, measured beside the "
        "planner's prediction.";
  } else if (metrics && !metrics->lines.empty()) {
    const json& last = metrics->lines.back();
    const json peaks = last.value("memory_peak", json::object());
    for (const auto& [key, figures] : peaks.items()) {
      chart.groups.push_back({key, {MemoryBar("measured", figures)}});
    }
    note = fmt::format(
        "From metrics.jsonl: each rank's ledger peaks as reported after step {} (the "
        "predicted figures come with the run report).",
        StepOf(last));
  }
  if (!report.mistyped.empty()) {
    html += "<p class=\"note\">From the run report: " +
            XmlEscape(SkippedNote(report.mistyped, "stage(s)")) + ".</p>\n";
  }
  if (chart.groups.empty())
    return html + NotYet("metrics.jsonl and the run report") + "</section>\n";
  html += "<p class=\"note\">" + XmlEscape(note) +
          " Stacked: each category's peak; black line: the peak of the total, which the "
          "categories need not reach together.</p>\n";
  return html + "<div class=\"scroll\">" + StackedBarSvg(chart) + "</div></section>\n";
}

std::string TimelineFigure(const std::optional<std::string>& svg, const std::string& file,
                           const std::string& caption) {
  std::string html = "<figure><figcaption>" + XmlEscape(caption) + "</figcaption>\n";
  if (!svg) return html + NotYet(file, "not yet written (at the end of the run)") + "</figure>\n";
  const InlineSvgResult inline_svg = InlineSvg(*svg);
  if (!inline_svg.svg) {
    return html +
           NotYet(file,
                  "not shown: not one of Baton's timeline pictures (" + inline_svg.why + ")") +
           "</figure>\n";
  }
  return html + "<div class=\"scroll\">" + *inline_svg.svg + "</div></figure>\n";
}

std::string TimelinePanel(const RunPageInputs& inputs) {
  return "<section id=\"timeline\"><h2>Timeline of the last traced step</h2>\n" +
         TimelineFigure(inputs.timeline, "timeline.svg",
                        "Measured (timeline.svg): each stage's compute spans, and its bubble "
                        "measured against the simulator's") +
         TimelineFigure(inputs.timeline_simulated, "timeline_simulated.svg",
                        "Simulated (timeline_simulated.svg): the same schedule with the cost "
                        "model's FLOPs as durations, scaled to the measured step's length") +
         "</section>\n";
}

std::string ConfigPanel(const std::optional<json>& report) {
  std::string html = "<section id=\"config\"><h2>Config</h2>\n";
  if (!report || !report->contains("config")) {
    return html + NotYet("the run report", "not given (baton report DIR --report FILE)") +
           "</section>\n";
  }
  return html + "<pre>" +
         XmlEscape((*report)["config"].dump(2, ' ', false, json::error_handler_t::replace)) +
         "</pre></section>\n";
}

// A value as text: a string without its quotes, a fraction to 6 significant digits, anything
// else as JSON.
std::string ValueText(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_float()) return fmt::format("{:.6g}", value.get<double>());
  return value.dump();
}

// A few figures at the top: the last step logged, its losses, the report's totals.
std::string SummaryTable(const std::optional<Metrics>& metrics, const std::optional<json>& report) {
  std::vector<std::pair<std::string, std::string>> rows;
  if (metrics && !metrics->lines.empty()) {
    const json& last = metrics->lines.back();
    rows.emplace_back("last step logged", ValueText(last["step"]));
    for (const char* key : {"loss", "time"}) {
      if (last.contains(key)) rows.emplace_back(key, ValueText(last[key]));
    }
    for (auto it = metrics->lines.rbegin(); it != metrics->lines.rend(); ++it) {
      if (!it->contains("eval_loss")) continue;
      rows.emplace_back("last eval loss", fmt::format("{} (step {})", ValueText((*it)["eval_loss"]),
                                                      ValueText((*it)["step"])));
      break;
    }
  }
  if (report) {
    for (const char* key : {"schedule", "tokens_per_s", "param_checksum"}) {
      if (report->contains(key)) rows.emplace_back(key, ValueText((*report)[key]));
    }
  }
  std::string html = "<table id=\"summary\">\n";
  for (const auto& [name, value] : rows) {
    html += "<tr><td>" + XmlEscape(name) + "</td><td>" + XmlEscape(value) + "</td></tr>\n";
  }
  return html + "</table>\n";
}

// metrics.jsonl's path, for messages.
std::string MetricsName(const RunPageInputs& inputs) {
  return (std::filesystem::path(inputs.dir) / "metrics.jsonl").string();
}

// The report's file, for messages.
std::string ReportName(const RunPageInputs& inputs) {
  return inputs.report_path.empty() ? std::string("the run report") : inputs.report_path;
}

}  // namespace

RunPageInputs ReadRunPageInputs(const std::string& dir, const std::string& report_path) {
  namespace fs = std::filesystem;
  std::error_code error;
  BATON_CHECK(fs::is_directory(dir, error), "{}: not a folder (baton report OUTPUT_DIR)", dir);
  RunPageInputs inputs;
  inputs.dir = dir;
  const auto read = [&](const char* name) -> std::optional<std::string> {
    const std::string path = (fs::path(dir) / name).string();
    if (!fs::exists(path, error)) return std::nullopt;
    return ReadFileToString(path);
  };
  inputs.metrics = read("metrics.jsonl");
  inputs.timeline = read("timeline.svg");
  inputs.timeline_simulated = read("timeline_simulated.svg");
  // The run's own copy (kRunReportName) unless another report is named.
  const std::string own = (fs::path(dir) / kRunReportName).string();
  const std::string path = !report_path.empty() ? report_path : fs::exists(own, error) ? own : "";
  if (!path.empty()) {
    json report = json::parse(ReadFileToString(path), nullptr, false);
    BATON_CHECK(report.is_object(), "{}: not a run report (a JSON object)", path);
    inputs.report = std::move(report);
    inputs.report_path = path;
  }
  BATON_CHECK(inputs.metrics || inputs.timeline || inputs.timeline_simulated || inputs.report,
              "{} holds no metrics.jsonl, timeline.svg or timeline_simulated.svg: not a run's "
              "output.dir, or its run has not finished a step yet",
              dir);
  return inputs;
}

std::string RenderRunPage(const RunPageInputs& inputs) {
  std::optional<Metrics> metrics;
  if (inputs.metrics) metrics = ParseMetrics(*inputs.metrics, MetricsName(inputs));
  const ReportStages stages = CheckReportStages(inputs.report, ReportName(inputs));
  const std::string title = "Baton run: " + inputs.dir;
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
         XmlEscape(title) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n<h1>" +
         XmlEscape(title) + "</h1>\n" + SummaryTable(metrics, inputs.report) +
         CurvesPanel(metrics) + MemoryPanel(metrics, stages) + TimelinePanel(inputs) +
         ConfigPanel(inputs.report) + "</body>\n</html>\n";
}

std::vector<std::string> RunPageWarnings(const RunPageInputs& inputs) {
  std::vector<std::string> warnings;
  if (inputs.metrics) warnings = ParseMetrics(*inputs.metrics, MetricsName(inputs)).mistyped;
  for (std::string& problem : CheckReportStages(inputs.report, ReportName(inputs)).mistyped) {
    warnings.push_back(std::move(problem));
  }
  return warnings;
}

std::string WriteRunPage(const RunPageInputs& inputs) {
  const std::string path = (std::filesystem::path(inputs.dir) / "report.html").string();
  WriteFileAtomically(path, RenderRunPage(inputs));
  return path;
}

int ReportCommand(const std::string& dir, const std::string& report_path, std::ostream& out) {
  const RunPageInputs inputs = ReadRunPageInputs(dir, report_path);
  for (const std::string& warning : RunPageWarnings(inputs)) {
    spdlog::warn("skipped: {}", warning);
  }
  const std::string path = WriteRunPage(inputs);
  out << "wrote " << path << "\n";
  return 0;
}

}  // namespace baton
