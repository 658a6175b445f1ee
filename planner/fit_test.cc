// Fitting a configuration to a memory budget, and the budget-aware cut it relies on.
#include "planner/fit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <regex>
#include <string>

#include "core/error.h"
#include "core/scoped_env.h"
#include "model/cost.h"
#include "planner/in_process.h"
#include "planner/memory_planner.h"
#include "planner/planner.h"

namespace baton {
namespace {

// gpt-small-cpu on 4 stages for one step: at its 256-token sequences activations dominate.
Config SmallCpu(const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> all = {"train.steps=1", "parallel.stages=4"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return LoadConfig(std::string(BATON_SOURCE_DIR) + "/configs/gpt-small-cpu.yaml", all);
}

int64_t MaxOf(const std::vector<int64_t>& v) { return *std::max_element(v.begin(), v.end()); }

TEST(BudgetedPartitionTest, EarlyOneFOneBStagesTakeFewerLayersToFitABudget) {
  const Plan balanced = MakePlan(SmallCpu());
  const BudgetedPartition loose = PartitionWithinBudget(balanced, int64_t{1} << 40);
  ASSERT_TRUE(loose.fits);
  EXPECT_EQ(loose.bound, "compute balance");
  // Stage 0 keeps 4 micro-batches in flight, stage 3 one: between the balanced cut's peak and
  // the leanest cut's, the early stages must give layers away.
  const int64_t leanest = MaxOf(PartitionWithinBudget(balanced, 1).totals);
  ASSERT_LT(leanest, MaxOf(loose.totals));
  const int64_t budget = (leanest + MaxOf(loose.totals)) / 2;
  const Plan plan = MakePlan(SmallCpu(), budget);
  EXPECT_LT(plan.virtual_stages[0].size(), balanced.virtual_stages[0].size());
  EXPECT_NE(plan.partition_bound.find("memory on stage 0"), std::string::npos)
      << plan.partition_bound;
  const InProcessResult measured = RunInProcess(plan);
  const std::vector<RankMemory> predicted = PredictMemory(plan);
  for (size_t r = 0; r < predicted.size(); ++r) {
    EXPECT_LE(predicted[r].peak.total, budget) << "stage " << r;
    EXPECT_LE(measured.ranks[r].peak.total, budget) << "stage " << r;
  }
}

TEST(BudgetedPartitionTest, ABudgetNoCutMeetsIsAClearErrorNamingTheSmallestPeak) {
  try {
    MakePlan(SmallCpu(), 1 << 20);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no cut into 4 stages fits 1.00 MiB: the smallest peak"),
              std::string::npos)
        << e.what();
  }
}

TEST(FitTest, ABudgetTheConfigAlreadyMeetsKeepsTheConfig) {
  const FitResult fit = FitToBudget(SmallCpu(), {int64_t{1} << 40, 1e9, 0});
  const FitCandidate& chosen = fit.candidates.at(static_cast<size_t>(fit.chosen));
  EXPECT_EQ(chosen.level, 0);
  EXPECT_EQ(fit.config.precision.dtype, DType::kF32);
  EXPECT_EQ(fit.config.parallel.checkpoint, CheckpointPolicy::None());
}

TEST(FitTest, ABudgetOnlyCheckpointingMeetsChoosesCheckpointing) {
  // Below the leanest cut without checkpointing in either precision: precision alone cannot
  // meet it.
  int64_t budget = int64_t{1} << 40;
  for (const char* dtype : {"fp32", "bf16"}) {
    const Plan plan = MakePlan(SmallCpu({std::string("precision.dtype=") + dtype}));
    budget = std::min(budget, MaxOf(PartitionWithinBudget(plan, 1).totals) - 1);
  }
  const FitResult fit = FitToBudget(SmallCpu(), {budget, 1e9, 0});
  const FitCandidate& chosen = fit.candidates.at(static_cast<size_t>(fit.chosen));
  EXPECT_EQ(chosen.level, 2) << FormatFitTable(fit, budget);
  EXPECT_NE(fit.config.parallel.checkpoint, CheckpointPolicy::None());
  EXPECT_EQ(fit.config.parallel.stages, 4);
  EXPECT_LE(chosen.peak, budget);
  // It is the fastest of the checkpointed candidates that fit on 4 stages.
  for (const FitCandidate& c : fit.candidates) {
    if (c.fits && c.level == 2) {
      EXPECT_GE(c.step_seconds, chosen.step_seconds);
    }
  }
  // And the plan it leads to really stays within the budget.
  const Plan plan = MakePlan(fit.config, budget);
  for (const RankMemory& r : PredictMemory(plan)) EXPECT_LE(r.peak.total, budget);
  const std::string table = FormatFitTable(fit, budget);
  EXPECT_NE(table.find("chosen:"), std::string::npos) << table;
}

// Where bf16 is slower than fp32 (CPUs stage 16-bit through f32), a faster fp32 checkpointed
// candidate that fits beats bf16 without checkpointing; where bf16 is faster (GPUs), bf16 wins.
TEST(FitTest, PrecisionAndCheckpointingCompeteOnPredictedStepTime) {
  const Config base = SmallCpu();
  // The smallest peak any cut reaches, per configuration.
  const auto leanest = [](const std::vector<std::string>& overrides) {
    return MaxOf(PartitionWithinBudget(MakePlan(SmallCpu(overrides)), 1).totals);
  };
  const int64_t fp32_none = leanest({});
  const int64_t bf16_none = leanest({"precision.dtype=bf16"});
  const int64_t fp32_selective = leanest({"parallel.checkpoint=selective"});
  // Both fit, the configuration as it is does not.
  const int64_t budget = std::max(bf16_none, fp32_selective);
  ASSERT_LT(budget, fp32_none);

  const FitResult cpu_like = FitToBudget(base, {budget, StepRates(100e9, 50e9), 0});
  EXPECT_EQ(cpu_like.config.precision.dtype, DType::kF32) << FormatFitTable(cpu_like, budget);
  EXPECT_NE(cpu_like.config.parallel.checkpoint, CheckpointPolicy::None());
  EXPECT_EQ(cpu_like.set_flags.find("precision"), std::string::npos) << cpu_like.set_flags;
  EXPECT_NE(cpu_like.set_flags.find("--set parallel.checkpoint="), std::string::npos);

  const FitResult gpu_like = FitToBudget(base, {budget, StepRates(60e12, 800e12), 0});
  EXPECT_EQ(gpu_like.config.precision.dtype, DType::kBF16) << FormatFitTable(gpu_like, budget);
  EXPECT_NE(gpu_like.set_flags.find("--set precision.dtype=bf16"), std::string::npos)
      << gpu_like.set_flags;
  EXPECT_NE(FormatFitTable(gpu_like, budget).find("apply with: --set precision.dtype=bf16"),
            std::string::npos);
}

TEST(FitTest, AnImpossibleBudgetFailsNamingTheSmallestPeakReachable) {
  try {
    FitToBudget(SmallCpu(), {1 << 20, 1e9, 0});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no configuration fits the memory budget of 1.00 MiB: the smallest peak "
                        "reachable is"),
              std::string::npos)
        << what;
  }
}

