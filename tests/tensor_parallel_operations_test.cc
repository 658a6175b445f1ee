// Tensor parallelism with real processes over Gloo: P stages x T tensor ranks trains one
// process's losses (to 1e-6 relative: the row-parallel sums change the summation order), its
// checkpoint holds whole tensors, and that checkpoint resumes onto other T and P: T=1 on one
// stage, T=4 on two (8 processes), T=2 with sequence parallelism, and T=2 again, exactly; every
// model.init_from source starts T=2 as it starts T=1.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <string>
#include <vector>

#include "tests/baton_process.h"
#include "tests/run_report.h"

namespace baton::testing {
namespace {

const std::vector<std::string> kSmall = {
    "--set", "model.num_layers=4",   "--set", "model.context=32",
    "--set", "train.batch_size=8",   "--set", "train.micro_batches=4",
    "--set", "train.warmup_steps=2", "--set", "train.log_every=1",
    "--set", "train.steps=8"};

nlohmann::json Train(const std::string& dir, int stages, int tensor,
                     const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = kSmall;
  for (const std::string& s :
       {fmt::format("parallel.stages={}", stages), fmt::format("parallel.tensor={}", tensor)}) {
    args.push_back("--set");
    args.push_back(s);
  }
  args.insert(args.end(), extra.begin(), extra.end());
  return RunAndReport("configs/gpt-tiny.yaml", dir, args);
}

void ExpectNear(const std::vector<double>& expected, const std::vector<double>& losses,
                const std::string& what) {
  ASSERT_EQ(losses.size(), expected.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(losses[i], expected[i], 1e-6 * std::abs(expected[i])) << what << ", step " << i;
  }
}

TEST(TensorParallelOperationsTest, CheckpointsResumeOntoAnyTensorAndStageCount) {
  const std::string root = TempDir("tensor");
  const std::vector<double> one = Losses(Train(root + "/one", 1, 1));
  const nlohmann::json tp = Train(root + "/tp", 2, 2, {"--set", "output.checkpoint_every=4"});
  const std::vector<double> all = Losses(tp);
  ASSERT_EQ(all.size(), 8u);
  ExpectNear(one, all, "P=2 T=2");
  // Each rank's memory as the plan predicted it, the cut matrices halved on both tensor ranks.
  for (const nlohmann::json& stage : tp.at("stages")) {
    EXPECT_EQ(stage.at("memory").at("peak").at("params"),
              stage.at("memory").at("predicted").at("params"));
    EXPECT_EQ(stage.at("memory").at("peak").at("optimizer"),
              stage.at("memory").at("predicted").at("optimizer"));
  }
  // Stages x tensor ranks x replicas: 8 processes on this machine, one process's losses.
  ExpectNear(one, Losses(Train(root + "/ptr", 2, 2, {"--set", "parallel.replicas=2"})),
             "P=2 T=2 R=2");
  const std::vector<double> tail(all.begin() + 4, all.end());
  const std::string checkpoint = root + "/tp/checkpoints/step-4";
  // The same layout resumes exactly; other layouts read the whole tensors and cut their parts.
  EXPECT_EQ(Losses(Train(root + "/again", 2, 2, {"--resume", checkpoint})), tail);
  ExpectNear(tail, Losses(Train(root + "/t1", 1, 1, {"--resume", checkpoint})), "resumed T=1");
  ExpectNear(tail, Losses(Train(root + "/t4", 2, 4, {"--resume", checkpoint})), "resumed T=4");
  ExpectNear(tail,
             Losses(Train(root + "/sp", 1, 2,
                          {"--resume", checkpoint, "--set", "parallel.sequence_parallel=true"})),
             "resumed T=2 with sequence parallelism");
}

// model.init_from onto tensor ranks (StateLayout::InitValues: each rank keeps its part of the
// source's whole tensors, layer by layer): a Baton checkpoint's weights, the GPT-2 folder
// `baton export` makes of them, and a Hugging Face Llama folder transformers wrote start T = 2
// where they start T = 1 (every step's loss to 1e-6 relative), and not where random weights do.
TEST(TensorParallelOperationsTest, ModelInitFromStartsEveryTensorRankFromItsPartOfTheWeights) {
  const std::string root = TempDir("tensor-init");
  Train(root + "/source", 1, 1, {"--set", "train.steps=2", "--set", "output.checkpoint_every=2"});
  const std::string checkpoint = root + "/source/checkpoints/step-2";
  const CommandResult exported = RunBaton({"export", checkpoint, root + "/gpt2"});
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  const double random_first = Losses(Train(root + "/random", 1, 1)).at(0);
  // The Llama's vocabulary of 96 takes the Mixtral reference's token file.
  const std::vector<std::string> tokens = {"data.path=tests/fixtures/mixtral-train/tokens.bin",
                                           "data.format=bin"};
  const struct {
    std::string config, weights;
    std::vector<std::string> data;
  } sources[] = {{"configs/gpt-tiny.yaml", checkpoint, {}},
                 {"configs/gpt-tiny.yaml", root + "/gpt2", {}},
                 {"configs/llama-tiny.yaml", "tests/fixtures/llama-hf", tokens}};
  for (size_t i = 0; i < std::size(sources); ++i) {
    const auto& [config, weights, data] = sources[i];
    std::vector<std::vector<double>> losses;
    for (const int tensor : {1, 2}) {
      std::vector<std::string> args = kSmall;
      std::vector<std::string> sets = data;
      sets.insert(sets.end(), {"model.init_from=" + weights,
                               fmt::format("parallel.tensor={}", tensor), "parallel.stages=1"});
      for (const std::string& s : sets) {
        args.push_back("--set");
        args.push_back(s);
      }
      const std::string dir = fmt::format("{}/from{}-t{}", root, i, tensor);
      losses.push_back(Losses(RunAndReport(config, dir, args)));
    }
    ASSERT_EQ(losses[0].size(), 8u) << weights;
    EXPECT_NE(losses[0][0], random_first) << weights;
    ExpectNear(losses[0], losses[1], "T=2 from " + weights);
  }
}

}  // namespace
}  // namespace baton::testing
