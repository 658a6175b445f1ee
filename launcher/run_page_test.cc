// The run page (report.html) from a synthetic output.dir: every panel's SVG holds one point per
// logged value and one bar segment per stage and category, restarts start new series, values
// stay text, and missing files are named instead of failing.
#include "launcher/run_page.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "core/temp_dir.h"
#include "launcher/svg_plot.h"

namespace baton {
namespace {

using nlohmann::json;

// clang-format off
json Peaks(int64_t mib_per_category) {
  const int64_t mib = 1 << 20;
  return {{"params", 1 * mib_per_category * mib}, {"grads", 2 * mib_per_category * mib},
          {"optimizer", 3 * mib_per_category * mib}, {"activations", 4 * mib_per_category * mib},
          {"comm", 5 * mib_per_category * mib}, {"workspace", 6 * mib_per_category * mib},
          {"total", 15 * mib_per_category * mib}};
}
// clang-format on

json Line(int64_t step, int attempt) {
  json j = {{"step", step},
            {"attempt", attempt},
            {"loss", 5.0 - 0.25 * static_cast<double>(step)},
            {"lr", 1e-3},
            {"grad_norm", 0.5},
            {"tokens_per_s", 1000.0 + static_cast<double>(step)},
            {"elapsed_s", static_cast<double>(step + 10 * attempt)},
            {"memory_peak", {{"stage0", Peaks(2)}, {"stage1", Peaks(1)}}}};
  if (step % 3 == 0) j["eval_loss"] = 4.5 - 0.25 * static_cast<double>(step);
  return j;
}

// Attempt 0 runs steps 1-6 (step 2's grad norm not finite: null), attempt 1 restarts from a
// step-3 checkpoint and runs 4-8; the last line is being written.
std::string Metrics() {
  std::string text;
  for (int64_t step = 1; step <= 6; ++step) {
    json line = Line(step, 0);
    if (step == 2) line["grad_norm"] = nullptr;
    text += line.dump() + "\n";
  }
  for (int64_t step = 4; step <= 8; ++step) text += Line(step, 1).dump() + "\n";
  return text + "{\"step\": 9, \"lo";
}

json Report() {
  json stages = json::array();
  for (int stage = 0; stage < 2; ++stage) {
    stages.push_back(
        {{"stage", stage}, {"memory", {{"peak", Peaks(stage + 1)}, {"predicted", Peaks(2)}}}});
  }
  return {{"schedule", "1f1b"},
          {"config", {{"data", {{"path", "<script>alert('x')</script> & more"}}}}},
          {"stages", stages}};
}

// The <svg> element with this id, or "" when the page has none.
std::string SvgById(const std::string& page, const std::string& id) {
  const size_t start = page.find("<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"" + id + "\"");
  if (start == std::string::npos) return "";
  return page.substr(start, page.find("</svg>", start) + 6 - start);
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The number of points of the polyline labelled `label` (-1 when there is none).
int PolylinePoints(const std::string& svg, const std::string& label) {
  const std::regex polyline("<polyline class=\"series\" data-label=\"" + label +
                            "\"[^>]*points=\"([^\"]*)\"");
  std::smatch match;
  if (!std::regex_search(svg, match, polyline)) return -1;
  return Count(match[1].str(), ",");
}

// The heights of the bar segments of one group, bar and category.
double BarHeight(const std::string& svg, const std::string& group, const std::string& bar,
                 const std::string& category) {
  const std::regex rect("<rect class=\"bar\" data-group=\"" + group + "\" data-bar=\"" + bar +
                        "\" data-category=\"" + category + "\"[^>]*height=\"([0-9.]+)\"");
  std::smatch match;
  if (!std::regex_search(svg, match, rect)) return -1;
  return std::stod(match[1].str());
}

RunPageInputs Inputs() {
  RunPageInputs inputs;
  inputs.dir = "out/synthetic";
  inputs.metrics = Metrics();
  inputs.report = Report();
  return inputs;
}

TEST(RunPage, EveryCurveHasOnePointPerLoggedValueAndARestartStartsNewSeries) {
  const std::string page = RenderRunPage(Inputs());
  const std::string loss = SvgById(page, "plot-loss");
  ASSERT_FALSE(loss.empty());
  EXPECT_EQ(PolylinePoints(loss, "loss, steps 1-6"), 6);
  EXPECT_EQ(PolylinePoints(loss, "loss, steps 4-8 \\(attempt 1\\)"), 5);
  EXPECT_EQ(PolylinePoints(loss, "eval loss, steps 1-6"), 2);  // steps 3 and 6
  EXPECT_EQ(PolylinePoints(loss, "eval loss, steps 4-8 \\(attempt 1\\)"), 1);
  EXPECT_EQ(Count(loss, "class=\"marker\""), 3);
  EXPECT_EQ(Count(loss, "class=\"restart\""), 1);
  EXPECT_EQ(Count(loss, ">restart 1</text>"), 1);
  const std::string grad_norm = SvgById(page, "plot-grad-norm");
  EXPECT_EQ(PolylinePoints(grad_norm, "grad norm, steps 1-6"), 5);  // step 2's null left out
  for (const char* id : {"plot-lr", "plot-tokens-per-s"}) {
    EXPECT_EQ(Count(SvgById(page, id), "<polyline"), 2) << id;
  }
  EXPECT_NE(page.find("1 line(s) that did not parse were skipped"), std::string::npos);
}

// Mixture of experts: one curve per MoE layer of its busiest expert over the mean; no plot
// without experts.
TEST(RunPage, ExpertLoadIsOneCurvePerMoeLayer) {
  EXPECT_TRUE(SvgById(RenderRunPage(Inputs()), "plot-expert-load").empty());
  std::string text;
  for (int64_t step = 1; step <= 4; ++step) {
    json line = Line(step, 0);
    line["experts"] = {{"block.1", {{"max_over_mean", 1.0 + 0.1 * static_cast<double>(step)}}},
                       {"block.3", {{"max_over_mean", 1.5}}}};
    if (step == 2) line["experts"]["block.3"]["max_over_mean"] = "high";  // skipped, not drawn
    text += line.dump() + "\n";
  }
  RunPageInputs inputs = Inputs();
  inputs.metrics = text;
  const std::string plot = SvgById(RenderRunPage(inputs), "plot-expert-load");
  EXPECT_EQ(PolylinePoints(plot, "block.1"), 4);
  EXPECT_EQ(PolylinePoints(plot, "block.3"), 3);
}

TEST(RunPage, AResumedRunStartsANewPartWhereItsElapsedTimeStartsOver) {
  RunPageInputs inputs;
  inputs.dir = "out/resumed";
  inputs.metrics = "";
  for (int64_t step = 1; step <= 6; ++step) {
    json line = Line(step, 0);
    if (step > 4) line["elapsed_s"] = static_cast<double>(step - 4) / 8;  // `--resume` at 4
    *inputs.metrics += line.dump() + "\n";
  }
  const std::string loss = SvgById(RenderRunPage(inputs), "plot-loss");
  EXPECT_EQ(PolylinePoints(loss, "loss, steps 1-4"), 4);
  EXPECT_EQ(PolylinePoints(loss, "loss, steps 5-6"), 2);
  EXPECT_EQ(Count(loss, ">resumed</text>"), 1);
}

TEST(RunPage, MemoryStacksEveryCategoryMeasuredBesidePredictedPerStage) {
  const std::string memory = SvgById(RenderRunPage(Inputs()), "plot-memory");
  ASSERT_FALSE(memory.empty());
  EXPECT_EQ(Count(memory, "<rect class=\"bar\""), 2 * 2 * 6);
  EXPECT_EQ(Count(memory, "class=\"total\""), 2 * 2);
  // Heights follow the bytes: stage 1 measured twice stage 0's, workspace six times params.
  const double params = BarHeight(memory, "stage 0", "measured", "params");
  ASSERT_GT(params, 0);
  EXPECT_NEAR(BarHeight(memory, "stage 1", "measured", "params"), 2 * params, 0.2);
  EXPECT_NEAR(BarHeight(memory, "stage 0", "measured", "workspace"), 6 * params, 0.2);
  EXPECT_NEAR(BarHeight(memory, "stage 0", "predicted", "params"), 2 * params, 0.2);
}

TEST(RunPage, WithoutTheReportMemoryIsTheLastStepsMeasuredPeaks) {
  RunPageInputs inputs = Inputs();
  inputs.report.reset();
  const std::string page = RenderRunPage(inputs);
  const std::string memory = SvgById(page, "plot-memory");
  EXPECT_EQ(Count(memory, "<rect class=\"bar\""), 2 * 6);
  EXPECT_EQ(Count(memory, "data-bar=\"predicted\""), 0);
  EXPECT_NEAR(BarHeight(memory, "stage0", "measured", "params"),
              2 * BarHeight(memory, "stage1", "measured", "params"), 0.2);
  EXPECT_NE(page.find("after step 8"), std::string::npos);
  EXPECT_NE(page.find("the run report: not given"), std::string::npos);
}

TEST(RunPage, ConfigValuesStayText) {
  const std::string page = RenderRunPage(Inputs());
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_NE(page.find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; more"),
            std::string::npos);
}

TEST(RunPage, TimelineSvgsAreInlinedOnlyWhenMadeOfWhatBatonsTimelinesUse) {
  RunPageInputs inputs = Inputs();
  inputs.timeline = "<svg width=\"10\">\n<rect x=\"1\" fill=\"#4c78a8\"/></svg>\n";
  inputs.timeline_simulated = "<svg><rect onload=\"alert(1)\"/></svg>";
  std::string page = RenderRunPage(inputs);
  EXPECT_NE(page.find("<svg width=\"10\">\n<rect x=\"1\" fill=\"#4c78a8\"/></svg>"),
            std::string::npos);
  EXPECT_EQ(page.find("onload"), std::string::npos);
  EXPECT_NE(page.find("timeline_simulated.svg: not shown"), std::string::npos);
  // An element Baton's timelines never use: not shown, and the reason names where.
  inputs.timeline = "<svg><rect id=\"measured\"/></svg>";
  page = RenderRunPage(inputs);
  EXPECT_EQ(page.find("id=\"measured\""), std::string::npos);
  EXPECT_NE(page.find("timeline.svg: not shown: not one of Baton&#39;s timeline pictures (byte 11: "
                      "an attribute Baton&#39;s timeline pictures do not use)"),
            std::string::npos)
      << page;
}

// metrics.jsonl lines with a value of the wrong type where the page reads one are skipped and
// counted as lines that do not parse are, each named with its file, line and key; so are the
// report's stages. The page is drawn from the rest.
TEST(RunPage, MistypedValuesSkipTheirLineOrStageNamingFileLineAndKey) {
  RunPageInputs inputs = Inputs();
  std::string text;
  for (int64_t step = 1; step <= 4; ++step) {
    json line = Line(step, 0);
    if (step == 2) line["attempt"] = "<i>";
    if (step == 3) line["memory_peak"]["stage1"]["params"] = json::array();
    text += line.dump() + "\n";
  }
  inputs.metrics = text;
  (*inputs.report)["stages"][0]["stage"] = "zero";
  inputs.report_path = "out/synthetic/report.json";
  const std::string page = RenderRunPage(inputs);
  EXPECT_EQ(PolylinePoints(SvgById(page, "plot-loss"), "loss"), 2);
  EXPECT_NE(page.find("2 line(s) with a value of the wrong type were skipped "
                      "(out/synthetic/metrics.jsonl line 2: attempt is a string, not an integer; "
                      "out/synthetic/metrics.jsonl line 3: memory_peak.stage1.params is an array, "
                      "not a number)"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("1 stage(s) with a value of the wrong type were skipped "
                      "(out/synthetic/report.json: stages[0].stage is a string, not an integer)"),
            std::string::npos)
      << page;
  EXPECT_EQ(Count(SvgById(page, "plot-memory"), "data-group=\"stage 1\""), 2 * 6);
  EXPECT_EQ(page.find("<i>"), std::string::npos);
  EXPECT_EQ(RunPageWarnings(inputs),
            (std::vector<std::string>{
                "out/synthetic/metrics.jsonl line 2: attempt is a string, not an integer",
                "out/synthetic/metrics.jsonl line 3: memory_peak.stage1.params is an array, not a "
                "number",
                "out/synthetic/report.json: stages[0].stage is a string, not an integer"}));
}

// Every key the page reads, mistyped in turn: never an exception, always a named skip.
TEST(RunPage, NoMistypedValueThrows) {
  const std::vector<std::pair<std::string, json>> metrics_values = {
      {"step", "1"},
      {"attempt", 1.5},
      {"elapsed_s", "x"},
      {"time", 3},
      {"loss", "x"},
      {"eval_loss", json::object()},
      {"lr", true},
      {"grad_norm", "x"},
      {"tokens_per_s", json::array()},
      {"memory_peak", 7},
      {"memory_peak", {{"stage0", 1}}}};
  for (const auto& [key, value] : metrics_values) {
    RunPageInputs inputs = Inputs();
    json line = Line(1, 0);
    line[key] = value;
    inputs.metrics = line.dump() + "\n";
    std::string page;
    EXPECT_NO_THROW(page = RenderRunPage(inputs)) << key;
    EXPECT_NE(page.find("metrics.jsonl line 1: " + key), std::string::npos) << key << page;
  }
  const std::vector<json> reports = {
      {{"stages", "x"}},
      {{"stages", {1}}},
      {{"stages", {{{"stage", 0}, {"replica", "r"}}}}},
      {{"stages", {{{"stage", 0}, {"memory", 1}}}}},
      {{"stages", {{{"stage", 0}, {"memory", {{"peak", "p"}}}}}}},
      {{"stages", {{{"stage", 0}, {"memory", {{"predicted", {{"params", "1"}}}}}}}}}};
  for (const json& report : reports) {
    RunPageInputs inputs = Inputs();
    inputs.report = report;
    std::string page;
    EXPECT_NO_THROW(page = RenderRunPage(inputs)) << report.dump();
    EXPECT_EQ(RunPageWarnings(inputs).size(), 1u) << report.dump();
    EXPECT_NE(page.find("the run report: stages"), std::string::npos) << report.dump() << page;
  }
}

// Loss values a rounding apart (1 and the next double) or steps beyond 2^53 a few apart: the
// page is drawn, with a handful of ticks (the tick loop once counted in doubles past 2^53 and
// never ended).
TEST(RunPage, ValuesARoundingApartDrawWithFewTicks) {
  for (const std::string& text :
       {std::string("{\"step\":1,\"loss\":1.0}\n{\"step\":2,\"loss\":1.0000000000000002}\n"),
        std::string(
            "{\"step\":1e17,\"loss\":1.0}\n{\"step\":100000000000000016,\"loss\":2.0}\n")}) {
    RunPageInputs inputs;
    inputs.dir = "out/rounding";
    inputs.metrics = text;
    const std::string loss = SvgById(RenderRunPage(inputs), "plot-loss");
    EXPECT_EQ(PolylinePoints(loss, "loss"), 2) << text;
    EXPECT_LE(Count(loss, "text-anchor=\"middle\">"), 20) << text;
  }
}

TEST(RunPage, MissingFilesAreNamedAndAnEmptyFolderIsAnError) {
  TempDir dir("run-page");
  EXPECT_THROW(ReadRunPageInputs(dir.path(), ""), Error);
  EXPECT_THROW(ReadRunPageInputs(dir / "absent", ""), Error);
  std::ofstream(dir / "metrics.jsonl") << Metrics();
  const RunPageInputs inputs = ReadRunPageInputs(dir.path(), "");
  ASSERT_TRUE(inputs.metrics.has_value());
  EXPECT_FALSE(inputs.timeline.has_value());
  const std::string path = WriteRunPage(inputs);
  std::ifstream in(path);
  const std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("timeline.svg: not yet written"), std::string::npos);
  EXPECT_NE(page.find("timeline_simulated.svg: not yet written"), std::string::npos);
  EXPECT_FALSE(SvgById(page, "plot-loss").empty());
  // A report that is not JSON is an error, not a page without it.
  std::ofstream(dir / "report.json") << "{\"steps\": [";
  EXPECT_THROW(ReadRunPageInputs(dir.path(), dir / "report.json"), Error);
}

TEST(RunPage, TheRunsOwnReportJsonIsReadUnlessAnotherIsNamed) {
  TempDir dir("run-page");
  std::ofstream(dir / "metrics.jsonl") << Metrics();
  EXPECT_FALSE(ReadRunPageInputs(dir.path(), "").report.has_value());
  std::ofstream(dir / kRunReportName) << json{{"schedule", "own"}}.dump();
  std::ofstream(dir / "other.json") << json{{"schedule", "other"}}.dump();
  const RunPageInputs own = ReadRunPageInputs(dir.path(), "");
  ASSERT_TRUE(own.report.has_value());
  EXPECT_EQ((*own.report)["schedule"], "own");
  EXPECT_EQ((*ReadRunPageInputs(dir.path(), dir / "other.json").report)["schedule"], "other");
}

TEST(SvgPlot, NiceTicksCoverTheRangeInRoundSteps) {
  const std::pair<double, double> ranges[] = {{1, 300}, {0.0001, 0.001}, {2.31, 5.67}, {7, 7}};
  for (const auto& [low, high] : ranges) {
    const std::vector<double> ticks = NiceTicks(low, high, 5);
    ASSERT_GE(ticks.size(), 3u) << low;
    EXPECT_LE(ticks.front(), low);
    EXPECT_GE(ticks.back(), high);
    EXPECT_LE(ticks.size(), 12u);
    const double step = ticks[1] - ticks[0];
    const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
    EXPECT_TRUE(std::abs(mantissa - 1) < 1e-6 || std::abs(mantissa - 2) < 1e-6 ||
                std::abs(mantissa - 5) < 1e-6)
        << step;
  }
  EXPECT_EQ(TickLabel(0.001), "0.001");
  EXPECT_EQ(TickLabel(250), "250");
}

// Bounded for any input: a span below the values' rounding, beyond 2^53, overflowing, underflowing
// or not finite gives a few distinct finite ticks in order.
TEST(SvgPlot, NiceTicksAreFewAndFiniteForAnyInput) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const double kNan = std::nan("");
  const double kMax = std::numeric_limits<double>::max();
  const double kTiny = std::numeric_limits<double>::denorm_min();
  const std::pair<double, double> ranges[] = {{1.0, 1.0000000000000002},
                                              {1e17, 1e17 + 16},
                                              {9007199254740992.0, 9007199254740994.0},
                                              {-kMax, kMax},
                                              {0, kMax},
                                              {kMax, kMax},
                                              {0, kTiny},
                                              {-kTiny, kTiny},
                                              {kInf, -kInf},
                                              {kNan, 1},
                                              {1, kNan},
                                              {kNan, kNan},
                                              {-kInf, 3},
                                              {5, 2}};
  for (const auto& [low, high] : ranges) {
    const std::vector<double> ticks = NiceTicks(low, high, 5);
    ASSERT_GE(ticks.size(), 2u) << low << " " << high;
    EXPECT_LE(ticks.size(), 10u) << low << " " << high;
    for (size_t i = 0; i < ticks.size(); ++i) {
      EXPECT_TRUE(std::isfinite(ticks[i])) << low << " " << high;
      if (i > 0) {
        EXPECT_LT(ticks[i - 1], ticks[i]) << low << " " << high;
      }
    }
  }
}

}  // namespace
}  // namespace baton
