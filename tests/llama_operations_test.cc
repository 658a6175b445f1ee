// A Llama model (configs/llama-tiny.yaml) through the operator's commands with real processes:
// resume onto other stage counts exactly, evaluation on every cut, greedy generation with and
// without the key-value cache, a file of prompts decoded as one batch, and an INT8 compressed
// checkpoint that still generates.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "checkpoint/safetensors.h"
#include "tests/baton_process.h"
#include "tests/run_report.h"

namespace baton::testing {
namespace {

namespace fs = std::filesystem;

// Small enough to train 20 steps in seconds on one core per stage.
const std::vector<std::string> kSmall = {
    "--set", "model.num_layers=4", "--set", "model.width=64",       "--set", "model.context=64",
    "--set", "train.batch_size=8", "--set", "train.warmup_steps=2", "--set", "train.log_every=1"};

nlohmann::json TrainLlama(const std::string& dir, const std::vector<std::string>& extra) {
  std::vector<std::string> args = kSmall;
  args.insert(args.end(), extra.begin(), extra.end());
  return RunAndReport("configs/llama-tiny.yaml", dir, args);
}

TEST(LlamaOperationsTest, TwentyStepsEqualTenThenResumeTenOntoAnotherStageCount) {
  const std::string root = TempDir("llama-resume");
  const nlohmann::json straight =
      TrainLlama(root + "/straight", {"--set", "train.steps=20", "--set", "parallel.stages=2"});
  TrainLlama(root + "/first", {"--set", "train.steps=20", "--set", "parallel.stages=2", "--set",
                               "output.checkpoint_every=10"});
  ASSERT_TRUE(fs::exists(root + "/first/checkpoints/step-10/manifest.json"));
  const std::vector<double> all = Losses(straight);
  ASSERT_EQ(all.size(), 20u);
  EXPECT_LT(all.back(), all.front());
  for (const char* stages : {"parallel.stages=4", "parallel.stages=1"}) {
    const nlohmann::json resumed =
        TrainLlama(root + "/resumed", {"--set", "train.steps=20", "--set", stages, "--resume",
                                       root + "/first/checkpoints/step-10"});
    EXPECT_EQ(Losses(resumed), std::vector<double>(all.begin() + 10, all.end())) << stages;
    EXPECT_EQ(resumed.at("param_checksum"), straight.at("param_checksum")) << stages;
  }
}

// DeepSeek-V3's aux-loss-free router (model.moe.router sigmoid_bias, configs/moe-tiny.yaml made
// small): the per-expert routing bias moves every step, the checkpoint keeps it beside the router
// (and `baton compress` keeps it), and a run resumed from it onto one stage continues bit for bit
// (the checksum covers the bias), onto two replicas (whose bias moves by the loads of both) within
// rounding, as replicas do.
TEST(LlamaOperationsTest, ASigmoidBiasRouterKeepsItsBiasInCheckpointsAndResumesExactly) {
  const std::string root = TempDir("moe-sigmoid-bias");
  const auto train = [&](const std::string& dir, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"--set", "model.num_layers=3",
                                     "--set", "model.width=64",
                                     "--set", "model.context=32",
                                     "--set", "model.moe.num_experts=4",
                                     "--set", "model.moe.router=sigmoid_bias",
                                     "--set", "model.moe.aux_loss_coef=0",
                                     "--set", "model.moe.bias_update_rate=0.01",
                                     "--set", "train.batch_size=8",
                                     "--set", "train.warmup_steps=2",
                                     "--set", "train.log_every=1",
                                     "--set", "train.steps=8"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunAndReport("configs/moe-tiny.yaml", dir, args);
  };
  const nlohmann::json straight = train(
      root + "/straight", {"--set", "parallel.stages=2", "--set", "output.checkpoint_every=4"});
  const std::string step4 = root + "/straight/checkpoints/step-4";
  ASSERT_TRUE(fs::exists(step4 + "/manifest.json"));
  // Graph layer 2 is block 1, the first with experts: its bias, 4 steps of +-0.01 or 0 each.
  const auto stored_bias = [](const std::string& step_dir) {
    const SafetensorsFile file = SafetensorsFile::Open(step_dir + "/layer-2.safetensors");
    const SafetensorsEntry& entry = file.Get("h.1.mlp.router.expert_bias");
    EXPECT_EQ(entry.dtype, "F32");
    EXPECT_EQ(entry.shape, Shape{4});
    std::vector<float> bias(4);
    std::memcpy(bias.data(), file.Bytes(entry).data(), sizeof(float) * bias.size());
    return bias;
  };
  const std::vector<float> bias = stored_bias(step4);
  EXPECT_TRUE(std::any_of(bias.begin(), bias.end(), [](float b) { return b != 0.0f; }))
      << fmt::format("{}", fmt::join(bias, ", "));
  for (float b : bias) EXPECT_LE(std::abs(b), 0.04f + 1e-6f);
  // A low-rank compression (attention's matrices) keeps it, and what it writes generates.
  const CommandResult compressed =
      RunBaton({"compress", step4, root + "/low-rank", "--low-rank", "8", "--no-eval"});
  ASSERT_EQ(compressed.exit_code, 0) << compressed.output;
  EXPECT_EQ(stored_bias(root + "/low-rank/checkpoints/step-4"), bias);
  const CommandResult generated =
      RunBaton({"generate", root + "/low-rank", "--prompt", "The ", "--tokens", "4"});
  EXPECT_EQ(generated.exit_code, 0) << generated.output;

  const std::vector<double> all = Losses(straight);
  ASSERT_EQ(all.size(), 8u);
  const nlohmann::json one =
      train(root + "/one", {"--set", "parallel.stages=1", "--resume", step4});
  EXPECT_EQ(Losses(one), std::vector<double>(all.begin() + 4, all.end()));
  EXPECT_EQ(one.at("param_checksum"), straight.at("param_checksum"));
  const nlohmann::json replicas =
      train(root + "/replicas",
            {"--set", "parallel.stages=1", "--set", "parallel.replicas=2", "--resume", step4});
  const std::vector<double> resumed = Losses(replicas);
  ASSERT_EQ(resumed.size(), 4u);
  for (size_t i = 0; i < resumed.size(); ++i) {
    EXPECT_NEAR(resumed[i], all[4 + i], 1e-5 * all[4 + i]) << "step " << 5 + i;
  }
}

// configs/moe-tiny.yaml made small (3 blocks of width 64, 4 experts), 4 steps of a batch of 8,
// a checkpoint after step 2, with `extra`: the report of its run in `dir`.
nlohmann::json TrainSmallMoe(const std::string& dir, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {
      "--set", "model.num_layers=3",       "--set", "model.width=64",
      "--set", "model.context=32",         "--set", "model.moe.num_experts=4",
      "--set", "train.batch_size=8",       "--set", "train.warmup_steps=2",
      "--set", "train.log_every=1",        "--set", "train.steps=4",
      "--set", "output.checkpoint_every=2"};
  args.insert(args.end(), extra.begin(), extra.end());
  return RunAndReport("configs/moe-tiny.yaml", dir, args);
}

// Expert parallelism in real processes (configs/moe-tiny.yaml made small, two replicas, two
// stages): parallel.experts 2 under 1F1B and DualPipeV trains the bits of the replicas holding
// every expert, its steps report the all-to-all's bytes, and its checkpoint (the experts gathered
// whole) resumes onto E = 1 and one stage as the uninterrupted run continues.
TEST(LlamaOperationsTest, ExpertParallelRunsTrainTheBitsOfWholeExpertsAndResumeOntoAnyLayout) {
  const std::string root = TempDir("moe-experts");
  const auto train = [&](const std::string& dir, std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"--set", "parallel.replicas=2"});
    return TrainSmallMoe(dir, extra);
  };
  const std::vector<std::string> two = {"--set", "parallel.stages=2"};
  const nlohmann::json whole = train(root + "/whole", two);
  std::vector<std::string> split_args = two;
  split_args.insert(split_args.end(), {"--set", "parallel.experts=2"});
  const nlohmann::json split = train(root + "/split", split_args);
  split_args.insert(split_args.end(), {"--set", "parallel.schedule=dualpipev"});
  const nlohmann::json dual = train(root + "/dualpipev", split_args);
  EXPECT_EQ(Losses(split), Losses(whole));
  EXPECT_EQ(split.at("param_checksum"), whole.at("param_checksum"));
  EXPECT_EQ(dual.at("param_checksum"), whole.at("param_checksum"));
  for (const nlohmann::json& step : split.at("steps")) {
    EXPECT_GT(step.value("alltoall_bytes", 0.0), 0.0) << step.dump();
    EXPECT_TRUE(step.contains("alltoall_s")) << step.dump();
  }
  EXPECT_FALSE(whole.at("steps").at(0).contains("alltoall_bytes"));
  const nlohmann::json resumed = train(root + "/resumed", {"--set", "parallel.stages=1", "--resume",
                                                           root + "/split/checkpoints/step-2"});
  const std::vector<double> all = Losses(whole);
  EXPECT_EQ(Losses(resumed), std::vector<double>(all.begin() + 2, all.end()));
  EXPECT_EQ(resumed.at("param_checksum"), whole.at("param_checksum"));
}

