// Llama (model.preset: llama) through the planner and the real trainer in one process: every
// schedule, checkpointing policy and precision bit-identical to one stage (fp32 and bf16), data
// parallelism with ZeRO-1, sharing and low rank, 8-bit optimizer state and pruning, and the
// memory plan predicting the ledger of each of them.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "config/config.h"
#include "model/cost.h"
#include "model/from_config.h"
#include "planner/in_process.h"
#include "planner/memory_planner.h"
#include "planner/planner.h"
#include "planner/planner_test_util.h"

namespace baton {
namespace {

using planner_test::ExpectPredictedEqualsMeasured;

// configs/llama-tiny.yaml made small: 4 blocks of width 32, 4 heads over 2 key/value heads.
Config LlamaTiny(const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {
      "model.num_layers=4",   "model.width=32",         "model.context=16",
      "model.num_heads=4",    "model.num_kv_heads=2",   "model.intermediate_size=48",
      "train.batch_size=4",   "train.micro_batches=4",  "train.steps=3",
      "train.warmup_steps=0", "model.rope_theta=500000"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return LoadConfig(std::string(BATON_SOURCE_DIR) + "/configs/llama-tiny.yaml", all);
}

double WorstRelative(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t s = 0; s < std::min(a.size(), b.size()); ++s) {
    worst = std::max(worst, std::abs(static_cast<double>(a[s]) - b[s]) / std::abs(b[s]));
  }
  return worst;
}

TEST(LlamaInProcessTest, EveryScheduleAndCheckpointingIsBitIdenticalToOneStage) {
  planner_test::ExpectEveryScheduleBitIdenticalToOneStage(LlamaTiny);
}

TEST(LlamaInProcessTest, MaterializedAttentionPackedDocumentsAndMultiQueryTrainOnEveryCut) {
  for (const std::vector<std::string>& variant :
       std::vector<std::vector<std::string>>{{"model.attention=materialized"},
                                             {"model.num_kv_heads=1"},
                                             {"model.tie_embeddings=true"},
                                             {"data.packing=true", "data.document_separator=10"}}) {
    std::vector<std::string> one = variant, two = variant;
    one.push_back("parallel.stages=1");
    two.push_back("parallel.stages=2");
    const InProcessResult a = RunInProcess(MakePlan(LlamaTiny(one)));
    const InProcessResult b = RunInProcess(MakePlan(LlamaTiny(two)));
    EXPECT_EQ(a.losses, b.losses) << variant.front();
    EXPECT_EQ(a.param_checksum, b.param_checksum) << variant.front();
  }
}

TEST(LlamaInProcessTest, ReplicasWithZeroOneTrainLikeOneReplica) {
  const std::vector<std::string> base = {"parallel.stages=2", "train.steps=10",
                                         "train.batch_size=8"};
  const InProcessResult one = RunInProcess(MakePlan(LlamaTiny(base)));
  std::vector<std::string> sharded = base;
  sharded.insert(sharded.end(), {"parallel.replicas=2", "parallel.zero=1"});
  const InProcessResult two = RunInProcess(MakePlan(LlamaTiny(sharded)));
  EXPECT_LE(WorstRelative(two.losses, one.losses), 1e-5);
}

TEST(LlamaInProcessTest, SharingAndLowRankAreBitIdenticalAcrossStages) {
  for (const std::vector<std::string>& structure : std::vector<std::vector<std::string>>{
           {"model.share.group=2"}, {"model.low_rank.attn=8", "model.low_rank.mlp=8"}}) {
    std::vector<std::string> one = structure, two = structure;
    one.push_back("parallel.stages=1");
    two.push_back("parallel.stages=2");
    const InProcessResult a = RunInProcess(MakePlan(LlamaTiny(one)));
    const InProcessResult b = RunInProcess(MakePlan(LlamaTiny(two)));
    EXPECT_EQ(a.losses, b.losses) << structure.front();
    EXPECT_EQ(a.param_checksum, b.param_checksum) << structure.front();
  }
}

// Qwen2 (preset qwen2: Llama's blocks with q, k and v biases): bit-identical across stages and
// schedules and with checkpointing, and the memory plan exact, also under tensor parallelism
// (the biases cut by heads as c_attn's columns; its losses: tensor_parallel_test.cc). Its biases
// train: the losses part from a Llama's.
TEST(Qwen2InProcessTest, QkvBiasesTrainBitIdenticallyOnEveryCutAndThePlanIsExact) {
  const InProcessResult one =
      RunInProcess(MakePlan(LlamaTiny({"model.preset=qwen2", "parallel.stages=1"})));
  const InProcessResult llama = RunInProcess(MakePlan(LlamaTiny({"parallel.stages=1"})));
  ASSERT_EQ(one.losses.size(), 3u);
  EXPECT_NE(one.losses.back(), llama.losses.back());
  EXPECT_NE(one.param_checksum, llama.param_checksum);
  for (const std::vector<std::string>& variant : std::vector<std::vector<std::string>>{
           {"parallel.stages=2", "parallel.schedule=zb-h1", "parallel.checkpoint=every:1"},
           {"parallel.stages=4", "parallel.schedule=1f1b"}}) {
    std::vector<std::string> overrides = variant;
    overrides.push_back("model.preset=qwen2");
    const Plan plan = MakePlan(LlamaTiny(overrides));
    const InProcessResult other = RunInProcess(plan);
    EXPECT_EQ(other.losses, one.losses) << variant.back();
    EXPECT_EQ(other.param_checksum, one.param_checksum) << variant.back();
    ExpectPredictedEqualsMeasured(plan, variant.back());
  }
  ExpectPredictedEqualsMeasured(
      MakePlan(LlamaTiny({"model.preset=qwen2", "parallel.stages=2", "parallel.tensor=2"})),
      "qwen2 P=2 T=2");
}

// The shipped 1B config is Llama 3.2 1B's shape: Meta's parameter count, and the default
// intermediate size rule (8C/3 up to a multiple of 256) where the config leaves it out.
TEST(LlamaConfigTest, Llama32OneBillionHasMetasParameterCount) {
  const Config config = LoadConfig(std::string(BATON_SOURCE_DIR) + "/configs/llama3.2-1b.yaml", {});
  const ModelDims dims = DimsOf(config.model);
  EXPECT_EQ(ParamCount(GraphOf(config.model), dims), 1235814400);
  EXPECT_EQ(dims.kv_heads(), 8);
  EXPECT_TRUE(dims.tie_embeddings);
  ModelConfig unset = config.model;
  unset.intermediate_size = 0;
  EXPECT_EQ(LlamaIntermediateSize(unset), 5632);             // 8 * 2048 / 3 = 5461 -> 5632
  EXPECT_FALSE(DimsOf(LlamaTiny({}).model).tie_embeddings);  // auto: untied for llama
}

// Mistral (preset mistral, model.sliding_window 5 of 16 positions): bit-identical across stages,
// schedules and checkpointing, with packed documents too, and the memory plan exact (the window's
// key starts are workspace the plan books); the window changes what it learns.
TEST(MistralInProcessTest, SlidingWindowTrainsBitIdenticallyOnEveryCutAndThePlanIsExact) {
  const std::vector<std::string> mistral = {"model.preset=mistral", "model.sliding_window=5"};
  const auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), mistral.begin(), mistral.end());
    return more;
  };
  const InProcessResult one = RunInProcess(MakePlan(LlamaTiny(with({"parallel.stages=1"}))));
  const InProcessResult llama = RunInProcess(MakePlan(LlamaTiny({"parallel.stages=1"})));
  ASSERT_EQ(one.losses.size(), 3u);
  EXPECT_NE(one.losses, llama.losses);
  const Plan zb = MakePlan(LlamaTiny(
      with({"parallel.stages=2", "parallel.schedule=zb-h1", "parallel.checkpoint=every:1"})));
  const InProcessResult other = RunInProcess(zb);
  EXPECT_EQ(other.losses, one.losses);
  EXPECT_EQ(other.param_checksum, one.param_checksum);
  ExpectPredictedEqualsMeasured(zb, "zb-h1 every:1");
  // Materialized attention (its own rounding: against its own one stage) under selective
  // recompute, which rebuilds the window's first keys for the probabilities.
  const InProcessResult materialized_one = RunInProcess(
      MakePlan(LlamaTiny(with({"parallel.stages=1", "model.attention=materialized"}))));
  const Plan materialized = MakePlan(LlamaTiny(with(
      {"parallel.stages=2", "model.attention=materialized", "parallel.checkpoint=selective"})));
  const InProcessResult materialized_two = RunInProcess(materialized);
  EXPECT_EQ(materialized_two.losses, materialized_one.losses);
  EXPECT_EQ(materialized_two.param_checksum, materialized_one.param_checksum);
  ExpectPredictedEqualsMeasured(materialized, "materialized selective");
  const InProcessResult packed_one = RunInProcess(MakePlan(
      LlamaTiny(with({"parallel.stages=1", "data.packing=true", "data.document_separator=10"}))));
  const InProcessResult packed_two = RunInProcess(MakePlan(
      LlamaTiny(with({"parallel.stages=2", "data.packing=true", "data.document_separator=10"}))));
  EXPECT_EQ(packed_two.losses, packed_one.losses);
}

