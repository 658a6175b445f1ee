// The memory planner against the ledger: predicted peaks equal the peaks RunInProcess measures.
#include "launcher/memory_planner.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "launcher/in_process.h"
#include "launcher/memory_replay.h"
#include "model/config.h"

namespace baton {
namespace {

Config LoadWith(const std::string& name, const std::vector<std::string>& base,
                const std::vector<std::string>& overrides) {
  std::vector<std::string> all = base;
  all.insert(all.end(), overrides.begin(), overrides.end());
  return LoadConfig(std::string(BATON_SOURCE_DIR) + "/configs/" + name, all);
}

// gpt-small-cpu on 4 stages for one step (peaks come from setup and step 1). Sequences of 32
// tokens keep the test fast; FullSequenceLength below checks the config's own 256.
Config SmallCpu(const std::vector<std::string>& overrides, bool full_length = false) {
  std::vector<std::string> base = {"train.steps=1", "parallel.stages=4"};
  if (!full_length) base.push_back("data.seq_len=32");
  return LoadWith("gpt-small-cpu.yaml", base, overrides);
}

Config Tiny(const std::vector<std::string>& overrides) {
  return LoadWith("gpt-tiny.yaml",
                  {"train.steps=1", "model.num_layers=4", "model.width=64", "model.context=32",
                   "train.batch_size=8", "train.micro_batches=4"},
                  overrides);
}

// Every category within `tolerance` (relative), params/grads/optimizer exactly.
void ExpectPredictedEqualsMeasured(const Plan& plan, double tolerance, const std::string& what) {
  const std::vector<RankMemory> predicted = PredictMemory(plan, {CommTransport::kInProcess});
  const InProcessResult measured = RunInProcess(plan);
  ASSERT_EQ(predicted.size(), measured.ranks.size());
  for (size_t r = 0; r < predicted.size(); ++r) {
    const MemoryFigures& p = predicted[r].peak;
    const MemoryFigures& m = measured.ranks[r].peak;
    const std::string where = fmt::format("{}, stage {}", what, r);
    EXPECT_EQ(p[MemCategory::kParams], m[MemCategory::kParams]) << where;
    EXPECT_EQ(p[MemCategory::kGrads], m[MemCategory::kGrads]) << where;
    EXPECT_EQ(p[MemCategory::kOptimizer], m[MemCategory::kOptimizer]) << where;
    for (MemCategory c : {MemCategory::kActivations, MemCategory::kComm, MemCategory::kWorkspace}) {
      EXPECT_NEAR(static_cast<double>(p[c]), static_cast<double>(m[c]),
                  tolerance * static_cast<double>(m[c]))
          << where << ", " << Name(c);
    }
    EXPECT_NEAR(static_cast<double>(p.total), static_cast<double>(m.total),
                tolerance * static_cast<double>(m.total))
        << where << ", total";
    EXPECT_EQ(predicted[r].peak_in_flight, measured.ranks[r].peak_stashed_microbatches) << where;
  }
}

TEST(MemoryPlannerTest, PredictsTheLedgerForEveryPrecisionPolicyAndSchedule) {
  for (const char* dtype : {"fp32", "bf16", "fp16"}) {
    for (const char* policy : {"none", "every:1", "every:2", "selective"}) {
      for (const char* schedule : {"gpipe", "1f1b"}) {
        const Plan plan = MakePlan(SmallCpu({std::string("precision.dtype=") + dtype,
                                             std::string("parallel.checkpoint=") + policy,
                                             std::string("parallel.schedule=") + schedule}));
        ExpectPredictedEqualsMeasured(plan, 0.02, fmt::format("{} {} {}", dtype, policy, schedule));
      }
    }
  }
}

TEST(MemoryPlannerTest, PredictsTheLedgerAtFullSequenceLength) {
  ExpectPredictedEqualsMeasured(
      MakePlan(SmallCpu({"precision.dtype=bf16", "parallel.checkpoint=every:2"}, true)), 0.02,
      "bf16 every:2 1f1b, T=256");
}

TEST(MemoryPlannerTest, PredictsTheLedgerForZeroBubbleAndInterleavedSchedules) {
  ExpectPredictedEqualsMeasured(MakePlan(Tiny({"parallel.stages=2", "parallel.schedule=zb-h1"})),
                                0.02, "zb-h1");
  ExpectPredictedEqualsMeasured(
      MakePlan(Tiny({"parallel.stages=2", "parallel.schedule=zb-h1", "precision.dtype=bf16",
                     "parallel.checkpoint=selective"})),
      0.02, "zb-h1 bf16 selective");
  ExpectPredictedEqualsMeasured(
      MakePlan(Tiny({"parallel.stages=2", "parallel.schedule=interleaved", "parallel.chunks=2",
                     "parallel.checkpoint=every:1"})),
      0.02, "interleaved");
}

TEST(MemoryPlannerTest, OneRankHoldingBothEndsBooksTheTiedEmbeddingOnceAfterSetup) {
  const Plan plan = MakePlan(Tiny({"parallel.stages=1", "precision.dtype=bf16"}));
  ExpectPredictedEqualsMeasured(plan, 0.0, "one stage");
  // The head builds its own wte before StageModel shares the embedding's: the params peak holds
  // both, the optimizer one master, m and v.
  const RankMemory rank = PredictMemory(plan).front();
  const int last = static_cast<int>(plan.graph.size()) - 1;
  const int64_t wte = int64_t{plan.dims.vocab_size} * plan.dims.width;
  EXPECT_EQ(rank.peak[MemCategory::kParams],
            ParamBytes(plan.graph, 0, last, plan.dims, DType::kBF16) + 2 * wte);
  EXPECT_EQ(rank.peak[MemCategory::kGrads], GradBytes(plan.graph, 0, last, plan.dims));
  EXPECT_EQ(rank.peak[MemCategory::kOptimizer],
            ParamBytes(plan.graph, 0, last, plan.dims, DType::kBF16) / 2 * 12);
}

TEST(MemoryPlannerTest, GlooStagesTheTiedGradientOnTheFirstAndLastStage) {
  const Plan plan = MakePlan(Tiny({"parallel.stages=3"}));
  const std::vector<RankMemory> gloo = PredictMemory(plan);
  const int64_t wte_grad = int64_t{plan.dims.vocab_size} * plan.dims.width * 4;
  EXPECT_EQ(gloo[0].peak[MemCategory::kComm], wte_grad);
  EXPECT_EQ(gloo[1].peak[MemCategory::kComm], 0);
  EXPECT_EQ(gloo[2].peak[MemCategory::kComm], wte_grad);
  for (const RankMemory& r : PredictMemory(plan, {CommTransport::kInProcess})) {
    EXPECT_EQ(r.peak[MemCategory::kComm], 0);
  }
}

TEST(MemoryPlannerTest, OneFOneBHoldsStagesMinusRankMicroBatchesAndGpipeAll) {
  const std::vector<RankMemory> one_f_one_b = PredictMemory(MakePlan(SmallCpu({})));
  const std::vector<RankMemory> gpipe =
      PredictMemory(MakePlan(SmallCpu({"parallel.schedule=gpipe"})));
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(one_f_one_b[static_cast<size_t>(s)].peak_in_flight, 4 - s);
    EXPECT_EQ(gpipe[static_cast<size_t>(s)].peak_in_flight, 8);
    EXPECT_LT(one_f_one_b[static_cast<size_t>(s)].peak[MemCategory::kActivations],
              gpipe[static_cast<size_t>(s)].peak[MemCategory::kActivations]);
  }
}

// The replay's stash agrees with the cost model's closed forms (model/cost.h) for every layer.
TEST(MemoryReplayTest, StashesMatchTheCostModel) {
  const ModelDims dims{256, 32, 2, 4, 64};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (bool selective : {false, true}) {
      for (const LayerSpec& spec : GptGraph(dims)) {
        MemoryLedger ledger;
        ReplayContext ctx;
        ctx.ledger = &ledger;
        ctx.dims = dims;
        ctx.batch = 2;
        ctx.seq = 16;
        ctx.act_dtype = ctx.param_dtype = dtype;
        ctx.selective = selective;
        const MicroBatchShape shape{ctx.batch, ctx.seq, dtype, selective};
        const std::string what =
            fmt::format("{} {} selective={}", spec.name, Name(dtype), selective);
        SymTensor x;
        if (spec.kind != LayerKind::kEmbedding) x = ctx.Act(ctx.rows() * dims.width);
        const int64_t before = ledger.current(MemCategory::kActivations);
        const int64_t input = spec.kind == LayerKind::kEmbedding ? 0 : before;
        SymStash stash;
        SymTensor y = ReplayForward(ctx, spec, x, stash);
        const int64_t output = OutputBytes(spec, dims, shape);
        EXPECT_EQ(ledger.current(MemCategory::kActivations) - before + input - output,
                  StashBytes(spec, dims, shape))
            << what;
        EXPECT_EQ(ledger.current(MemCategory::kWorkspace), 0) << what;
        x = SymTensor();
        y = SymTensor();
        SymTensor dy;
        if (spec.kind != LayerKind::kHead) dy = ctx.Act(ctx.rows() * dims.width);
        SymTensor dx = ReplayBackward(ctx, spec, dy, stash, /*defer_weights=*/true);
        dy = SymTensor();
        dx = SymTensor();
        // Only what BackwardInput leaves for BackwardWeight is still booked (dy among it).
        EXPECT_EQ(ledger.current(MemCategory::kActivations), WeightStashBytes(spec, dims, shape))
            << what;
        ReplayBackwardWeight(ctx, spec, stash);
        EXPECT_EQ(ledger.current(MemCategory::kActivations), 0) << what;
      }
    }
  }
}

TEST(ByteSizeTest, ParsesBinaryDecimalAndPlainSizes) {
  EXPECT_EQ(ParseByteSize("24GiB"), int64_t{24} << 30);
  EXPECT_EQ(ParseByteSize("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(ParseByteSize("1.5GB"), 1500000000);
  EXPECT_EQ(ParseByteSize("4096"), 4096);
  EXPECT_EQ(ParseByteSize("64 KiB"), 65536);
  EXPECT_EQ(ParseByteSize("10B"), 10);
  for (const char* bad : {"", "GiB", "12 parsecs", "1.2.3MB", "-5MiB"}) {
    EXPECT_THROW(ParseByteSize(bad), Error) << bad;
  }
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(100), "100 B");
  EXPECT_EQ(FormatBytes(int64_t{24} << 30), "24.00 GiB");
}

}  // namespace
}  // namespace baton
