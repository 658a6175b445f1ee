// Checkpoint retention (CheckpointWriter::Prune, output.keep_checkpoints / keep_every): which step
// folders go and which stay, on folders made by hand (a manifest.json marks a complete one).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_manifest.h"
#include "core/temp_dir.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

// A step folder under `root`; with a manifest it is complete.
void MakeStep(const fs::path& root, int64_t step, bool complete) {
  const fs::path dir = root / StepDirName(step);
  fs::create_directories(dir);
  std::ofstream(dir / "layer-0.safetensors") << "bytes";
  if (complete) std::ofstream(dir / kManifestFileName) << "{}";
}

std::set<std::string> Left(const fs::path& root) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(root))
    names.insert(entry.path().filename().string());
  return names;
}

TEST(RetentionTest, KeepsTheNewestCompleteAndTheMultiplesAndRemovesTheRest) {
  test_util::TempDir dir;
  const fs::path root = dir.path();
  // Complete 5, 10, 15, 20, 25; an interrupted save at 12 and at 22 (between the two kept); a
  // later run's step 30 (this one resumed from an earlier step).
  for (int64_t step : {5, 10, 15, 20, 25, 30}) MakeStep(root, step, true);
  for (int64_t step : {12, 22}) MakeStep(root, step, false);
  std::ofstream(root / kLatestFileName) << "step-25\n";
  const CheckpointWriter writer(root.string());
  EXPECT_TRUE(writer.Prune(25, 0, 10).empty());  // 0: keep everything
  EXPECT_EQ(Left(root).size(), 9u);

  const std::vector<std::string> removed = writer.Prune(25, 2, 10);
  EXPECT_EQ(std::set<std::string>(removed.begin(), removed.end()),
            (std::set<std::string>{(root / "step-15").string(), (root / "step-12").string(),
                                   (root / "step-5").string()}));
  EXPECT_EQ(Left(root), (std::set<std::string>{"latest", "step-10", "step-20", "step-22", "step-25",
                                               "step-30"}));
  // Without keep_every, step 10 goes too; twice changes nothing more.
  writer.Prune(25, 2, 0);
  EXPECT_EQ(Left(root),
            (std::set<std::string>{"latest", "step-20", "step-22", "step-25", "step-30"}));
  EXPECT_TRUE(writer.Prune(25, 2, 0).empty());
}

TEST(RetentionTest, AStepFolderThatIsALinkIsRemovedAsALink) {
  test_util::TempDir dir;
  const fs::path root = fs::path(dir.path()) / "checkpoints";
  const fs::path elsewhere = fs::path(dir.path()) / "elsewhere";
  fs::create_directories(root);
  MakeStep(elsewhere, 3, true);  // another disk's copy of step 3, linked in
  fs::create_directory_symlink(elsewhere / "step-3", root / "step-3");
  MakeStep(root, 6, true);
  MakeStep(root, 9, true);
  EXPECT_EQ(CheckpointWriter(root.string()).Prune(9, 1, 0).size(), 2u);
  EXPECT_EQ(Left(root), (std::set<std::string>{"step-9"}));
  EXPECT_TRUE(fs::exists(elsewhere / "step-3" / kManifestFileName));
}

}  // namespace
}  // namespace baton
