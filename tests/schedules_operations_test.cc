// The zero-bubble and V-shaped schedules with real processes over Gloo: each trains the bits of
// 1F1B, a checkpoint written under one schedule resumes exactly under another (checkpoints are
// per layer: the chunk layout is not in them), and `baton eval` on a V cut, where stage 0 holds
// the embedding and the head, gives one stage's loss.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/baton_process.h"
#include "tests/run_report.h"

namespace baton::testing {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kSmall = {
    "--set", "model.num_layers=4",    "--set", "train.batch_size=8",
    "--set", "train.micro_batches=8", "--set", "train.warmup_steps=2",
    "--set", "train.log_every=1"};

nlohmann::json Train(const std::string& dir, const std::vector<std::string>& extra) {
  std::vector<std::string> args = kSmall;
  args.insert(args.end(), extra.begin(), extra.end());
  return RunAndReport("configs/gpt-tiny.yaml", dir, args);
}

TEST(ScheduleOperationsTest, EveryScheduleTrainsTheBitsOf1F1BAndResumesAcrossSchedules) {
  const std::string root = TempDir("schedules");
  const nlohmann::json reference =
      Train(root + "/1f1b", {"--set", "train.steps=12", "--set", "parallel.stages=2", "--set",
                             "output.checkpoint_every=6"});
  const std::vector<double> all = Losses(reference);
  ASSERT_EQ(all.size(), 12u);
  // interleaved-zb without parallel.chunks: it runs 2, as the V schedules do.
  for (const char* schedule : {"zb-v", "dualpipev", "zb-h2", "v-half", "v-min", "interleaved-zb"}) {
    const nlohmann::json run =
        Train(root + "/" + schedule, {"--set", "train.steps=12", "--set", "parallel.stages=2",
                                      "--set", std::string("parallel.schedule=") + schedule});
    EXPECT_EQ(Losses(run), all) << schedule;
    EXPECT_EQ(run.at("param_checksum"), reference.at("param_checksum")) << schedule;
  }
  // The 1F1B checkpoint of step 6 resumes under a V schedule, and under looped BFS on 3 stages.
  for (const std::vector<std::string>& resume : std::vector<std::vector<std::string>>{
           {"--set", "parallel.stages=2", "--set", "parallel.schedule=zb-v"},
           {"--set", "parallel.stages=3", "--set", "parallel.schedule=looped-bfs", "--set",
            "parallel.chunks=2"}}) {
    std::vector<std::string> args = {"--set", "train.steps=12", "--resume",
                                     root + "/1f1b/checkpoints/step-6"};
    args.insert(args.end(), resume.begin(), resume.end());
    const nlohmann::json resumed = Train(root + "/resumed-" + resume[3], args);
    EXPECT_EQ(Losses(resumed), std::vector<double>(all.begin() + 6, all.end())) << resume[3];
    EXPECT_EQ(resumed.at("param_checksum"), reference.at("param_checksum")) << resume[3];
  }
  // Evaluation on the V cut: stage 0 runs the embedding and the head.
  std::string losses[2];
  for (int v : {0, 1}) {
    std::vector<std::string> args = {"eval",     "configs/gpt-tiny.yaml",
                                     "--resume", root + "/1f1b/checkpoints/step-6",
                                     "--set",    "data.eval_fraction=0.01"};
    args.insert(args.end(), kSmall.begin(), kSmall.end());
    if (v == 1) {
      for (const char* more : {"--set", "parallel.stages=2", "--set", "parallel.schedule=zb-v"}) {
        args.push_back(more);
      }
    }
    const CommandResult eval = RunBaton(args);
    ASSERT_EQ(eval.exit_code, 0) << eval.output;
    const size_t at = eval.output.find("eval loss ");
    ASSERT_NE(at, std::string::npos) << eval.output;
    losses[v] = eval.output.substr(at, 20);
  }
  EXPECT_EQ(losses[0], losses[1]);
}

}  // namespace
}  // namespace baton::testing