// Experts folded over tensor ranks in real processes (2 stages x 2 tensor ranks: each rank holds
// two whole experts and half of the shared expert): one process's losses to 1e-6 relative, and
// its checkpoint holds every expert whole: it resumes onto the same layout exactly, and onto one
// process and onto experts split over two replicas as the tensor run continues (to 1e-6); one
// process's checkpoint resumes onto the tensor ranks likewise.
TEST(LlamaOperationsTest, ExpertsFoldedOverTensorRanksCheckpointWholeAndResumeOntoAnyLayout) {
  const std::string root = TempDir("moe-tensor");
  const auto expect_near = [](const std::vector<double>& expected,
                              const std::vector<double>& losses, const std::string& what) {
    ASSERT_EQ(losses.size(), expected.size()) << what;
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_NEAR(losses[i], expected[i], 1e-6 * std::abs(expected[i])) << what << ", step " << i;
    }
  };
  const std::vector<double> one = Losses(TrainSmallMoe(root + "/one", {}));
  const std::vector<std::string> folded = {"--set", "parallel.stages=2", "--set",
                                           "parallel.tensor=2"};
  const std::vector<double> tp = Losses(TrainSmallMoe(root + "/tp", folded));
  ASSERT_EQ(tp.size(), 4u);
  expect_near(one, tp, "P=2 T=2");
  const auto resume = [&](const std::string& dir, const std::string& from,
                          std::vector<std::string> layout) {
    layout.insert(layout.end(), {"--resume", root + "/" + from + "/checkpoints/step-2"});
    return Losses(TrainSmallMoe(root + "/" + dir, layout));
  };
  const std::vector<double> tp_tail(tp.begin() + 2, tp.end());
  EXPECT_EQ(resume("again", "tp", folded), tp_tail);
  expect_near(tp_tail, resume("t1", "tp", {"--set", "parallel.stages=1"}), "T=2 onto T=1");
  expect_near(tp_tail,
              resume("e2", "tp",
                     {"--set", "parallel.stages=1", "--set", "parallel.replicas=2", "--set",
                      "parallel.experts=2"}),
              "T=2 onto E=2");
  expect_near(std::vector<double>(one.begin() + 2, one.end()), resume("onto-tp", "one", folded),
              "T=1 onto T=2");
}

