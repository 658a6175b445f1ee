// output.dir as something hostile may have left it: links planted where `baton run` writes are
// replaced or refused, never written through; timeline files planted for `baton report` reach
// the run page only when they are Baton's own pictures; metrics.jsonl and report.json whose
// values are a rounding apart or of the wrong type still give a page, with named warnings.
// Every case runs the real `baton` binary (docs/outputs.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/baton_process.h"

namespace baton::testing {
namespace {

namespace fs = std::filesystem;

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// A 2-step 1-stage gpt-tiny run into `dir`, with TensorBoard; extra options after.
CommandResult Train(const std::string& dir, const std::string& extra = "") {
  return RunShell("cd '" + SourceDir() + "' && timeout 300 '" + BatonBinary() +
                  "' run configs/gpt-tiny.yaml --set train.steps=2 --set parallel.stages=1"
                  " --set output.tensorboard=true --set output.dir=" +
                  dir + " " + extra);
}

// The files a run writes at output.dir's top, each planted as a link to a file of its own
// outside: none of those files changes, and each output is a regular file of the run's.
TEST(OutputsTest, LinksPlantedInOutputDirAreReplacedNeverWrittenThrough) {
  const std::string root = TempDir("planted-links");
  const std::string out = root + "/o";
  fs::create_directories(out);
  const std::vector<std::string> outputs = {"metrics.jsonl", "report.json",
                                            "report.html",   "trace.json",
                                            "timeline.svg",  "timeline_simulated.svg"};
  for (const std::string& name : outputs) {
    WriteText(root + "/victim-" + name, "precious " + name);
    fs::create_symlink("../victim-" + name, out + "/" + name);
  }
  const CommandResult run = Train(out);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (const std::string& name : outputs) {
    EXPECT_EQ(ReadFile(root + "/victim-" + name), "precious " + name) << name;
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(out + "/" + name))) << name;
  }
  EXPECT_NE(ReadFile(out + "/metrics.jsonl").find("\"step\":2"), std::string::npos);

  // A resumed run appends to metrics.jsonl: a link planted there now is refused, naming it.
  fs::remove(out + "/metrics.jsonl");
  fs::create_symlink("../victim-metrics.jsonl", out + "/metrics.jsonl");
  const CommandResult resumed = Train(out, "--set train.steps=3 --resume " + out + "/checkpoints");
  EXPECT_NE(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find(out + "/metrics.jsonl: is a symbolic link"), std::string::npos)
      << resumed.output;
  EXPECT_EQ(ReadFile(root + "/victim-metrics.jsonl"), "precious metrics.jsonl");
}

// A fresh run into the folder of another is refused before any worker starts, touching nothing;
// --resume auto continues that run, --overwrite replaces it (docs/outputs.md, "One run per
// folder").
TEST(OutputsTest, AFreshRunIntoAnotherRunsFolderIsRefusedUnlessResumedOrOverwritten) {
  const std::string out = TempDir("used-output-dir") + "/o";
  ASSERT_EQ(Train(out).exit_code, 0);
  const std::string metrics = ReadFile(out + "/metrics.jsonl");
  const CommandResult again = Train(out);
  EXPECT_NE(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("output.dir " + out +
                              " holds another run: checkpoints/, "
                              "metrics.jsonl, report.json, report.html, trace.json"),
            std::string::npos)
      << again.output;
  EXPECT_NE(again.output.find("(checkpoints: latest, step-2)"), std::string::npos) << again.output;
  EXPECT_FALSE(AnyWorkerLogged(again.output)) << again.output;
  EXPECT_EQ(ReadFile(out + "/metrics.jsonl"), metrics);
  EXPECT_TRUE(fs::exists(out + "/checkpoints/step-2"));

  const CommandResult resumed = Train(out, "--set train.steps=3 --resume auto");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(ReadFile(out + "/metrics.jsonl").find("\"step\":3"), std::string::npos);

  const CommandResult both = Train(out, "--overwrite --resume auto");
  EXPECT_NE(both.exit_code, 0) << both.output;
  EXPECT_NE(both.output.find("--overwrite starts a run afresh"), std::string::npos) << both.output;

  const CommandResult overwritten = Train(out, "--overwrite --set train.steps=1");
  ASSERT_EQ(overwritten.exit_code, 0) << overwritten.output;
  EXPECT_NE(overwritten.output.find("--overwrite: emptied " + out + "/checkpoints/"),
            std::string::npos)
      << overwritten.output;
  EXPECT_TRUE(fs::exists(out + "/checkpoints/step-1"));
  EXPECT_FALSE(fs::exists(out + "/checkpoints/step-2"));
  EXPECT_FALSE(fs::exists(out + "/checkpoints/step-3"));
  const std::string fresh = ReadFile(out + "/metrics.jsonl");
  EXPECT_EQ(std::count(fresh.begin(), fresh.end(), '\n'), 1) << fresh;
  EXPECT_EQ(fresh.find("\"step\":2"), std::string::npos) << fresh;
}

