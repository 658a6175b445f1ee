// The foundation's promise: the tiny GPT learns English from /usr/share/common-licenses, and
// `baton generate` shows it; `baton compress --int8` keeps what it learnt in a quarter of the
// bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <regex>
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

  // INT8 weights (baton compress --int8): the blocks' matrices in a quarter of their bytes plus a
  // scale per column, the eval loss within 1% of the f32 model's.
  const std::string int8_dir = dir + "/int8";
  const std::vector<std::string> held_out = {"--set", "data.eval_fraction=0.05", "--set",
                                             "train.eval_batches=4"};
  std::vector<std::string> compress = {"compress", dir, int8_dir, "--int8", "--log-level", "warn"};
  compress.insert(compress.end(), held_out.begin(), held_out.end());
  const CommandResult compressed = RunBaton(compress);
  ASSERT_EQ(compressed.exit_code, 0) << compressed.output;
  std::smatch m;
  const std::string& report_text = compressed.output;
  ASSERT_TRUE(std::regex_search(report_text, m,
                                std::regex(R"(INT8 weights: 16 matrices, (\d+) -> (\d+) bytes)")))
      << report_text;
  const double ratio = std::stod(m[2]) / std::stod(m[1]);
  // C = 128: 12 C^2 codes + 9 C f32 scales per block, against 12 C^2 f32 values.
  EXPECT_DOUBLE_EQ(ratio, (12.0 * 128 * 128 + 4 * 9 * 128) / (4 * 12.0 * 128 * 128));
  ASSERT_TRUE(std::regex_search(report_text, m, std::regex(R"(eval loss: ([0-9.]+) -> ([0-9.]+))")))
      << report_text;
  const double dense_loss = std::stod(m[1]), int8_loss = std::stod(m[2]);
  EXPECT_LT(std::abs(int8_loss - dense_loss) / dense_loss, 0.01) << report_text;
  // The run trained on all of its data: the 5% tail evaluated was seen, and the report says so.
  EXPECT_NE(report_text.find("trained on this eval data (the last 5% of"), std::string::npos)
      << report_text;

  // The INT8 checkpoint evaluates the same, bit for bit, with its weights dequantised as they
  // load (model.weights: dense) or as each GEMM runs (int8, the stored config's).
  auto eval_loss = [&](const std::string& weights) {
    std::vector<std::string> eval = {"eval",  int8_dir + "/config.yaml",  "--resume", int8_dir,
                                     "--set", "model.weights=" + weights, "--json",   "--log-level",
                                     "warn"};
    const CommandResult r = RunBaton(eval);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    // The JSON object is the output's last line.
    const size_t line = r.output.rfind("\n{");
    const nlohmann::json j =
        nlohmann::json::parse(r.output.substr(line == std::string::npos ? 0 : line + 1));
    // An evaluation keeps the weights only: no optimizer state, and each layer's gradients
    // only while it is built, so never more than a fraction of the params.
    EXPECT_EQ(j.at("memory_peak").at("optimizer"), 0) << weights;
    EXPECT_LT(j.at("memory_peak").at("grads"), j.at("memory_peak").at("params")) << weights;
    return j.at("loss").get<double>();
  };
  EXPECT_EQ(eval_loss("int8"), eval_loss("dense"));
  const CommandResult int8_text =
      RunBaton({"generate", int8_dir, "--prompt", "The license", "--tokens", "50", "--seed", "7",
                "--log-level", "warn"});
  EXPECT_EQ(int8_text.exit_code, 0) << int8_text.output;
  EXPECT_NE(int8_text.output.find("The license"), std::string::npos) << int8_text.output;
  EXPECT_EQ(RunBaton({"export", int8_dir, dir + "/hf", "--log-level", "warn"}).exit_code, 0);
  EXPECT_TRUE(std::filesystem::exists(dir + "/hf/model.safetensors"));
  // Pruning after training (--prune 0.5 --pattern 2:4, no fine-tuning): half of every block
  // matrix is zero, stored as the kept half plus a bitmask; the eval loss it costs is printed.
  std::vector<std::string> prune = {"compress",  dir,   dir + "/pruned", "--prune", "0.5",
                                    "--pattern", "2:4", "--log-level",   "warn"};
  prune.insert(prune.end(), held_out.begin(), held_out.end());
  const CommandResult pruned = RunBaton(prune);
  ASSERT_EQ(pruned.exit_code, 0) << pruned.output;
  ASSERT_TRUE(std::regex_search(
      pruned.output, m,
      std::regex(R"(pruned \(2:4\): 16 matrices, 50\.00% zeros, (\d+) -> (\d+) bytes stored)")))
      << pruned.output;
  // Per matrix of n f32 weights: n/2 kept values and an n/8-byte mask, against 4n bytes.
  EXPECT_DOUBLE_EQ(std::stod(m[2]) / std::stod(m[1]), (2.0 + 1.0 / 8) / 4);
  EXPECT_TRUE(std::regex_search(pruned.output, m, std::regex(R"(eval loss: [0-9.]+ -> [0-9.]+)")))
      << pruned.output;

  // Training needs the dense weights and says so.
  const CommandResult train = RunBaton({"run", int8_dir + "/config.yaml", "--resume", int8_dir});
  EXPECT_NE(train.exit_code, 0);
  EXPECT_NE(train.output.find("model.weights: int8 is for inference"), std::string::npos)
      << train.output;
}

}  // namespace
}  // namespace baton::testing