// Tensor ranks and an expert group at once in real processes (2 tensor ranks x 2 replicas, E = 2:
// each rank's fold of two experts split over its expert group, one expert per process): the bits
// of the same ranks with whole folds (E = 1), the all-to-all's bytes reported; the checkpoint
// holds every expert whole, so E = 2's resumes onto E = 1 and E = 1's onto E = 2 as the
// uninterrupted run continues, bit for bit.
TEST(LlamaOperationsTest, AnExpertGroupInsideTensorRanksTrainsWholeFoldsBitsAndResumesAcross) {
  const std::string root = TempDir("moe-tensor-experts");
  const auto train = [&](const std::string& dir, int experts, std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"--set", "parallel.tensor=2", "--set", "parallel.replicas=2",
                                 "--set", fmt::format("parallel.experts={}", experts)});
    return TrainSmallMoe(root + "/" + dir, extra);
  };
  const nlohmann::json folds = train("folds", 1, {});
  const nlohmann::json split = train("split", 2, {});
  EXPECT_EQ(Losses(split), Losses(folds));
  EXPECT_EQ(split.at("param_checksum"), folds.at("param_checksum"));
  for (const nlohmann::json& step : split.at("steps")) {
    EXPECT_GT(step.value("alltoall_bytes", 0.0), 0.0) << step.dump();
  }
  const std::vector<double> all = Losses(folds);
  const std::vector<double> tail(all.begin() + 2, all.end());
  for (const auto& [dir, experts, from] : std::vector<std::tuple<std::string, int, std::string>>{
           {"onto-folds", 1, "split"}, {"onto-split", 2, "folds"}}) {
    const nlohmann::json resumed =
        train(dir, experts, {"--resume", root + "/" + from + "/checkpoints/step-2"});
    EXPECT_EQ(Losses(resumed), tail) << dir;
    EXPECT_EQ(resumed.at("param_checksum"), folds.at("param_checksum")) << dir;
  }
}