// Nothing fits the dense model, but sharing every block would: the error says so, with the
// flag and its predicted peak, and applies nothing.
TEST(FitTest, WhenNothingFitsItNamesTheStructuralChangesThatWould) {
  const FitOptions probe{1, 1e9, 4};
  std::string leanest;
  try {
    FitToBudget(SmallCpu(), probe);
    FAIL() << "a one-byte budget fits";
  } catch (const Error& e) {
    leanest = e.what();
  }
  // "... is 12.34 MiB (4 stages, 8 micro-batches, bf16, checkpoint every:1, int8 optimizer
  // state); ..."
  const std::smatch m = [&] {
    std::smatch match;
    EXPECT_TRUE(std::regex_search(
        leanest, match,
        std::regex(
            R"(is ([0-9.]+) MiB \((\d+) stages, (\d+) micro-batches, (\w+), checkpoint ([\w:]+), (\w+) optimizer state\))")))
        << leanest;
    return match;
  }();
  ASSERT_EQ(m.size(), 7u);
  const double dense_mib = std::stod(m[1].str());
  const std::vector<std::string> lever = {
      "parallel.stages=" + m[2].str(), "train.micro_batches=" + m[3].str(),
      "precision.dtype=" + m[4].str(), "parallel.checkpoint=" + m[5].str(),
      "optimizer.state=" + m[6].str()};
  std::vector<std::string> shared = lever;
  shared.push_back("model.share.group=8");
  int64_t shared_peak = 0;
  for (const RankMemory& r : PredictMemory(MakePlan(SmallCpu(shared))))
    shared_peak = std::max(shared_peak, r.peak.total);
  ASSERT_LT(static_cast<double>(shared_peak), (dense_mib - 0.01) * (1 << 20)) << leanest;
  try {
    FitToBudget(SmallCpu(), {shared_peak, 1e9, 4});
    FAIL() << "the dense model fits " << shared_peak << " bytes";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("structural changes that would fit (they change the model, so --fit does "
                        "not apply them"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("--set model.share.group="), std::string::npos) << what;
    EXPECT_NE(what.find(" fits at "), std::string::npos) << what;
  }
}

