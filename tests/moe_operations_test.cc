// A mixture of experts against an independent implementation, with real processes: the tiny
// Mixtral transformers wrote (tests/fixtures/mixtral-hf) as configs/mixtral-tiny.yaml's
// model.init_from, trained 20 steps on the tokens and with the settings transformers trained it
// with (tests/fixtures/mixtral-train, make_mixtral_train_reference.py).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/baton_process.h"
#include "tests/run_report.h"

namespace baton::testing {
namespace {

const std::string kFixtures = std::string(BATON_SOURCE_DIR) + "/tests/fixtures";

struct Layout {
  int stages, replicas, experts;
  const char* schedule;
};

std::string Name(const Layout& l) {
  return fmt::format("P={} R={} E={} {}", l.stages, l.replicas, l.experts, l.schedule);
}

// Every step's loss within 1e-4 relative of transformers' (AdamW, the same batches by
// docs/data.md's sampling rule, the router's load-balancing loss per layer), on one process and
// on 2 replicas with the experts whole or split over them (parallel.experts 2: the all-to-all) on
// 1 and 2 stages, under 1F1B and DualPipeV; the runs on 2 replicas end with one checksum (expert
// parallelism and the stage count change no bit). The launcher takes the experts from config.json
// over the YAML's (8 experts of 176 there, 4 of 24 in the folder).
TEST(MoeOperationsTest, ATinyMixtralTrainsAsTransformersTrainsItOnEveryLayoutOfStagesAndExperts) {
  const nlohmann::json reference = ReadJson(kFixtures + "/mixtral-train/reference.json");
  const auto expected = reference.at("losses").get<std::vector<double>>();
  ASSERT_EQ(expected.size(), 20u);
  std::vector<std::string> args = {"--set", "model.init_from=" + kFixtures + "/mixtral-hf",
                                   "--set", "data.path=" + kFixtures + "/mixtral-train/tokens.bin",
                                   "--set", "data.format=bin",
                                   "--set", "train.log_every=1"};
  for (const auto& [key, value] : reference.at("settings").items()) {
    args.push_back("--set");
    args.push_back(key + "=" + (value.is_string() ? value.get<std::string>() : value.dump()));
  }
  const std::string root = TempDir("mixtral-reference");
  std::string replicas_checksum;
  for (const Layout& layout :
       {Layout{1, 1, 1, "1f1b"}, Layout{1, 2, 1, "1f1b"}, Layout{1, 2, 2, "1f1b"},
        Layout{2, 2, 2, "1f1b"}, Layout{2, 2, 2, "dualpipev"}}) {
    std::vector<std::string> run = args;
    for (const std::string& s : {fmt::format("parallel.stages={}", layout.stages),
                                 fmt::format("parallel.replicas={}", layout.replicas),
                                 fmt::format("parallel.experts={}", layout.experts),
                                 fmt::format("parallel.schedule={}", layout.schedule)}) {
      run.push_back("--set");
      run.push_back(s);
    }
    const std::string dir = fmt::format("{}/p{}r{}e{}{}", root, layout.stages, layout.replicas,
                                        layout.experts, layout.schedule);
    const nlohmann::json report = RunAndReport("configs/mixtral-tiny.yaml", dir, run);
    const std::vector<double> losses = Losses(report);
    ASSERT_EQ(losses.size(), expected.size()) << Name(layout);
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_NEAR(losses[i], expected[i], 1e-4 * std::abs(expected[i]))
          << Name(layout) << ", step " << i + 1;
    }
    if (layout.replicas == 2) {
      const std::string checksum = report.at("param_checksum").get<std::string>();
      if (replicas_checksum.empty()) replicas_checksum = checksum;
      EXPECT_EQ(checksum, replicas_checksum) << Name(layout);
    }
  }
}

}  // namespace
}  // namespace baton::testing