// ZeRO with the experts split over 4 replicas (each member's experts' optimizer state sharded
// over the replicas holding the same experts: two each at E = 2, one at E = 4), with f32 and with
// 8-bit state (runs of whole blocks) under ZeRO-1, and with the E = 2 run under ZeRO-3: E = 2
// trains E = 4's bits, and its checkpoint (every expert's state gathered whole) resumes onto
// E = 4 under ZeRO-1, and E = 4's onto E = 2, to the uninterrupted run's checksum.
TEST(LlamaOperationsTest, ZeroWithSplitExpertsResumesOntoAnotherExpertSplit) {
  // The optimizer state, and the ZeRO level of the E = 2 run (the others' is 1).
  for (const auto& [state, level] :
       std::vector<std::pair<std::string, int>>{{"f32", 1}, {"int8", 1}, {"f32", 3}}) {
    const std::string what = fmt::format("{}, ZeRO-{}", state, level);
    const std::string root = TempDir(fmt::format("moe-zero{}-{}", level, state));
    const auto train = [&](const std::string& dir, std::vector<std::string> extra) {
      extra.insert(extra.begin(),
                   {"--set", "parallel.stages=1", "--set", "parallel.replicas=4", "--set",
                    "parallel.zero=1", "--set", "optimizer.state=" + state});
      return TrainSmallMoe(dir, extra);
    };
    const nlohmann::json four = train(root + "/four", {"--set", "parallel.experts=4"});
    const nlohmann::json two = train(root + "/two", {"--set", "parallel.experts=2", "--set",
                                                     fmt::format("parallel.zero={}", level)});
    EXPECT_EQ(Losses(two), Losses(four)) << what;
    EXPECT_EQ(two.at("param_checksum"), four.at("param_checksum")) << what;
    const nlohmann::json resumed =
        train(root + "/resumed",
              {"--set", "parallel.experts=4", "--resume", root + "/two/checkpoints/step-2"});
    const std::vector<double> all = Losses(four);
    EXPECT_EQ(Losses(resumed), std::vector<double>(all.begin() + 2, all.end())) << what;
    EXPECT_EQ(resumed.at("param_checksum"), four.at("param_checksum")) << what;
    // And E = 4's (each member's experts' state whole on it) onto E = 2.
    const nlohmann::json back = train(root + "/back", {"--set", "parallel.experts=2", "--resume",
                                                       root + "/four/checkpoints/step-2"});
    EXPECT_EQ(Losses(back), std::vector<double>(all.begin() + 2, all.end())) << what;
    EXPECT_EQ(back.at("param_checksum"), four.at("param_checksum")) << what;
  }
}

