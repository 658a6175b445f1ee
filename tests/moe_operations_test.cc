// Mixtures of experts against an independent implementation, with real processes: the tiny
// Mixtral and Qwen3-MoE transformers wrote (tests/fixtures/mixtral-hf, qwen3-moe-hf) as
// configs/mixtral-tiny.yaml's and configs/qwen3-moe-tiny.yaml's model.init_from, trained 20 steps
// on the tokens and with the settings transformers trained them with (tests/fixtures/
// mixtral-train, qwen3-moe-train: make_mixtral_train_reference.py); with the experts whole,
// split over expert groups or folded over tensor ranks.
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
  int tensor = 1;
};

std::string Name(const Layout& l) {
  return fmt::format("P={} R={} E={} T={} {}", l.stages, l.replicas, l.experts, l.tensor,
                     l.schedule);
}

// A reference's settings and model.init_from as `--set` flags (the tokens: mixtral-train's).
std::vector<std::string> ReferenceArgs(const nlohmann::json& reference, const std::string& folder) {
  std::vector<std::string> args = {"--set", "model.init_from=" + kFixtures + "/" + folder,
                                   "--set", "data.path=" + kFixtures + "/mixtral-train/tokens.bin",
                                   "--set", "data.format=bin",
                                   "--set", "train.log_every=1"};
  for (const auto& [key, value] : reference.at("settings").items()) {
    args.push_back("--set");
    args.push_back(key + "=" + (value.is_string() ? value.get<std::string>() : value.dump()));
  }
  return args;
}

// Every step's loss of `config` started from `folder` within 1e-4 relative of transformers'
// training in tests/fixtures/TRAIN/reference.json, on each layout; the layouts on 2 replicas end
// with one checksum (expert parallelism and the stage count change no bit).
void ExpectTransformersLosses(const std::string& config, const std::string& folder,
                              const std::string& train, const std::vector<Layout>& layouts) {
  const nlohmann::json reference = ReadJson(kFixtures + "/" + train + "/reference.json");
  const auto expected = reference.at("losses").get<std::vector<double>>();
  ASSERT_EQ(expected.size(), 20u);
  const std::string root = TempDir(train);
  std::string replicas_checksum;
  for (const Layout& layout : layouts) {
    std::vector<std::string> run = ReferenceArgs(reference, folder);
    for (const std::string& s : {fmt::format("parallel.stages={}", layout.stages),
                                 fmt::format("parallel.replicas={}", layout.replicas),
                                 fmt::format("parallel.experts={}", layout.experts),
                                 fmt::format("parallel.schedule={}", layout.schedule),
                                 fmt::format("parallel.tensor={}", layout.tensor)}) {
      run.push_back("--set");
      run.push_back(s);
    }
    const std::string dir = fmt::format("{}/p{}r{}e{}t{}{}", root, layout.stages, layout.replicas,
                                        layout.experts, layout.tensor, layout.schedule);
    const nlohmann::json report = RunAndReport(config, dir, run);
    const std::vector<double> losses = Losses(report);
    ASSERT_EQ(losses.size(), expected.size()) << train << " " << Name(layout);
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_NEAR(losses[i], expected[i], 1e-4 * std::abs(expected[i]))
          << train << " " << Name(layout) << ", step " << i + 1;
    }
    if (layout.replicas == 2 && layout.tensor == 1) {  // tensor ranks sum in another order
      const std::string checksum = report.at("param_checksum").get<std::string>();
      if (replicas_checksum.empty()) replicas_checksum = checksum;
      EXPECT_EQ(checksum, replicas_checksum) << train << " " << Name(layout);
    }
  }
}

// The tiny Mixtral (AdamW, the same batches by docs/data.md's sampling rule, the router's
// load-balancing loss per layer) on one process and on 2 replicas with the experts whole or split
// over them (parallel.experts 2: the all-to-all) on 1 and 2 stages, under 1F1B and DualPipeV,
// with them folded over 2 tensor ranks of 2 stages (each rank reading its experts' shards), and
// with each tensor rank's fold split over 2 replicas (one expert per process). The
// launcher takes the experts from config.json over the YAML's (8 experts of 176 there, 4 of 24 in
// the folder).
TEST(MoeOperationsTest, ATinyMixtralTrainsAsTransformersTrainsItOnEveryLayoutOfStagesAndExperts) {
  ExpectTransformersLosses("configs/mixtral-tiny.yaml", "mixtral-hf", "mixtral-train",
                           {{1, 1, 1, "1f1b"},
                            {1, 2, 1, "1f1b"},
                            {1, 2, 2, "1f1b"},
                            {2, 2, 2, "1f1b"},
                            {2, 2, 2, "dualpipev"},
                            {2, 1, 1, "1f1b", 2},
                            {1, 2, 2, "1f1b", 2}});
}

// The tiny Qwen3-MoE (q/k norms, its own head size, renormalised top-2 routing) the same way on
// one process and with its experts split over 2 replicas of 2 stages under DualPipeV.
TEST(MoeOperationsTest, ATinyQwen3MoeTrainsAsTransformersTrainsIt) {
  ExpectTransformersLosses("configs/qwen3-moe-tiny.yaml", "qwen3-moe-hf", "qwen3-moe-train",
                           {{1, 1, 1, "1f1b"}, {2, 2, 2, "dualpipev"}});
}

}  // namespace
}  // namespace baton::testing