// gpt-small-cpu on one stage at 100 MiB: checkpointing and bf16 do not reach it, 8-bit optimizer
// state does (a quarter of AdamW's moments' bytes), and it comes before a second device.
TEST(FitTest, EightBitOptimizerStateComesBeforeAnotherStage) {
  const Config config = SmallCpu({"parallel.stages=1"});
  const int64_t budget = int64_t{100} << 20;
  const FitResult fit = FitToBudget(config, {budget, StepRates(1e9), 0});
  const FitCandidate& chosen = fit.candidates.at(static_cast<size_t>(fit.chosen));
  const std::string table = FormatFitTable(fit, budget);
  EXPECT_EQ(chosen.level, 4) << table;
  EXPECT_EQ(chosen.stages, 1) << table;
  EXPECT_EQ(fit.config.optimizer.state, OptimizerState::kInt8);
  EXPECT_NE(fit.set_flags.find("--set optimizer.state=int8"), std::string::npos) << fit.set_flags;
  EXPECT_NE(table.find("nothing fits without 8-bit optimizer state"), std::string::npos) << table;
  // Nothing cheaper fits, and the choice does: predicted and measured.
  for (const FitCandidate& c : fit.candidates) {
    if (c.level < 4) {
      EXPECT_FALSE(c.fits) << table;
    }
  }
  const Plan plan = MakePlan(fit.config, budget);
  const InProcessResult measured = RunInProcess(plan);
  EXPECT_LE(PredictMemory(plan).at(0).peak.total, budget);
  EXPECT_LE(measured.ranks.at(0).peak.total, budget);
  // Already 8-bit: the lever is not offered again.
  const FitResult again =
      FitToBudget(SmallCpu({"parallel.stages=1", "optimizer.state=int8"}), {budget, 1e9, 0});
  for (const FitCandidate& c : again.candidates) EXPECT_EQ(c.state, OptimizerState::kInt8);
}

// The leanest peak --fit reaches for `config` on at most `max_stages` stages without more
// processes, read from its error.
int64_t LeanestPeak(const Config& config, int max_stages) {
  try {
    FitToBudget(config, {1, StepRates(1e9), max_stages});
  } catch (const Error& e) {
    std::smatch m;
    const std::string text = e.what();
    if (std::regex_search(text, m, std::regex(R"(reachable is ([0-9.]+) MiB)"))) {
      return static_cast<int64_t>(std::stod(m[1].str()) * (1 << 20));
    }
  }
  ADD_FAILURE() << "a one-byte budget fits, or the error names no peak";
  return 0;
}