// 8-bit optimizer state with the experts split over 2 replicas: E = 2 trains E = 1's bits; its
// checkpoint (each member's codes and block maxima made whole) resumes onto E = 1, and E = 1's
// onto E = 2 (each member keeping its experts' blocks), both to the uninterrupted checksum.
TEST(LlamaOperationsTest, EightBitStateWithSplitExpertsResumesAcrossTheSplit) {
  const std::string root = TempDir("moe-int8");
  const auto train = [&](const std::string& dir, std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"--set", "parallel.stages=1", "--set", "parallel.replicas=2",
                                 "--set", "optimizer.state=int8"});
    return TrainSmallMoe(dir, extra);
  };
  const std::vector<std::string> split_experts = {"--set", "parallel.experts=2"};
  const nlohmann::json whole = train(root + "/whole", {});
  const nlohmann::json split = train(root + "/split", split_experts);
  EXPECT_EQ(Losses(split), Losses(whole));
  EXPECT_EQ(split.at("param_checksum"), whole.at("param_checksum"));
  const std::vector<double> all = Losses(whole);
  const std::vector<double> last(all.begin() + 2, all.end());
  const nlohmann::json onto_whole =
      train(root + "/onto-whole", {"--resume", root + "/split/checkpoints/step-2"});
  EXPECT_EQ(Losses(onto_whole), last);
  EXPECT_EQ(onto_whole.at("param_checksum"), whole.at("param_checksum"));
  std::vector<std::string> onto_split_args = split_experts;
  onto_split_args.insert(onto_split_args.end(), {"--resume", root + "/whole/checkpoints/step-2"});
  const nlohmann::json onto_split = train(root + "/onto-split", onto_split_args);
  EXPECT_EQ(Losses(onto_split), last);
  EXPECT_EQ(onto_split.at("param_checksum"), whole.at("param_checksum"));
}

