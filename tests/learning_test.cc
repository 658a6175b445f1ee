// The foundation's promise: the tiny GPT learns English from /usr/share/common-licenses, and
// `baton generate` shows it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "tests/baton_process.h"

namespace baton::testing {
namespace {

// The runs of letters in `text`, lower-cased.
std::vector<std::string> Words(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  for (char c : text + " ") {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!word.empty()) {
      words.push_back(word);
      word.clear();
    }
  }
  return words;
}

TEST(LearningTest, TinyGptStartsNearLn256AndEndsBelow2Point5After300Steps) {
  if (!std::filesystem::exists("/usr/share/common-licenses")) {
    GTEST_SKIP() << "/usr/share/common-licenses is absent";
  }
  const std::string dir = TempDir("learn");
  const std::string report = dir + "/report.json";
  // Two stages use both cores; the numbers are those of one stage (bit-identical).
  const CommandResult result = RunBaton(
      {"run", "configs/gpt-tiny.yaml", "--set", "train.steps=300", "--set", "train.log_every=100",
       "--set", "parallel.stages=2", "--set", "output.dir=" + dir, "--report", report});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const std::vector<double> losses = Losses(ReadJson(report));
  ASSERT_EQ(losses.size(), 300u);
  EXPECT_NEAR(losses.front(), std::log(256.0), 0.3);
  const double last10 = std::accumulate(losses.end() - 10, losses.end(), 0.0) / 10.0;
  EXPECT_LT(last10, 2.5);

  // What it learnt shows in its text: a seed gives the same text every time, and, sampled at a
  // low temperature, most of its words are words of the corpus.
  const std::vector<std::string> generate = {
      "generate",      dir,   "--prompt", "The license",     "--tokens",    "300", "--seed", "7",
      "--temperature", "0.3", "--set",    "device.type=cpu", "--log-level", "warn"};
  const CommandResult text = RunBaton(generate);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_EQ(RunBaton(generate).output, text.output);
  std::set<std::string> corpus;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator("/usr/share/common-licenses")) {
    if (!entry.is_regular_file()) continue;
    for (const std::string& word : Words(ReadFile(entry.path().string()))) corpus.insert(word);
  }
  const std::string sampled = text.output.substr(text.output.rfind("The license"));
  const std::vector<std::string> words = Words(sampled);
  ASSERT_GE(words.size(), 20u) << sampled;
  const auto known = std::count_if(words.begin(), words.end(),
                                   [&](const std::string& w) { return corpus.count(w) > 0; });
  // 0.72 measured (loss about 2.4 after 300 steps: at temperature 0.8 only about a fifth are).
  EXPECT_GT(static_cast<double>(known) / static_cast<double>(words.size()), 0.5) << sampled;
}

}  // namespace
}  // namespace baton::testing