TEST(FitTest, TensorRanksComeAfterStagesWhenNoPipelineFits) {
  const Config config = SmallCpu({"parallel.stages=2"});
  const int64_t budget = LeanestPeak(config, 2) - (int64_t{1} << 20);
  const FitResult result = FitToBudget(config, {budget, StepRates(1e9), 2, 4});
  const FitCandidate& chosen = result.candidates[static_cast<size_t>(result.chosen)];
  const std::string table = FormatFitTable(result, budget);
  EXPECT_EQ(chosen.level, 6) << table;
  EXPECT_EQ(chosen.tensor, 2) << table;
  EXPECT_EQ(chosen.replicas, 1) << table;
  EXPECT_NE(result.set_flags.find("--set parallel.tensor=2"), std::string::npos)
      << result.set_flags;
  EXPECT_NE(table.find("tensor ranks"), std::string::npos) << table;
  for (const FitCandidate& c : result.candidates) {
    if (c.level < 6) {
      EXPECT_FALSE(c.fits) << table;
    }
  }
  const Plan plan = MakePlan(result.config, budget);
  for (const RankMemory& rank : PredictMemory(plan)) EXPECT_LE(rank.peak.total, budget);
}

TEST(FitTest, ReplicasWithZeroOneComeAfterStagesWhenMoreProcessesAreAllowed) {
  // Two stages at most: the leanest two-stage configuration's peak, then a budget below it. One
  // head, so that tensor ranks (which would split the heads) are not a lever here. No checkpoint:
  // saving one gathers a layer's full f32 moments on replica 0 (docs/memory.md), a floor under
  // what ZeRO-1 saves that this budget (1 MiB under 8-bit state's leanest) does not leave room for.
  // Over TCP: through shared memory each of 8 replicas' rings (4 MiB a rank) would outweigh the
  // 1 MiB margin, and the ladder's order, not the transport, is what this checks.
  ScopedEnv tcp("BATON_SHARED_MEMORY", "0");
  const Config config =
      SmallCpu({"parallel.stages=2", "model.num_heads=1", "output.final_checkpoint=false"});
  std::string text;
  try {
    FitToBudget(config, {1, StepRates(1e9), 2});
    FAIL() << "a one-byte budget fits";
  } catch (const Error& e) {
    text = e.what();
  }
  EXPECT_NE(text.find("--max-processes"), std::string::npos) << text;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex(R"(reachable is ([0-9.]+) MiB)"))) << text;
  const int64_t budget =
      static_cast<int64_t>(std::stod(m[1].str()) * (1 << 20)) - (int64_t{1} << 20);
  EXPECT_THROW(FitToBudget(config, {budget, StepRates(1e9), 2}), Error);
  // Below 8-bit optimizer state's leanest peak, ZeRO-1 must shard the f32 state 8 ways (two
  // replicas leave more of it than 8-bit state does): 16 processes.
  EXPECT_THROW(FitToBudget(config, {budget, StepRates(1e9), 2, 4}), Error);
  const FitResult result = FitToBudget(config, {budget, StepRates(1e9), 2, 16});
  const FitCandidate& chosen = result.candidates[static_cast<size_t>(result.chosen)];
  EXPECT_EQ(chosen.level, 7);
  EXPECT_GE(chosen.replicas, 2);
  EXPECT_LE(chosen.stages * chosen.replicas, 16);
  EXPECT_EQ(result.config.parallel.zero, 1);
  EXPECT_NE(result.set_flags.find("--set parallel.zero=1"), std::string::npos) << result.set_flags;
  EXPECT_NE(FormatFitTable(result, budget).find("replicas"), std::string::npos);
  // Every rank of the chosen plan fits the budget.
  const Plan plan = MakePlan(result.config, budget);
  for (const RankMemory& rank : PredictMemory(plan)) EXPECT_LE(rank.peak.total, budget);
  // Below every ZeRO-1 candidate's peak, ZeRO-2 (a level above) is what fits: with one
  // micro-batch per replica a block's gradients outside the replica's shard live through its
  // backward only.
  int64_t zero1_leanest = std::numeric_limits<int64_t>::max();
  for (const FitCandidate& c : result.candidates) {
    if (c.valid && c.level == 7) zero1_leanest = std::min(zero1_leanest, c.peak);
  }
  const FitResult two = FitToBudget(config, {zero1_leanest - 1, StepRates(1e9), 2, 16});
  const FitCandidate& lean = two.candidates[static_cast<size_t>(two.chosen)];
  EXPECT_EQ(lean.level, 8);
  EXPECT_EQ(two.config.parallel.zero, 2);
  EXPECT_NE(two.set_flags.find("--set parallel.zero=2"), std::string::npos) << two.set_flags;
  EXPECT_NE(FormatFitTable(two, zero1_leanest - 1).find("ZeRO-2"), std::string::npos);
  RecordProperty("zero1_leanest_peak", std::to_string(zero1_leanest));
  RecordProperty("zero2_chosen_peak", std::to_string(lean.peak));
  // Below every ZeRO-2 candidate's peak, ZeRO-3 (a level above again) is what fits: each
  // replica holds its shard of the parameters and the layers in use only.
  int64_t zero2_leanest = std::numeric_limits<int64_t>::max();
  for (const FitCandidate& c : two.candidates) {
    if (c.valid && c.level == 8) zero2_leanest = std::min(zero2_leanest, c.peak);
  }
  const FitResult three = FitToBudget(config, {zero2_leanest - 1, StepRates(1e9), 2, 16});
  const FitCandidate& leaner = three.candidates[static_cast<size_t>(three.chosen)];
  EXPECT_EQ(leaner.level, 9);
  EXPECT_EQ(three.config.parallel.zero, 3);
  EXPECT_NE(three.set_flags.find("--set parallel.zero=3"), std::string::npos) << three.set_flags;
  EXPECT_NE(FormatFitTable(three, zero2_leanest - 1).find("ZeRO-3"), std::string::npos);
  for (const RankMemory& rank : PredictMemory(MakePlan(three.config, zero2_leanest - 1))) {
    EXPECT_LE(rank.peak.total, zero2_leanest - 1);
  }
  EXPECT_NE(FormatFitTable(three, zero2_leanest - 1).find("/step to its replicas"),
            std::string::npos);
  RecordProperty("zero2_leanest_peak", std::to_string(zero2_leanest));
  RecordProperty("zero3_chosen_peak", std::to_string(leaner.peak));
}