// What a trial against the old denylist got through (issue 56): the repro from the issue for
// each, on a copy of a real run's folder. The page never carries the payload, says the file is
// not shown, and still places the run's own timeline_simulated.svg as it is.
TEST(OutputsTest, OnlyBatonsOwnTimelinesReachTheRunPage) {
  const std::string root = TempDir("timeline-payloads");
  const std::string out = root + "/out";
  const CommandResult run = Train(out);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string page = ReadFile(out + "/report.html");
  for (const char* name : {"timeline.svg", "timeline_simulated.svg"}) {
    const std::string svg = ReadFile(out + "/" + name);
    ASSERT_NE(svg.find("<svg"), std::string::npos) << name;
    EXPECT_NE(page.find(svg.substr(0, svg.rfind("</svg>") + 6)), std::string::npos) << name;
  }
  const std::string simulated = ReadFile(out + "/timeline_simulated.svg");
  const std::string ns = " xmlns=\"http://www.w3.org/2000/svg\"";
  // (payload, what must not reach the page)
  const std::vector<std::pair<std::string, std::string>> payloads = {
      {"<svg/onload=\"alert(1)\"" + ns + "></svg>", "onload"},
      {"<svg" + ns + "><a href=\"javascript&#58;alert(1)\"><text>x</text></a></svg>", "&#58;"},
      {"<svg" + ns + "><a xlink:href=\"&#x6a;avascript:alert(1)\"><text>x</text></a></svg>",
       "avascript"},
      {"<svg" + ns + "><animate attributeName=\"href\" values=\"javascript&#x3a;alert(1)\"/></svg>",
       "animate"},
      {"<svg" + ns + "><img/src=\"x\"/onerror=\"alert(1)\"></svg>", "onerror"},
      {"<svg" + ns + "><embed src=\"data:text/html;base64,PHNjcmlwdD4=\"/></svg>", "base64"},
      {"<svg" + ns + "><iframe srcdoc=\"&lt;script&gt;alert(1)&lt;/script&gt;\"></iframe></svg>",
       "srcdoc"},
      {"<svg" + ns + "><image href=\"http://127.0.0.1:9/track.png\"/></svg>", "127.0.0.1"},
      {"<svg" + ns + "><style>@import url(http://127.0.0.1:9/x.css);</style></svg>", "@import"}};
  for (const auto& [payload, marker] : payloads) {
    WriteText(out + "/timeline.svg", payload);
    const CommandResult report = RunBaton({"report", out});
    ASSERT_EQ(report.exit_code, 0) << report.output;
    const std::string planted = ReadFile(out + "/report.html");
    EXPECT_EQ(planted.find(marker), std::string::npos) << payload;
    EXPECT_EQ(planted.find("<script"), std::string::npos) << payload;
    EXPECT_NE(planted.find("timeline.svg: not shown"), std::string::npos) << payload;
    EXPECT_NE(planted.find(simulated.substr(0, simulated.rfind("</svg>") + 6)), std::string::npos)
        << payload;
  }
}