TEST(LlamaOperationsTest, EvalGenerateAndInt8CompressionWork) {
  const std::string root = TempDir("llama-ops");
  TrainLlama(root + "/run", {"--set", "train.steps=20", "--set", "parallel.stages=2"});
  const std::string step = root + "/run/checkpoints/step-20";
  ASSERT_TRUE(fs::exists(step + "/manifest.json"));

  // The same eval loss on one stage and on two.
  std::string losses[2];
  for (int stages : {1, 2}) {
    const CommandResult eval =
        RunBaton({"eval", "configs/llama-tiny.yaml", "--resume", step, "--set",
                  "data.eval_fraction=0.01", "--set", fmt::format("parallel.stages={}", stages),
                  kSmall[0], kSmall[1], kSmall[2], kSmall[3], kSmall[4], kSmall[5]});
    ASSERT_EQ(eval.exit_code, 0) << eval.output;
    const size_t at = eval.output.find("eval loss ");
    ASSERT_NE(at, std::string::npos) << eval.output;
    losses[stages - 1] = eval.output.substr(at, 20);
  }
  EXPECT_EQ(losses[0], losses[1]);

  // Greedy decoding: the key-value cache (rotary positions continuing from its length) gives the
  // text that recomputing the whole window gives.
  const std::vector<std::string> greedy = {"generate", step, "--prompt",      "The ",
                                           "--tokens", "24", "--temperature", "0"};
  const CommandResult cached = RunBaton(greedy);
  std::vector<std::string> plain = greedy;
  plain.push_back("--no-kv-cache");
  const CommandResult recomputed = RunBaton(plain);
  ASSERT_EQ(cached.exit_code, 0) << cached.output;
  ASSERT_EQ(recomputed.exit_code, 0) << recomputed.output;
  const auto text = [](const std::string& output) {
    return output.substr(output.rfind("The "));  // the sample is the last thing printed
  };
  EXPECT_EQ(text(cached.output), text(recomputed.output));
  EXPECT_GE(text(cached.output).size(), 4u + 24u);

  // A file of prompts of different lengths (the last longer than the context of 64, so its row
  // slides while the others do not), decoded three at a time: one JSON line per prompt, each the
  // text that decoding it alone prints (each prompt draws from its own generator), the first
  // what --prompt prints with the same seed.
  const std::string prompts = root + "/prompts.txt";
  const std::string long_prompt(80, 'e');
  std::ofstream(prompts) << "The \n\nIt was the best of times\r\n" << long_prompt << "\n";
  const std::vector<std::string> sampled = {"generate", step, "--prompts",     prompts,
                                            "--tokens", "24", "--temperature", "0.8",
                                            "--seed",   "7",  "--batch"};
  std::vector<std::string> together = sampled, alone = sampled;
  together.push_back("3");
  alone.push_back("1");
  const CommandResult batched = RunBaton(together);
  const CommandResult one_by_one = RunBaton(alone);
  ASSERT_EQ(batched.exit_code, 0) << batched.output;
  ASSERT_EQ(one_by_one.exit_code, 0) << one_by_one.output;
  EXPECT_NE(
      batched.output.find("3 prompts from " + prompts + ": 4 to 80 tokens (bytes), 3 at a time"),
      std::string::npos)
      << batched.output;
  EXPECT_NE(batched.output.find(prompts + ":4: the prompt's 80 tokens exceed the model's context"),
            std::string::npos)
      << batched.output;
  EXPECT_TRUE(std::regex_search(batched.output,
                                std::regex("generated 72 tokens in [0-9.]+ s: [0-9]+ tokens/s "
                                           "\\(3 prompts, 3 at a time; KV cache")))
      << batched.output;
  // The JSON lines: the output's lines that start with {"prompt".
  const auto json_lines = [](const std::string& output) {
    std::vector<nlohmann::json> lines;
    std::istringstream in(output);
    for (std::string line; std::getline(in, line);) {
      if (line.starts_with("{\"prompt\"")) lines.push_back(nlohmann::json::parse(line));
    }
    return lines;
  };
  const std::vector<nlohmann::json> rows = json_lines(batched.output);
  ASSERT_EQ(rows.size(), 3u) << batched.output;
  EXPECT_EQ(rows[0]["prompt"], "The ");
  EXPECT_EQ(rows[1]["prompt"], "It was the best of times");
  EXPECT_EQ(rows[2]["prompt"], long_prompt);
  EXPECT_EQ(rows, json_lines(one_by_one.output));
  EXPECT_NE(rows[0]["continuation"], rows[1]["continuation"]);
  const CommandResult first = RunBaton({"generate", step, "--prompt", "The ", "--tokens", "24",
                                        "--temperature", "0.8", "--seed", "7"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  // Byte-level: 24 bytes, then "\n"; the JSON line has any byte that is not UTF-8 replaced.
  ASSERT_GE(first.output.size(), 25u);
  const std::string bytes = first.output.substr(first.output.size() - 25, 24);
  EXPECT_EQ(nlohmann::json(bytes).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
            rows[0]["continuation"].dump())
      << first.output;
  // Misuse is refused with the reason.
  std::ofstream(root + "/empty.txt") << "\n\n";
  for (const auto& [args, reason] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--prompt", "The ", "--batch", "2"}, "--batch 2 needs --prompts FILE"},
           {{"--prompts", root + "/empty.txt"}, "holds no prompt"},
           {{"--prompts", root + "/none.txt"}, "no such file"},
           {{"--prompts", prompts, "--batch", "0"}, "--batch 0: must be >= 1"}}) {
    std::vector<std::string> command = {"generate", step};
    command.insert(command.end(), args.begin(), args.end());
    const CommandResult refused = RunBaton(command);
    EXPECT_NE(refused.exit_code, 0);
    EXPECT_NE(refused.output.find(reason), std::string::npos) << refused.output;
  }

  // INT8 weights: every block matrix in INT8, still generating.
  const CommandResult compressed = RunBaton({"compress", step, root + "/int8", "--int8"});
  ASSERT_EQ(compressed.exit_code, 0) << compressed.output;
  EXPECT_NE(compressed.output.find("INT8 weights: 16 matrices"), std::string::npos)
      << compressed.output;
  const CommandResult from_int8 =
      RunBaton({"generate", root + "/int8", "--prompt", "The ", "--tokens", "8"});
  EXPECT_EQ(from_int8.exit_code, 0) << from_int8.output;
}

// Sets every value of the F32 tensor `name` of the safetensors file `path` to `value`, in place.
void FillTensor(const std::string& path, const std::string& name, float value) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_bytes = 0;
  file.read(reinterpret_cast<char*>(&header_bytes), 8);
  std::string header(header_bytes, ' ');
  file.read(header.data(), static_cast<std::streamsize>(header_bytes));
  const nlohmann::json entry = nlohmann::json::parse(header).at(name);
  ASSERT_EQ(entry.at("dtype"), "F32");
  const uint64_t begin = entry.at("data_offsets")[0], end = entry.at("data_offsets")[1];
  file.seekp(static_cast<std::streamoff>(8 + header_bytes + begin));
  for (uint64_t at = begin; at < end; at += 4) file.write(reinterpret_cast<const char*>(&value), 4);
  ASSERT_TRUE(file.good()) << path;
}