// A mixture of experts on the replicas it has (configs/mixtral-tiny.yaml, 2 stages x 2 replicas,
// its experts whole): below the leanest peak of every candidate that keeps each replica's experts
// whole (8-bit state, every checkpoint policy, precision and micro-batch count), splitting them
// over the 2 replicas (parallel.experts 2: half the experts and their optimizer state per
// replica) is what fits, with no process added.
TEST(FitTest, ExpertGroupsSplitAMixtureOfExpertsOverTheReplicasItHas) {
  const Config config = LoadConfig(std::string(BATON_SOURCE_DIR) + "/configs/mixtral-tiny.yaml",
                                   {"parallel.experts=1", "output.final_checkpoint=false"});
  const FitOptions loose = {int64_t{1} << 40, StepRates(1e9), 2};
  int64_t whole_leanest = std::numeric_limits<int64_t>::max();
  bool split_offered = false;
  for (const FitCandidate& c : FitToBudget(config, loose).candidates) {
    split_offered |= c.valid && c.experts == 2;
    if (!c.valid || c.experts != 1) continue;
    const Plan plan = MakePlan(Apply(config, c));
    whole_leanest = std::min(whole_leanest, MaxOf(PartitionWithinBudget(plan, 1).totals));
  }
  ASSERT_TRUE(split_offered);
  const int64_t budget = whole_leanest - 1;
  const FitResult result = FitToBudget(config, {budget, StepRates(1e9), 2});
  const FitCandidate& chosen = result.candidates[static_cast<size_t>(result.chosen)];
  const std::string table = FormatFitTable(result, budget);
  EXPECT_EQ(chosen.level, 7) << table;
  EXPECT_EQ(chosen.experts, 2) << table;
  EXPECT_EQ(chosen.replicas, 2) << table;
  EXPECT_EQ(chosen.stages, 2) << table;
  EXPECT_EQ(result.config.parallel.experts, 2);
  EXPECT_EQ(result.config.parallel.zero, 0);
  EXPECT_NE(result.set_flags.find("--set parallel.experts=2"), std::string::npos)
      << result.set_flags;
  EXPECT_NE(table.find("expert groups"), std::string::npos) << table;
  EXPECT_NE(table.find("split 2 ways"), std::string::npos) << table;
  for (const FitCandidate& c : result.candidates) {
    if (c.experts == 1) {
      EXPECT_FALSE(c.fits) << table;
    }
  }
  const Plan plan = MakePlan(result.config, budget);
  for (const RankMemory& rank : PredictMemory(plan)) EXPECT_LE(rank.peak.total, budget);
}

