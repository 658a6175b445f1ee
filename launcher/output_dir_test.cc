// One run per output.dir (launcher/output_dir.h): what counts as a run's outputs, the refusal
// that names them, and --overwrite's removal, which leaves every other file and never follows a
// link. tests/outputs_test.cc runs the same through `baton run`.
#include "launcher/output_dir.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/temp_dir.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

void Touch(const std::string& path) { std::ofstream(path) << "x"; }

TEST(OutputDirTest, AFolderWithoutARunsOutputsIsFree) {
  TempDir dir;
  EXPECT_TRUE(RunOutputsIn(dir / "missing").empty());
  EXPECT_NO_THROW(ClaimOutputDir(dir / "missing", /*overwrite=*/false));
  fs::create_directories(dir / "checkpoints");  // empty: a run that never checkpointed
  fs::create_directories(dir / "tensorboard");
  Touch(dir / "tensorboard/README");
  Touch(dir / "notes.txt");
  Touch(dir / "config.yaml");
  EXPECT_TRUE(RunOutputsIn(dir.path()).empty());
  EXPECT_NO_THROW(ClaimOutputDir(dir.path(), /*overwrite=*/false));
}

TEST(OutputDirTest, AnotherRunIsRefusedNamingWhatIsThereAndTheWaysOn) {
  TempDir dir;
  fs::create_directories(dir / "checkpoints/step-100");
  fs::create_directories(dir / "checkpoints/step-300");
  Touch(dir / "checkpoints/latest");
  Touch(dir / "metrics.jsonl");
  fs::create_directories(dir / "tensorboard");
  Touch(dir / "tensorboard/events.out.tfevents.1.host.2.0");
  Touch(dir / "report.html");
  EXPECT_EQ(RunOutputsIn(dir.path()), (std::vector<std::string>{"checkpoints/", "metrics.jsonl",
                                                                "report.html", "tensorboard/"}));
  try {
    ClaimOutputDir(dir.path(), /*overwrite=*/false);
    FAIL() << "a used output.dir was accepted";
  } catch (const Error& e) {
    const std::string text = e.what();
    for (const std::string& part :
         {"output.dir " + dir.path() + " holds another run: checkpoints/, metrics.jsonl",
          std::string("(checkpoints: latest, step-100, step-300)"), std::string("--resume auto"),
          std::string("--overwrite"), std::string("another folder")}) {
      EXPECT_NE(text.find(part), std::string::npos) << part << " in " << text;
    }
  }
  // Refused means untouched.
  EXPECT_TRUE(fs::exists(dir / "checkpoints/step-300"));
  EXPECT_TRUE(fs::exists(dir / "metrics.jsonl"));
}

TEST(OutputDirTest, OverwriteRemovesTheRunsOutputsOnlyAndFollowsNoLink) {
  TempDir dir;
  TempDir elsewhere;
  // checkpoints/ is a link to another disk: emptied, kept as the link.
  fs::create_directories(elsewhere / "disk");
  fs::create_directory_symlink(elsewhere / "disk", dir / "checkpoints");
  fs::create_directories(dir / "checkpoints/step-3");
  Touch(dir / "checkpoints/step-3/manifest.json");
  // A link planted at report.json is no run's output: it stays, and so does its target (the
  // run's report replaces the link, never writing through it: core/files.h).
  Touch(elsewhere / "precious.json");
  fs::create_symlink(elsewhere / "precious.json", dir / "report.json");
  Touch(dir / "metrics.jsonl");
  Touch(dir / "trace.json");
  Touch(dir / "notes.txt");
  fs::create_directories(dir / "tensorboard");
  Touch(dir / "tensorboard/events.out.tfevents.1.host.2.0");
  Touch(dir / "tensorboard/README");
  ClaimOutputDir(dir.path(), /*overwrite=*/true);
  EXPECT_TRUE(RunOutputsIn(dir.path()).empty());
  EXPECT_TRUE(fs::is_symlink(dir / "checkpoints"));
  EXPECT_TRUE(fs::is_empty(elsewhere / "disk"));
  EXPECT_TRUE(fs::is_symlink(dir / "report.json"));
  EXPECT_TRUE(fs::exists(elsewhere / "precious.json"));
  EXPECT_TRUE(fs::exists(dir / "notes.txt"));
  EXPECT_TRUE(fs::exists(dir / "tensorboard/README"));
  EXPECT_NO_THROW(ClaimOutputDir(dir.path(), /*overwrite=*/false));
}

}  // namespace
}  // namespace baton
