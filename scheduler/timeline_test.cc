#include "scheduler/timeline.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "scheduler/communication.h"
#include "scheduler/generators.h"

namespace baton {
namespace {

size_t Count(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

size_t ComputeActions(const SimulationResult& result) {
  size_t count = 0;
  for (const auto& timeline : result.timeline) count += timeline.size();
  return count;
}

TEST(TimelineTest, TextGridHasARowPerStageWithTimeToTheRight) {
  const Schedule schedule = InsertCommunication(GPipe(2, 2));
  const std::string text = RenderText(schedule, Simulate(schedule));
  EXPECT_EQ(
      text,
      "schedule gpipe: 2 stages, 2 micro-batches, 1 chunk(s) per stage; makespan 9 cost units, "
      "bubble fraction 0.333333 (33.33%)\n"
      "time      0              5\n"
      "stage 0   F0 F1 .  .  .  B0--- B1---\n"
      "stage 1   .  F0 F1 B0--- B1--- .  .\n"
      "(one cell = 1 time unit(s); '.' = idle)\n"
      "\n"
      "stage  busy        idle        peak_in_flight\n"
      "0      6           3           2\n"
      "1      6           3           2\n");
}

TEST(TimelineTest, TextGridNamesLaterChunksByVirtualStage) {
  const Schedule schedule = Interleaved1F1B(2, 2, 2);
  const std::string text = RenderText(schedule, Simulate(schedule));
  EXPECT_NE(text.find("2F0"), std::string::npos) << text;
  EXPECT_NE(text.find("3B1"), std::string::npos) << text;
  EXPECT_NE(text.find("e.g. 3F1 = virtual stage 3's forward of micro-batch 1"), std::string::npos)
      << text;  // the legend, under more than one chunk only
}

TEST(TimelineTest, JsonHasExactlyTheDocumentedFields) {
  const Schedule schedule = OneFOneB(4, 8);
  const SimulationResult result = Simulate(schedule);
  const auto json = nlohmann::ordered_json::parse(RenderJson(schedule, result));
  std::vector<std::string> keys;
  for (const auto& [key, value] : json.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"schedule", "stages", "microbatches", "makespan",
                                            "bubble_fraction", "per_stage"}));
  EXPECT_EQ(json["schedule"], "1f1b");
  EXPECT_EQ(json["stages"], 4);
  EXPECT_EQ(json["microbatches"], 8);
  EXPECT_EQ(json["makespan"].get<double>(), 33);
  EXPECT_DOUBLE_EQ(json["bubble_fraction"].get<double>(), 3.0 / 11);
  ASSERT_EQ(json["per_stage"].size(), 4u);
  for (int s = 0; s < 4; ++s) {
    const auto& stage = json["per_stage"][s];
    std::vector<std::string> stage_keys;
    for (const auto& [key, value] : stage.items()) stage_keys.push_back(key);
    EXPECT_EQ(stage_keys, (std::vector<std::string>{"stage", "busy", "idle", "peak_in_flight"}));
    EXPECT_EQ(stage["stage"], s);
    EXPECT_EQ(stage["busy"].get<double>(), 24);
    EXPECT_EQ(stage["idle"].get<double>(), 9);
    EXPECT_EQ(stage["peak_in_flight"], 4 - s);
  }
}

TEST(TimelineTest, SvgIsAStandaloneDocumentWithABoxPerComputeAction) {
  const Schedule schedule = ZeroBubbleH1(3, 4);
  const SimulationResult result = Simulate(schedule);
  const std::string svg = RenderSvg(schedule, result);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(Count(svg, "<g>"), ComputeActions(result));
  EXPECT_EQ(Count(svg, "</g>"), ComputeActions(result));
  EXPECT_EQ(Count(svg, "<text"), Count(svg, "</text>"));
  EXPECT_NE(svg.find("bubble fraction"), std::string::npos);
  EXPECT_NE(svg.find("time (cost units)"), std::string::npos);  // the axis says its unit
  // A viewBox as large as the picture, so that a page can scale it to its width.
  const std::string width = svg.substr(svg.find("width=\"") + 7);
  const std::string height = svg.substr(svg.find("height=\"") + 8);
  EXPECT_NE(svg.find("viewBox=\"0 0 " + width.substr(0, width.find('"')) + " " +
                     height.substr(0, height.find('"')) + "\""),
            std::string::npos);
  for (const char* legend : {"F forward", "B backward", "I backward-input", "W backward-weight"}) {
    EXPECT_NE(svg.find(legend), std::string::npos) << legend;
  }
  EXPECT_NE(svg.find("#f58518"), std::string::npos);  // I boxes are drawn in their color
  EXPECT_NE(svg.find("<title>W3 chunk 0"), std::string::npos);
}

TEST(TimelineTest, SvgEscapesTheScheduleName) {
  Schedule schedule = GPipe(1, 1);
  schedule.name = "a<b&c";
  const std::string svg = RenderSvg(schedule, Simulate(schedule));
  EXPECT_NE(svg.find("a&lt;b&amp;c"), std::string::npos);
  EXPECT_EQ(svg.find("a<b"), std::string::npos);
}

TEST(TimelineTest, ChromeTraceHasACompleteEventPerComputeAction) {
  const Schedule schedule = InsertCommunication(Interleaved1F1B(2, 3, 2));
  const SimulationResult result = Simulate(schedule);
  const auto trace = nlohmann::json::parse(RenderChromeTrace(schedule, result));
  ASSERT_TRUE(trace["traceEvents"].is_array());
  size_t complete = 0;
  size_t metadata = 0;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "M") {
      ++metadata;
      continue;
    }
    ASSERT_EQ(event["ph"], "X");
    const int rank = event["pid"];
    EXPECT_EQ(event["tid"], rank);
    const auto& args = event["args"];
    EXPECT_EQ(args["virtual_stage"].get<int>(), args["chunk"].get<int>() * 2 + rank);
    EXPECT_GE(event["dur"].get<double>(), 1000);
    ++complete;
  }
  EXPECT_EQ(complete, ComputeActions(result));
  EXPECT_EQ(metadata, 2u);
  const auto& first = trace["traceEvents"][1];
  EXPECT_EQ(first["name"], ToString(result.timeline[0][0].action, 2, ChunkLayout::kLoop));
  EXPECT_EQ(first["ts"].get<double>(), result.timeline[0][0].start * 1000);
  EXPECT_EQ(first["cat"], "forward");
  EXPECT_DOUBLE_EQ(trace["otherData"]["bubble_fraction"].get<double>(), result.bubble_fraction);
}

}  // namespace
}  // namespace baton
