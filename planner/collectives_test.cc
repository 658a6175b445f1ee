// The collectives the layers declare (model/collectives.h) against those a real step issues:
// every rank of an in-process run counts its tensor group's collectives, the all-gathers among
// them, and their bytes (StepRecord::tensor_collectives, tensor_gathers, tensor_bytes), and each
// must equal what its stage's layers declare for the step's micro-batches (a recompute repeating
// the forward's) plus the step end's. GPT-2, Llama and its experts, with and without sequence
// parallelism, one and two stages, fp32 and bf16.
#include "model/collectives.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/config.h"
#include "planner/in_process.h"
#include "planner/planner.h"

namespace baton {
namespace {

struct Totals {
  int64_t collectives = 0;
  int64_t gathers = 0;
  int64_t bytes = 0;
};

void Add(const std::vector<TensorCollective>& collectives, int64_t times, Totals& totals) {
  for (const TensorCollective& c : collectives) {
    totals.collectives += times;
    if (c.kind == TensorCollective::Kind::kGatherSequence ||
        c.kind == TensorCollective::Kind::kRowStats) {
      totals.gathers += times;
    }
    totals.bytes += times * c.bytes();
  }
}

// What the layers of `stage` declare for one step of `plan`.
Totals Declared(const Plan& plan, int stage) {
  const TensorLayout layout{plan.num_tensor(), plan.config.parallel.sequence_parallel};
  const int64_t micro_batches = plan.config.train.micro_batches;
  const bool recompute = plan.config.parallel.checkpoint.kind == CheckpointPolicy::Kind::kEvery;
  Totals totals;
  for (size_t j = 0; j < plan.virtual_stages.size(); ++j) {
    if (plan.schedule.StageOf(static_cast<int>(j)) != stage) continue;
    for (int i = plan.virtual_stages[j].first; i <= plan.virtual_stages[j].last; ++i) {
      const LayerCollectives c = CollectivesOf(plan.graph[static_cast<size_t>(i)], plan.dims,
                                               plan.micro_batch_shape(), layout);
      Add(c.forward, micro_batches * (recompute ? 2 : 1), totals);
      Add(c.backward, micro_batches, totals);
      Add(c.step_end, 1, totals);
    }
  }
  return totals;
}

Config Tiny(const std::string& file, const std::vector<std::string>& more) {
  std::vector<std::string> all = {
      "model.num_layers=3", "model.width=32",        "model.context=16", "model.num_heads=4",
      "train.batch_size=4", "train.micro_batches=2", "train.steps=1",    "train.warmup_steps=0",
      "parallel.tensor=2",  "parallel.stages=1",     "train.lr=1e-3"};
  if (file == "llama-tiny.yaml") all.push_back("model.intermediate_size=64");
  all.insert(all.end(), more.begin(), more.end());
  return LoadConfig(std::string(BATON_SOURCE_DIR) + "/configs/" + file, all);
}

// GPT-2, Llama, Qwen3 (its q/k norms' weight gradients summed at the step end), and a mixture of
// experts (the experts folded over the tensor ranks, a gated shared expert cut as the MLP).
TEST(CollectivesTest, EveryRanksCollectivesAreThoseItsLayersDeclare) {
  for (const std::string model : {"gpt-tiny.yaml", "llama-tiny.yaml", "qwen3", "moe-tiny.yaml"}) {
    const std::string file = model == "qwen3" ? "llama-tiny.yaml" : model;
    for (const std::string sp : {"false", "true"}) {
      for (const std::vector<std::string>& layout : std::vector<std::vector<std::string>>{
               {"parallel.stages=1", "precision.dtype=fp32"},
               {"parallel.stages=2", "precision.dtype=bf16", "parallel.checkpoint=every:1"},
               {"parallel.stages=2", "parallel.schedule=zb-h1"},
           }) {
        std::vector<std::string> overrides = layout;
        overrides.push_back("parallel.sequence_parallel=" + sp);
        if (model == "qwen3")
          overrides.insert(overrides.end(), {"model.preset=qwen3", "model.head_dim=12"});
        if (model == "moe-tiny.yaml") {
          overrides.insert(
              overrides.end(),
              {"model.intermediate_size=48", "model.moe.num_experts=4",
               "model.moe.expert_intermediate_size=16", "model.moe.z_loss_coef=0.001"});
        }
        const Plan plan = MakePlan(Tiny(file, overrides));
        const std::string what =
            fmt::format("{} sequence_parallel={} {}", model, sp, fmt::join(layout, " "));
        const InProcessResult result = RunInProcess(plan);
        ASSERT_EQ(result.ranks.size(), static_cast<size_t>(plan.world_size())) << what;
        for (int rank = 0; rank < plan.world_size(); ++rank) {
          const StepRecord& step = result.ranks[static_cast<size_t>(rank)].steps.at(0);
          const Totals declared = Declared(plan, plan.layout().StageOf(rank));
          EXPECT_GT(declared.collectives, 0) << what;
          EXPECT_EQ(step.tensor_collectives, declared.collectives) << what << ", rank " << rank;
          EXPECT_EQ(step.tensor_gathers, declared.gathers) << what << ", rank " << rank;
          EXPECT_EQ(step.tensor_bytes, declared.bytes) << what << ", rank " << rank;
        }
      }
    }
  }
}

TEST(CollectivesTest, OneTensorRankDeclaresNone) {
  const Plan plan = MakePlan(Tiny("gpt-tiny.yaml", {"parallel.tensor=1"}));
  const TensorLayout layout{1, false};
  for (const LayerSpec& spec : plan.graph) {
    const LayerCollectives c = CollectivesOf(spec, plan.dims, plan.micro_batch_shape(), layout);
    EXPECT_TRUE(c.forward.empty() && c.backward.empty() && c.step_end.empty());
  }
}

// Sequence parallelism's block issues 2 collectives forward and 3 backward per sublayer (a
// gather in, a scatter out; dy and ln gathered, the input's gradient scattered), without it one
// sum each way: the count the tuner priced wrongly before (2 and 2 for both).
TEST(CollectivesTest, ABlockUnderSequenceParallelismIssuesMoreThanWithout) {
  const Plan plan = MakePlan(Tiny("gpt-tiny.yaml", {}));
  const LayerSpec& block = plan.graph.at(1);
  ASSERT_EQ(block.kind, LayerKind::kBlock);
  const LayerCollectives plain =
      CollectivesOf(block, plan.dims, plan.micro_batch_shape(), TensorLayout{2, false});
  const LayerCollectives sp =
      CollectivesOf(block, plan.dims, plan.micro_batch_shape(), TensorLayout{2, true});
  EXPECT_EQ(plain.forward.size(), 2u);
  EXPECT_EQ(plain.backward.size(), 2u);
  EXPECT_EQ(sp.forward.size(), 4u);
  EXPECT_EQ(sp.backward.size(), 6u);
  EXPECT_EQ(sp.step_end.size(), 4u);  // two LayerNorms' weight and bias
}

}  // namespace
}  // namespace baton
