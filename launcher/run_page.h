// The run page: `output.dir/report.html`, one self-contained HTML file (inline SVG drawn here, no
// script, no network) with a run's curves, its memory by stage, its timelines and its config
// (docs/outputs.md, "report.html").
//
// Written at the end of every `baton run` (launcher/run.cc) and by `baton report OUTPUT_DIR` at
// any time, also while the run trains: the page draws what the folder holds, and a panel whose
// file is not there yet says so.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace baton {

// What the page is drawn from; nullopt: the file is not there (yet).
struct RunPageInputs {
  std::string dir;                                // the output.dir, for the heading
  std::optional<std::string> metrics;             // metrics.jsonl's text
  std::optional<nlohmann::json> report;           // the run report (launcher/report.h BuildReport)
  std::string report_path;                        // the report's file, for messages ("" if none)
  std::optional<std::string> timeline;            // timeline.svg: the measured last step
  std::optional<std::string> timeline_simulated;  // timeline_simulated.svg: the simulator's
};

// The copy of its report every finished `baton run` leaves in output.dir.
inline constexpr const char* kRunReportName = "report.json";

// Reads what `dir` holds: metrics.jsonl, timeline.svg, timeline_simulated.svg, and the report from
// `report_path`, or when that is empty from dir/report.json if there is one (the page is drawn
// without the report otherwise). Throws when
// `dir` is not a folder, when it holds none of the three files and there is no report, or when a
// file that is there cannot be read or the report is not JSON.
RunPageInputs ReadRunPageInputs(const std::string& dir, const std::string& report_path);

// The page. Every value from the inputs is escaped; metrics.jsonl lines that do not parse (a line
// being written) are skipped, and the count shown. So are metrics.jsonl lines and the report's
// stages[] entries with a value of the wrong type where the page reads one (a string `attempt`,
// a `stage` that is not an integer), each named with its file, line and key path.
std::string RenderRunPage(const RunPageInputs& inputs);

// The messages for what RenderRunPage skips for a value of the wrong type, in file order:
// "DIR/metrics.jsonl line 7: attempt is a string, not an integer", "DIR/report.json:
// stages[1].stage is a string, not an integer". Never a value's bytes.
std::vector<std::string> RunPageWarnings(const RunPageInputs& inputs);

// Writes RenderRunPage(inputs) to `inputs.dir`/report.html atomically; returns the path.
std::string WriteRunPage(const RunPageInputs& inputs);

// `baton report OUTPUT_DIR [--report FILE]`: reads, warns (spdlog) for each of RunPageWarnings,
// writes the page, prints its path on `out`.
int ReportCommand(const std::string& dir, const std::string& report_path, std::ostream& out);

}  // namespace baton