// The eval loss `baton eval` printed ("eval loss 2.7534406 (perplexity ...)"), or "" when none.
std::string EvalLoss(const std::string& output) {
  std::smatch m;
  return std::regex_search(output, m, std::regex(R"(eval loss ([0-9.]+))")) ? m[1].str() : "";
}

// A model of `preset` (with `extra` settings) trains on 2 stages, exports as a Hugging Face
// folder of `model_type`, and comes back from it as model.init_from of a YAML that says llama
// (config.json decides: the preset, logged) with the same eval loss as its checkpoint, to the
// last digit printed. Returns the export folder.
std::string TrainExportAndComeBack(const std::string& root, const std::string& preset,
                                   const std::vector<std::string>& extra,
                                   const std::string& model_type) {
  std::vector<std::string> model = {"--set", "model.preset=" + preset};
  model.insert(model.end(), extra.begin(), extra.end());
  std::vector<std::string> train = model;
  train.insert(train.end(), {"--set", "train.steps=3", "--set", "parallel.stages=2"});
  EXPECT_EQ(Losses(TrainLlama(root + "/run", train)).size(), 3u);
  const std::string hf = root + "/hf";
  const CommandResult exported = RunBaton({"export", root + "/run/checkpoints/step-3", hf});
  EXPECT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_EQ(ReadJson(hf + "/config.json").at("model_type"), model_type);

  std::vector<std::string> from_checkpoint = {"eval",     "configs/llama-tiny.yaml",
                                              "--set",    "data.eval_fraction=0.01",
                                              "--resume", root + "/run/checkpoints/step-3"};
  from_checkpoint.insert(from_checkpoint.end(), model.begin(), model.end());
  from_checkpoint.insert(from_checkpoint.end(), kSmall.begin(), kSmall.end());
  const CommandResult a = RunBaton(from_checkpoint);
  EXPECT_EQ(a.exit_code, 0) << a.output;
  std::vector<std::string> from_folder = {
      "eval",  "configs/llama-tiny.yaml", "--set", "model.init_from=" + hf,
      "--set", "data.eval_fraction=0.01", "--set", "parallel.stages=2"};
  from_folder.insert(from_folder.end(), kSmall.begin(), kSmall.end());
  const CommandResult b = RunBaton(from_folder);
  EXPECT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("model.preset: " + preset + " from config.json (the YAML's llama)"),
            std::string::npos)
      << b.output;
  EXPECT_NE(EvalLoss(a.output), "") << a.output;
  EXPECT_EQ(EvalLoss(b.output), EvalLoss(a.output)) << b.output;
  return hf;
}

