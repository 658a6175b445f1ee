// A fresh temporary directory ($TMPDIR, else /tmp: PREFIX-XXXXXX), removed with everything in it
// when the object goes, unless Keep() was called or BATON_KEEP_TEST_DIRS=1 is set (to look at a
// failure). The one temp-dir helper of tests and benchmarks.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "core/error.h"

namespace baton {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "baton-test") {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    BATON_CHECK(mkdtemp(pattern.data()) != nullptr, "mkdtemp({}) failed", pattern);
    path_ = pattern;
  }
  ~TempDir() {
    const char* keep = std::getenv("BATON_KEEP_TEST_DIRS");
    if (keep_ || (keep != nullptr && std::string(keep) == "1")) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  // Leaves the directory in place (a benchmark's --keep).
  void Keep() { keep_ = true; }

 private:
  std::string path_;
  bool keep_ = false;
};

namespace test_util {
using baton::TempDir;
}  // namespace test_util

}  // namespace baton