// The repros: values a rounding apart (the tick loop never ended), and mistyped fields
// (a raw type_error.302, no page). Now a page every time; a mistyped line or stage is skipped
// with a warning naming the file, the line or entry, and the key.
TEST(OutputsTest, BatonReportDrawsRoundingApartAndMistypedValues) {
  const std::string dir = TempDir("report-inputs");
  for (const std::string& metrics :
       {std::string("{\"step\":1,\"loss\":1.0}\n{\"step\":2,\"loss\":1.0000000000000002}\n"),
        std::string(
            "{\"step\":1e17,\"loss\":1.0}\n{\"step\":100000000000000016,\"loss\":1.0}\n")}) {
    WriteText(dir + "/metrics.jsonl", metrics);
    const CommandResult report = RunShell("timeout 60 '" + BatonBinary() + "' report " + dir);
    EXPECT_EQ(report.exit_code, 0) << metrics << report.output;
    EXPECT_NE(ReadFile(dir + "/report.html").find("id=\"plot-loss\""), std::string::npos);
  }
  WriteText(dir + "/metrics.jsonl",
            "{\"step\":1,\"loss\":2.0}\n{\"step\":2,\"loss\":1.5,\"attempt\":\"<i>\"}\n");
  WriteText(dir + "/report.json", "{\"stages\":[{\"stage\":\"<b>\"},{\"stage\":1}]}");
  const CommandResult report = RunShell("timeout 60 '" + BatonBinary() + "' report " + dir);
  EXPECT_EQ(report.exit_code, 0) << report.output;
  EXPECT_EQ(report.output.find("type_error"), std::string::npos) << report.output;
  EXPECT_NE(report.output.find(dir + "/metrics.jsonl line 2: attempt is a string, not an integer"),
            std::string::npos)
      << report.output;
  EXPECT_NE(report.output.find(dir + "/report.json: stages[0].stage is a string, not an integer"),
            std::string::npos)
      << report.output;
  const std::string page = ReadFile(dir + "/report.html");
  EXPECT_NE(page.find("1 line(s) with a value of the wrong type were skipped"), std::string::npos);
  EXPECT_EQ(page.find("<i>"), std::string::npos);
  EXPECT_EQ(page.find("<b>"), std::string::npos);
}

// Checkpoint retention: every 2nd step of 7 saved, the newest 2 and every 4th kept; the folders
// left are exactly those, the log names each removal, and --resume auto carries on from the
// newest.
TEST(OutputsTest, KeepCheckpointsLeavesTheNewestAndEveryKthAndResumeAutoCarriesOn) {
  const std::string out = TempDir("keep-checkpoints") + "/o";
  const std::string keep =
      "--set output.checkpoint_every=2 --set output.keep_checkpoints=2 --set output.keep_every=4";
  const CommandResult run = Train(out, "--set train.steps=7 " + keep);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(out + "/checkpoints")) {
    left.push_back(entry.path().filename().string());
  }
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"latest", "step-4", "step-6", "step-7"}));
  EXPECT_NE(run.output.find("checkpoint retention (output.keep_checkpoints 2, keep_every 4): "
                            "removed " +
                            out + "/checkpoints/step-2"),
            std::string::npos)
      << run.output;
  const CommandResult resumed = Train(out, "--set train.steps=9 --resume auto " + keep);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("step-7"), std::string::npos) << resumed.output;
  EXPECT_TRUE(fs::exists(out + "/checkpoints/step-9/manifest.json"));
  EXPECT_FALSE(fs::exists(out + "/checkpoints/step-6"));
  EXPECT_TRUE(fs::exists(out + "/checkpoints/step-4"));
}

}  // namespace
}  // namespace baton::testing