// On tensor ranks the experts fold over them, and an expert group splits each rank's fold:
// mixtral-tiny's 8 experts on 2 tensor ranks x 2 replicas (at most 4 processes) are offered split
// 2 ways (2 experts per rank), and every valid candidate's T E divides the experts.
TEST(FitTest, ExpertGroupsSplitTheFoldOfEachTensorRank) {
  const Config config = LoadConfig(std::string(BATON_SOURCE_DIR) + "/configs/mixtral-tiny.yaml",
                                   {"parallel.experts=1", "parallel.tensor=2", "parallel.stages=1",
                                    "output.final_checkpoint=false"});
  bool offered = false;
  for (const FitCandidate& c :
       FitToBudget(config, {int64_t{1} << 40, StepRates(1e9), 4}).candidates) {
    if (!c.valid) continue;
    EXPECT_EQ(config.model.moe.num_experts % (c.tensor * c.experts), 0)
        << c.tensor << " x " << c.experts;
    if (c.tensor == 2 && c.experts == 2) {
      offered = true;
      const Plan plan = MakePlan(Apply(config, c));
      EXPECT_EQ(plan.layout().experts(), 2);
      EXPECT_EQ(plan.layout().tensor(), 2);
    }
  }
  EXPECT_TRUE(offered);
}

TEST(FitTest, ReplicaBytesPerStepFollowEachZeroLevelsFormula) {
  // One stage of N parameters over R = 4 replicas, 8 micro-batches (2 per replica), fp32.
  const std::vector<std::string> base = {"parallel.stages=1", "parallel.replicas=4",
                                         "train.micro_batches=8"};
  const auto bytes = [&](std::vector<std::string> more) {
    more.insert(more.begin(), base.begin(), base.end());
    return ReplicaBytesPerStep(MakePlan(SmallCpu(more)));
  };
  const Plan plan = MakePlan(SmallCpu(base));
  const double n = static_cast<double>(
      StoredParamCount(plan.graph, 0, static_cast<int>(plan.graph.size()) - 1, plan.dims));
  const double share = 3.0 / 4.0;
  EXPECT_EQ(bytes({}), static_cast<int64_t>(2 * share * n * 4));
  EXPECT_EQ(bytes({"parallel.zero=1"}), static_cast<int64_t>(share * n * 8));
  EXPECT_EQ(bytes({"parallel.zero=2"}), bytes({"parallel.zero=1"}));
  EXPECT_EQ(bytes({"parallel.zero=3", "parallel.zero3_keep=step"}), bytes({"parallel.zero=1"}));
  // Each of a replica's 2 micro-batches gathers every layer for its forward and its backward,
  // and with checkpointing for the recompute too.
  EXPECT_EQ(bytes({"parallel.zero=3"}), static_cast<int64_t>(share * n * (4 + 4 * 4)));
  EXPECT_EQ(bytes({"parallel.zero=3", "parallel.checkpoint=every:1"}),
            static_cast<int64_t>(share * n * (4 + 6 * 4)));
  EXPECT_EQ(ReplicaBytesPerStep(MakePlan(SmallCpu({"parallel.stages=1"}))), 0);
}

}  // namespace
}  // namespace baton
