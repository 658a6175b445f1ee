// The tuner: measured costs (profiling, what the simulator is charged) and the search (ranking,
// budget filter, errors), on synthetic measured costs so that the outcome does not depend on
// this machine's speed. No test asserts a timing.
#include "planner/tune.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "model/from_config.h"
#include "planner/fit.h"
#include "planner/memory_planner.h"
#include "planner/planner.h"
#include "scheduler/generators.h"

namespace baton {
namespace {

// gpt-tiny cut down: 4 blocks (6 layers), 4 sequences per step.
Config Tiny(const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> all = {"train.steps=1", "parallel.stages=1", "train.batch_size=4",
                                  "train.micro_batches=4", "data.seq_len=32"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return LoadConfig(std::string(BATON_SOURCE_DIR) + "/configs/gpt-tiny.yaml", all);
}

// Costs proportional to the micro-batch size: a block's forward `block` seconds per sequence,
// the head's `head`, the embedding's a tenth of a block's; B = 2F, I = W = F; selective recompute
// adds a fifth of F to B and I. Messages are slow enough that data-parallel replicas' gradient
// exchange costs more than a pipeline's bubble.
MeasuredCosts Synthetic(const Config& config, double block, double head) {
  MeasuredCosts m;
  const std::map<LayerKind, double> forward = {
      {LayerKind::kEmbedding, block / 10}, {LayerKind::kBlock, block}, {LayerKind::kHead, head}};
  for (int64_t b : TuneMicroBatchSizes(config)) {
    for (const auto& [kind, f] : forward) {
      const double fb = f * static_cast<double>(b);
      KindTimes t;
      t.plain = {fb, 2 * fb, fb, fb};
      t.selective = {fb, 2.2 * fb, 1.2 * fb, fb};
      m.layers[{DType::kF32, b}][kind] = t;
    }
  }
  for (const auto& [kind, f] : forward) {
    m.update[{DType::kF32, OptimizerState::kF32}][kind] = f / 100;
    m.params[kind] = 1000000;
  }
  m.message_latency_s = 0;
  m.message_bytes_per_s = 1e7;
  return m;
}

// Every cut of layers [first, n) into `parts` non-empty contiguous ranges, appended to `prefix`.
void EveryCut(int first, int n, int parts, std::vector<LayerRange>& prefix,
              std::vector<std::vector<LayerRange>>& out) {
  if (parts == 1) {
    prefix.push_back({first, n - 1});
    out.push_back(prefix);
    prefix.pop_back();
    return;
  }
  for (int last = first; n - (last + 1) >= parts - 1; ++last) {
    prefix.push_back({first, last});
    EveryCut(last + 1, n, parts - 1, prefix, out);
    prefix.pop_back();
  }
}

int64_t MaxOf(const std::vector<int64_t>& v) { return *std::max_element(v.begin(), v.end()); }

TEST(TuneTest, EveryTunableScheduleIsOneTheGeneratorsKnow) {
  const std::vector<std::string>& names = ScheduleNames();
  for (const TunableSchedule& s : TunableSchedules()) {
    EXPECT_NE(std::find(names.begin(), names.end(), s.name), names.end()) << s.name;
    EXPECT_GE(s.chunks, 1) << s.name;
  }
}

TEST(TuneTest, PicksTheScheduleAndCutTheSimulatorSaysWhenStagesAreImbalanced) {
  const Config config = Tiny();
  // The head costs four blocks: a cut by layer count would leave the last stage the slowest.
  const MeasuredCosts measured = Synthetic(config, 0.01, 0.04);
  TuneOptions options;
  options.max_processes = 2;
  options.top = 100000;  // check every candidate's memory, so the ranking covers all of them
  const TuneResult result = Tune(config, measured, options);
  ASSERT_FALSE(result.ranked.empty());
  EXPECT_EQ(result.checked, result.searched);
  const TuneCandidate& best = result.ranked.front();
  for (const TuneCandidate& c : result.ranked) {
    EXPECT_LE(best.prediction.seconds, c.prediction.seconds) << c.schedule << " p=" << c.stages;
  }
  ASSERT_EQ(best.stages, 2) << "a pipeline beats replicas whose exchange is slow";
  EXPECT_EQ(best.replicas, 1);
  // No other cut of the best's configuration is predicted faster: the simulator chose it.
  Config uncut = best.config;
  uncut.parallel.cut.clear();
  Plan plan = MakePlan(uncut);
  std::vector<std::vector<LayerRange>> cuts;
  std::vector<LayerRange> prefix;
  EveryCut(0, static_cast<int>(plan.graph.size()), plan.schedule.num_virtual_stages(), prefix,
           cuts);
  ASSERT_GT(cuts.size(), 3u);
  for (const std::vector<LayerRange>& cut : cuts) {
    plan.SetCut(cut);
    EXPECT_GE(PredictMeasuredStep(plan, measured).seconds, best.prediction.seconds * (1 - 1e-9))
        << "a cut ending stage 0 at layer " << cut[0].last;
  }
  // The expensive head's virtual stage holds fewer layers than the first.
  EXPECT_LT(best.cut.back().size(), best.cut.front().size());
  // The written config plans to the same cut, and so to the same predicted step.
  const Plan written = MakePlan(best.config);
  EXPECT_EQ(written.virtual_stages, best.cut);
  EXPECT_DOUBLE_EQ(PredictMeasuredStep(written, measured).seconds, best.prediction.seconds);
  EXPECT_NE(result.set_flags.find("--set parallel.stages=2"), std::string::npos)
      << result.set_flags;
}

// Tensor ranks halve every layer's work without a bubble; where their sums are cheap (a fast
// link, small activations) and the replicas' exchange is not (large layers), two tensor ranks are
// the fastest use of two processes, and the tuner says so.
TEST(TuneTest, ChoosesTensorRanksWhereTheirSumsCostLessThanABubbleOrAnExchange) {
  const Config config = Tiny();
  MeasuredCosts measured = Synthetic(config, 0.01, 0.02);
  for (auto& [kind, params] : measured.params) params = 1000000000;  // seconds to exchange
  measured.message_bytes_per_s = 1e10;
  TuneOptions options;
  options.max_processes = 2;
  options.top = 100000;
  const TuneResult result = Tune(config, measured, options);
  const TuneCandidate& best = result.ranked.front();
  EXPECT_EQ(best.tensor, 2);
  EXPECT_EQ(best.stages, 1);
  EXPECT_EQ(best.replicas, 1);
  EXPECT_EQ(best.config.parallel.tensor, 2);
  EXPECT_NE(result.set_flags.find("--set parallel.tensor=2"), std::string::npos)
      << result.set_flags;
  // Both were searched, and the memory of the tensor-parallel ones predicted per stage.
  EXPECT_TRUE(std::any_of(result.ranked.begin(), result.ranked.end(),
                          [](const TuneCandidate& c) { return c.tensor == 1 && c.stages == 2; }));
  EXPECT_EQ(best.peaks.size(), 1u);
  EXPECT_GT(best.peaks.at(0), 0);
}

TEST(TuneTest, ABudgetExcludesEveryCandidateOverIt) {
  const Config config = Tiny();
  const MeasuredCosts measured = Synthetic(config, 0.01, 0.02);
  TuneOptions options;
  options.max_processes = 2;
  options.top = 100000;
  const TuneResult unlimited = Tune(config, measured, options);
  const TuneCandidate& unbudgeted = unlimited.ranked.front();
  options.budget = MaxOf(unbudgeted.peaks) - 1;
  const TuneResult budgeted = Tune(config, measured, options);
  bool excluded = false;
  for (const TuneCandidate& c : budgeted.ranked) {
    if (c.fits) {
      EXPECT_LE(MaxOf(c.peaks), options.budget) << c.schedule << " p=" << c.stages;
    } else {
      excluded = true;
      EXPECT_GT(MaxOf(c.peaks), options.budget) << c.schedule << " p=" << c.stages;
    }
  }
  EXPECT_TRUE(excluded);
  const TuneCandidate& best = budgeted.ranked.front();
  ASSERT_TRUE(best.fits);
  EXPECT_LE(MaxOf(best.peaks), options.budget);
  EXPECT_GE(best.prediction.seconds, unbudgeted.prediction.seconds);
}

TEST(TuneTest, AnImpossibleBudgetIsAClearErrorNamingTheSmallestPeak) {
  const Config config = Tiny();
  TuneOptions options;
  options.max_processes = 2;
  options.budget = 1024;
  try {
    Tune(config, Synthetic(config, 0.01, 0.02), options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("nothing fits the memory budget 1.00 KiB: the smallest peak any of the"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("micro-batches, checkpoint"), std::string::npos) << what;
  }
}

TEST(MeasuredCostsTest, CheckpointingChargesItsRecomputeToBackward) {
  const MeasuredCosts measured = Synthetic(Tiny(), 0.01, 0.02);
  const Plan none = MakePlan(Tiny({"parallel.stages=2"}));
  const Plan every = MakePlan(Tiny({"parallel.stages=2", "parallel.checkpoint=every:1"}));
  const Plan selective = MakePlan(Tiny({"parallel.stages=2", "parallel.checkpoint=selective"}));
  for (int j = 0; j < 2; ++j) {
    const ActionCosts n = MeasuredScheduleCosts(none, measured).For(j);
    const ActionCosts e = MeasuredScheduleCosts(every, measured).For(j);
    const ActionCosts s = MeasuredScheduleCosts(selective, measured).For(j);
    EXPECT_DOUBLE_EQ(e.forward, n.forward);
    EXPECT_DOUBLE_EQ(e.backward, n.backward + n.forward);  // every:K reruns the forward
    EXPECT_DOUBLE_EQ(e.backward_input, n.backward_input + n.forward);
    EXPECT_DOUBLE_EQ(e.backward_weight, n.backward_weight);
    EXPECT_DOUBLE_EQ(s.backward, 1.1 * n.backward);  // the selective measurement itself
  }
  const StepPrediction p = PredictMeasuredStep(none, measured);
  EXPECT_GT(p.step_end, 0);
  EXPECT_DOUBLE_EQ(p.seconds, p.makespan + p.step_end + p.collectives);
}

TEST(MeasuredCostsTest, ComputeIsScaledByTheSlowdownOfTheJobsProcessCount) {
  MeasuredCosts measured = Synthetic(Tiny(), 0.01, 0.02);
  const Plan one = MakePlan(Tiny());
  const Plan two = MakePlan(Tiny({"parallel.stages=2"}));
  const ActionCosts alone = MeasuredScheduleCosts(two, measured).For(1);
  const double one_step_end = PredictMeasuredStep(one, measured).step_end;
  measured.slowdown = {{1, 1.0}, {2, 1.5}};
  const ActionCosts shared = MeasuredScheduleCosts(two, measured).For(1);
  EXPECT_DOUBLE_EQ(shared.forward, 1.5 * alone.forward);
  EXPECT_DOUBLE_EQ(shared.backward, 1.5 * alone.backward);
  EXPECT_DOUBLE_EQ(shared.communication, alone.communication);
  EXPECT_DOUBLE_EQ(PredictMeasuredStep(one, measured).step_end, one_step_end);
  // Three processes, not measured: the largest count measured below (2) applies.
  const Plan three = MakePlan(Tiny({"parallel.stages=3"}));
  measured.slowdown = {};
  const double unscaled = MeasuredScheduleCosts(three, measured).For(0).forward;
  measured.slowdown = {{1, 1.0}, {2, 1.5}};
  EXPECT_DOUBLE_EQ(MeasuredScheduleCosts(three, measured).For(0).forward, 1.5 * unscaled);
  // On a machine where only 2 compute at once, 3 processes take turns: 1.5 x 3 / 2 each.
  measured.cores = 2;
  EXPECT_DOUBLE_EQ(MeasuredScheduleCosts(three, measured).For(0).forward, 2.25 * unscaled);
  EXPECT_DOUBLE_EQ(MeasuredScheduleCosts(two, measured).For(1).forward, shared.forward);
  // Where only one computes at once, two stages take twice one's time, whatever was measured.
  measured.cores = 1;
  measured.slowdown = {{1, 1.0}};
  EXPECT_DOUBLE_EQ(MeasuredScheduleCosts(two, measured).For(1).forward, 2 * alone.forward);
}

// A busy machine can time an activation-sized message no longer than a 4-byte one: the rate is
// then printed as the bound it is, never as a difference of noise.
TEST(MeasuredCostsTest, AnUnresolvedMessageRateIsPrintedAsABound) {
  MeasuredCosts measured = Synthetic(Tiny(), 0.01, 0.02);
  measured.message_latency_s = 1e-3;
  measured.message_bytes_per_s = 2e9;
  EXPECT_NE(FormatMeasuredCosts(measured).find("1000.0 us latency, 2.00 GB/s (Gloo, loopback)\n"),
            std::string::npos)
      << FormatMeasuredCosts(measured);
  measured.message_rate_bounded = true;
  const std::string text = FormatMeasuredCosts(measured);
  EXPECT_NE(text.find("1000.0 us latency, >= 2.00 GB/s (Gloo, loopback): an activation-sized "
                      "message took under twice"),
            std::string::npos)
      << text;
}

TEST(MeasuredCostsTest, ProfilingGivesPositiveFiniteTimesForEveryLayerKind) {
  const Config config = Tiny({"model.width=32", "model.num_heads=2", "data.seq_len=8"});
  ProfileRequest request;
  request.dtypes = {DType::kF32};
  request.micro_batch_sizes = {1, 2};
  request.states = {OptimizerState::kF32, OptimizerState::kInt8};
  request.repeats = 1;
  request.concurrency = {1, 2};
  const MeasuredCosts m = MeasureCosts(config, request);
  EXPECT_GE(m.cores, 1);
  ASSERT_EQ(m.slowdown.count(2), 1u);
  EXPECT_TRUE(std::isfinite(m.slowdown.at(2)) && m.slowdown.at(2) >= 1.0);
  const auto positive = [](double s) { return std::isfinite(s) && s > 0; };
  for (int64_t b : request.micro_batch_sizes) {
    const auto& kinds = m.layers.at({DType::kF32, b});
    for (LayerKind kind : {LayerKind::kEmbedding, LayerKind::kBlock, LayerKind::kHead}) {
      ASSERT_EQ(kinds.count(kind), 1u) << Name(kind);
      for (const LayerTimes& t : {kinds.at(kind).plain, kinds.at(kind).selective}) {
        EXPECT_TRUE(positive(t.forward)) << Name(kind);
        EXPECT_TRUE(positive(t.backward)) << Name(kind);
        EXPECT_TRUE(positive(t.backward_input)) << Name(kind);
        EXPECT_TRUE(positive(t.backward_weight)) << Name(kind);
      }
    }
  }
  for (OptimizerState state : request.states) {
    for (const auto& [kind, seconds] : m.update.at({DType::kF32, state})) {
      EXPECT_TRUE(positive(seconds)) << Name(kind);
      EXPECT_GT(m.params.at(kind), 0) << Name(kind);
    }
  }
  EXPECT_TRUE(positive(m.message_latency_s));
  EXPECT_TRUE(positive(m.message_bytes_per_s));
  const Plan plan = MakePlan(Tiny({"model.width=32", "model.num_heads=2", "data.seq_len=8",
                                   "parallel.stages=2", "train.micro_batches=2"}));
  EXPECT_TRUE(positive(PredictMeasuredStep(plan, m).seconds));
}

// Synthetic measured costs covering `request`: a block's forward `block[dtype]` seconds per
// sequence, other layers a tenth of it; B = 2F, I = W = F (selective: B and I a fifth more).
MeasuredCosts SyntheticFor(const ProfileRequest& request, const std::map<DType, double>& block) {
  MeasuredCosts m;
  for (DType dtype : request.dtypes) {
    for (LayerKind kind : {LayerKind::kEmbedding, LayerKind::kBlock, LayerKind::kHead}) {
      const double f = block.at(dtype) * (kind == LayerKind::kBlock ? 1.0 : 0.1);
      for (int64_t b : request.micro_batch_sizes) {
        const double fb = f * static_cast<double>(b);
        m.layers[{dtype, b}][kind] = {{fb, 2 * fb, fb, fb}, {fb, 2.2 * fb, 1.2 * fb, fb}};
      }
      for (OptimizerState state : request.states) m.update[{dtype, state}][kind] = f / 100;
      m.params[kind] = 1000;
    }
  }
  return m;
}

TEST(FitWithMeasuredCostsTest, RanksByTheMeasuredStepNotTheFlopRates) {
  // gpt-small-cpu on 4 stages: a budget that bf16 and fp32 with selective recompute both meet
  // and the configuration as it is does not (as FitTest.PrecisionAndCheckpointingCompete...).
  const auto small = [](const std::vector<std::string>& overrides) {
    std::vector<std::string> all = {"train.steps=1", "parallel.stages=4"};
    all.insert(all.end(), overrides.begin(), overrides.end());
    return LoadConfig(std::string(BATON_SOURCE_DIR) + "/configs/gpt-small-cpu.yaml", all);
  };
  const auto leanest = [&](const std::vector<std::string>& overrides) {
    return MaxOf(PartitionWithinBudget(MakePlan(small(overrides)), 1).totals);
  };
  const int64_t budget =
      std::max(leanest({"precision.dtype=bf16"}), leanest({"parallel.checkpoint=selective"}));
  ASSERT_LT(budget, leanest({}));
  const Config base = small({});
  const ProfileRequest request = FitProfileRequest(base);
  // GPU-like FLOP rates say bf16, but bf16 measured twice as slow here: fp32 is chosen.
  const MeasuredCosts slow_bf16 =
      SyntheticFor(request, {{DType::kF32, 0.01}, {DType::kBF16, 0.02}});
  FitOptions options{budget, StepRates(60e12, 800e12), 0, 0, &slow_bf16};
  const FitResult fp32 = FitToBudget(base, options);
  EXPECT_EQ(fp32.config.precision.dtype, DType::kF32) << FormatFitTable(fp32, budget);
  // CPU-like rates say fp32, but bf16 measured four times as fast: bf16 is chosen.
  const MeasuredCosts fast_bf16 =
      SyntheticFor(request, {{DType::kF32, 0.01}, {DType::kBF16, 0.0025}});
  options = {budget, StepRates(100e9, 50e9), 0, 0, &fast_bf16};
  const FitResult bf16 = FitToBudget(base, options);
  EXPECT_EQ(bf16.config.precision.dtype, DType::kBF16) << FormatFitTable(bf16, budget);
  const Plan chosen = MakePlan(bf16.config, budget);
  EXPECT_DOUBLE_EQ(bf16.candidates[static_cast<size_t>(bf16.chosen)].step_seconds,
                   PredictMeasuredStep(chosen, fast_bf16).seconds);
}

TEST(ExplicitCutTest, ParallelCutIsTheCutTakenAsIs) {
  const Plan plan = MakePlan(Tiny({"parallel.stages=2", "parallel.cut=0-0,1-5"}));
  EXPECT_EQ(plan.virtual_stages, (std::vector<LayerRange>{{0, 0}, {1, 5}}));
  EXPECT_THROW(MakePlan(Tiny({"parallel.stages=2", "parallel.cut=0-0,1-4"})), Error);
  EXPECT_THROW(Tiny({"parallel.stages=2", "parallel.cut=0-0,2-5"}), Error);
  EXPECT_THROW(Tiny({"parallel.stages=3", "parallel.cut=0-0,1-5"}), Error);
  EXPECT_THROW(ParseCut("0-"), Error);
  EXPECT_EQ(FormatCut(ParseCut("0-2,3-3,4-9")), "0-2,3-3,4-9");
}

}  // namespace
}  // namespace baton