// Qwen2: Llama's block with q, k and v biases, exported as Qwen2ForCausalLM.
TEST(LlamaOperationsTest, AQwen2TrainsExportsAndComesBackAsTheSameModel) {
  const std::string hf = TrainExportAndComeBack(TempDir("qwen2"), "qwen2", {}, "qwen2");
  EXPECT_NE(ReadFile(hf + "/model.safetensors").find("model.layers.3.self_attn.v_proj.bias"),
            std::string::npos);
}

// Mistral: a sliding window of 16 over the 64-token context, exported as MistralForCausalLM with
// its window, which config.json gives back (logged).
TEST(LlamaOperationsTest, AMistralWithASlidingWindowTrainsExportsAndComesBackAsTheSameModel) {
  const std::string hf = TrainExportAndComeBack(TempDir("mistral"), "mistral",
                                                {"--set", "model.sliding_window=16"}, "mistral");
  EXPECT_EQ(ReadJson(hf + "/config.json").at("sliding_window"), 16);
}

// A folder `baton export` wrote, as model.init_from of `baton eval`: config.json naming the model
// by architectures alone (docs/safetensors.md) evaluates; a finite norm weight so large that the
// forward overflows is an error (it printed "eval loss -nan", or "loss": null, and exited 0).
TEST(LlamaOperationsTest, AnExportedFolderEvaluatesAndANonFiniteEvalLossIsAnError) {
  const std::string root = TempDir("llama-hf-eval");
  TrainLlama(root + "/run", {"--set", "train.steps=2", "--set", "parallel.stages=1"});
  const std::string hf = root + "/hf";
  const CommandResult exported = RunBaton({"export", root + "/run/checkpoints/step-2", hf});
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  nlohmann::json config = ReadJson(hf + "/config.json");
  config.erase("model_type");
  std::ofstream(hf + "/config.json") << config.dump(2);

  std::vector<std::string> eval = {
      "eval",  "configs/llama-tiny.yaml", "--set", "model.init_from=" + hf,
      "--set", "data.eval_fraction=0.01", "--set", "parallel.stages=2"};
  eval.insert(eval.end(), kSmall.begin(), kSmall.end());
  const CommandResult finite = RunBaton(eval);
  ASSERT_EQ(finite.exit_code, 0) << finite.output;
  EXPECT_NE(finite.output.find("eval loss "), std::string::npos) << finite.output;

  FillTensor(hf + "/model.safetensors", "model.norm.weight", 1e38f);
  for (const bool json : {false, true}) {
    std::vector<std::string> args = eval;
    if (json) args.push_back("--json");
    const CommandResult overflowed = RunBaton(args);
    EXPECT_NE(overflowed.exit_code, 0) << overflowed.output;
    EXPECT_NE(overflowed.output.find("the eval loss is not finite"), std::string::npos)
        << overflowed.output;
    EXPECT_EQ(overflowed.output.find("\"loss\":"), std::string::npos) << overflowed.output;
  }
}

}  // namespace
}  // namespace baton::testing
