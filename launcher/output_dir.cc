#include "launcher/output_dir.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "core/error.h"

namespace baton {

namespace fs = std::filesystem;

namespace {

// The files a run writes at the top of output.dir (docs/outputs.md), in the order they are named.
constexpr const char* kRunFiles[] = {
    "metrics.jsonl",          "report.json",         "report.html", "trace.json", "timeline.svg",
    "timeline_simulated.svg", "flight_recorder.json"};
constexpr const char* kTensorBoardPrefix = "events.out.tfevents.";

bool HasEntry(const fs::path& folder) {
  std::error_code error;
  if (!fs::is_directory(folder, error)) return false;
  return fs::directory_iterator(folder, error) != fs::directory_iterator();
}

// The entries of checkpoints/ as names, sorted, for the error: "step-100, step-200, latest".
std::string CheckpointEntries(const fs::path& folder) {
  std::vector<std::string> names;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, error)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  constexpr size_t kShown = 4;
  std::string text;
  for (size_t i = 0; i < std::min(names.size(), kShown); ++i) {
    text += (i == 0 ? "" : ", ") + names[i];
  }
  if (names.size() > kShown) text += fmt::format(" and {} more", names.size() - kShown);
  return text;
}

// The event files a run wrote into output.dir/tensorboard/ (regular files, not links).
std::vector<fs::path> TensorBoardFiles(const fs::path& folder) {
  std::vector<fs::path> files;
  std::error_code error;
  if (!fs::is_directory(folder, error)) return files;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, error)) {
    if (entry.path().filename().string().starts_with(kTensorBoardPrefix) &&
        fs::is_regular_file(entry.symlink_status(error))) {
      files.push_back(entry.path());
    }
  }
  return files;
}

void Remove(const fs::path& path) {
  std::error_code error;
  fs::remove_all(path, error);  // a link entry itself, never what it points to
  BATON_CHECK(!error, "--overwrite: cannot remove {}: {}", path.string(), error.message());
}

}  // namespace

std::vector<std::string> RunOutputsIn(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code error;
  if (!fs::is_directory(dir, error)) return found;
  const fs::path root(dir);
  if (HasEntry(root / "checkpoints")) found.push_back("checkpoints/");
  for (const char* name : kRunFiles) {
    // Regular files only: Baton writes no link, and one planted at an output's name is replaced
    // by the run's file (core/files.h), never followed.
    if (fs::is_regular_file(fs::symlink_status(root / name, error))) found.push_back(name);
  }
  if (!TensorBoardFiles(root / "tensorboard").empty()) found.push_back("tensorboard/");
  return found;
}

void ClaimOutputDir(const std::string& dir, bool overwrite) {
  const std::vector<std::string> found = RunOutputsIn(dir);
  if (found.empty()) return;
  const fs::path root(dir);
  if (!overwrite) {
    std::string held = fmt::format("{}", fmt::join(found, ", "));
    if (found.front() == "checkpoints/") {
      held += fmt::format(" (checkpoints: {})", CheckpointEntries(root / "checkpoints"));
    }
    BATON_FAIL(
        "output.dir {} holds another run: {}. A fresh run there would mix its checkpoints and "
        "metrics with that run's. Add --resume auto to continue that run, --overwrite to delete "
        "its outputs and start again, or set output.dir to another folder (docs/outputs.md)",
        dir, held);
  }
  for (const std::string& name : found) {
    if (name == "checkpoints/") {
      // Emptied, not removed: the folder may be a link to another disk on purpose.
      for (const fs::directory_entry& entry : fs::directory_iterator(root / "checkpoints")) {
        Remove(entry.path());
      }
      spdlog::info("--overwrite: emptied {}", (root / name).string());
    } else if (name == "tensorboard/") {
      for (const fs::path& file : TensorBoardFiles(root / "tensorboard")) Remove(file);
      spdlog::info("--overwrite: removed the event files in {}", (root / name).string());
    } else {
      Remove(root / name);
      spdlog::info("--overwrite: removed {}", (root / name).string());
    }
  }
}

}  // namespace baton