// The shipped Qwen2.5 0.5B config: Qwen's parameter count (the q, k and v biases counted, the
// head tied).
TEST(LlamaConfigTest, Qwen25HalfBillionHasQwensParameterCount) {
  const Config config =
      LoadConfig(std::string(BATON_SOURCE_DIR) + "/configs/qwen2.5-0.5b.yaml", {});
  const ModelDims dims = DimsOf(config.model);
  EXPECT_TRUE(dims.qwen2());
  EXPECT_EQ(ParamCount(GraphOf(config.model), dims), 494032768);
}

// Its 4 stages hold the tied embedding on the first and the last: the table says so, and why its
// chunks' parameters add up to one V x C embedding more than the model's.
TEST(LlamaConfigTest, ThePartitionTableSaysWhyItsStagesHoldMoreThanTheModel) {
  const std::string file = std::string(BATON_SOURCE_DIR) + "/configs/llama3.2-1b.yaml";
  // On the CPU: its stash column asks a meta backend of the config's device, and a build without
  // CUDA (the sanitizers') has none for a GPU.
  const std::string table = FormatPartitionTable(MakePlan(LoadConfig(file, {"device.type=cpu"})));
  constexpr int64_t kModel = 1235814400, kEmbedding = int64_t{128256} * 2048;
  EXPECT_NE(table.find("tied: wte.weight on stages 0, 3: each holds a copy"), std::string::npos)
      << table;
  EXPECT_NE(table.find(fmt::format("add up to {}, {} more than the model's {}", kModel + kEmbedding,
                                   kEmbedding, kModel)),
            std::string::npos)
      << table;
  const std::string one =
      FormatPartitionTable(MakePlan(LoadConfig(file, {"device.type=cpu", "parallel.stages=1"})));
  EXPECT_EQ(one.find("tied:"), std::string::npos) << one;
  EXPECT_EQ(one.find("add up to"), std::string::npos) << one;
}

TEST(LlamaMemoryPlannerTest, PredictsTheLedgerExactly) {
  for (const std::vector<std::string>& overrides : std::vector<std::vector<std::string>>{
           {"parallel.stages=2", "parallel.schedule=1f1b"},
           {"parallel.stages=2", "parallel.schedule=zb-h1", "precision.dtype=bf16"},
           {"parallel.stages=2", "parallel.checkpoint=selective", "precision.dtype=fp16"},
           {"parallel.stages=4", "parallel.checkpoint=every:1", "model.attention=materialized"},
           {"parallel.stages=2", "parallel.replicas=2", "parallel.zero=1"},
           {"parallel.stages=1", "optimizer.state=int8"},
           {"parallel.stages=2", "model.share.group=2", "model.low_rank.mlp=8"},
           {"parallel.stages=2", "prune.at_step=1", "prune.sparsity=0.5"},
           {"parallel.stages=2", "data.packing=true", "data.document_separator=10"}}) {
    ExpectPredictedEqualsMeasured(MakePlan(LlamaTiny(overrides)), fmt::format("{}", overrides));
  }
}

}  // namespace
}  // namespace baton
