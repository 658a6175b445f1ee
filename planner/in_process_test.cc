#include "planner/in_process.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/temp_dir.h"
#include "kernels/backend_factory.h"
#include "planner/planner.h"

namespace baton {
namespace {

Config TinyConfig(const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {
      "model.num_layers=2", "model.width=32",        "model.context=16", "model.num_heads=2",
      "train.batch_size=4", "train.micro_batches=4", "train.steps=2",    "train.warmup_steps=0"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return LoadConfig(std::string(BATON_SOURCE_DIR) + "/configs/gpt-tiny.yaml", all);
}

TEST(InProcessTest, CheckpointingEveryLayerAndSelectiveAreBitIdenticalToNone) {
  for (const char* schedule : {"1f1b", "zb-h1"}) {
    const std::string s = std::string("parallel.schedule=") + schedule;
    const InProcessResult none = RunInProcess(MakePlan(TinyConfig({s, "parallel.stages=2"})));
    for (const char* policy : {"every:1", "every:2", "selective"}) {
      const InProcessResult other = RunInProcess(MakePlan(
          TinyConfig({s, "parallel.stages=2", std::string("parallel.checkpoint=") + policy})));
      EXPECT_EQ(other.losses, none.losses) << schedule << " " << policy;
      EXPECT_EQ(other.param_checksum, none.param_checksum) << schedule << " " << policy;
    }
  }
}

TEST(InProcessTest, EvalLossIsBitIdenticalOnEveryCutAndLeavesTrainingUntouched) {
  const std::vector<std::string> eval = {"data.eval_fraction=0.01", "train.eval_every=2",
                                         "train.eval_batches=3", "train.steps=3",
                                         "model.num_layers=4"};
  const auto with = [&](std::vector<std::string> more) {
    more.insert(more.end(), eval.begin(), eval.end());
    return RunInProcess(MakePlan(TinyConfig(more)));
  };
  const InProcessResult one = with({"parallel.stages=1"});
  const std::vector<double> reference = one.eval_losses;
  ASSERT_EQ(reference.size(), 2u);  // after step 2, and after the last step (3)
  EXPECT_TRUE(std::isfinite(reference[0]));
  EXPECT_NE(reference[0], reference[1]);  // step 3 changed the weights
  EXPECT_GT(reference[0], 0.0);
  for (const std::vector<std::string>& cut : std::vector<std::vector<std::string>>{
           {"parallel.stages=4"},
           {"parallel.stages=2", "parallel.schedule=gpipe"},
           {"parallel.stages=3", "parallel.schedule=zb-h1"},
           {"parallel.stages=2", "parallel.schedule=interleaved", "parallel.chunks=2"},
           {"parallel.stages=2", "parallel.checkpoint=every:1"}}) {
    const InProcessResult other = with(cut);
    EXPECT_EQ(other.eval_losses, reference) << cut.front() << " " << cut.back();
    EXPECT_EQ(other.param_checksum, one.param_checksum) << cut.front() << " " << cut.back();
  }
  // Evaluating changes nothing that training computes.
  const InProcessResult plain = RunInProcess(MakePlan(TinyConfig(
      {"parallel.stages=2", "data.eval_fraction=0.01", "train.steps=3", "model.num_layers=4"})));
  EXPECT_EQ(plain.param_checksum, one.param_checksum);
  EXPECT_EQ(plain.losses, one.losses);
  EXPECT_TRUE(plain.eval_losses.empty());
}

// Packed documents (newline-separated "documents" of the licence texts): losses and parameters
// are the same bits on every stage count, schedule, checkpointing policy and thread count, and
// so are the packed evaluation losses; and they differ from the unpacked run's (so packing is not
// silently ignored).
TEST(InProcessTest, PackedDocumentsAreBitIdenticalOnEveryCut) {
  const std::vector<std::string> packing = {"data.packing=true",       "data.document_separator=10",
                                            "model.num_layers=4",      "train.steps=3",
                                            "data.eval_fraction=0.01", "train.eval_every=3"};
  const auto with = [&](std::vector<std::string> more) {
    more.insert(more.end(), packing.begin(), packing.end());
    return RunInProcess(MakePlan(TinyConfig(more)));
  };
  const InProcessResult one = with({"parallel.stages=1"});
  ASSERT_EQ(one.losses.size(), 3u);
  EXPECT_TRUE(std::isfinite(one.losses[0]));
  ASSERT_EQ(one.eval_losses.size(), 1u);  // packed evaluation windows too
  for (const std::vector<std::string>& cut : std::vector<std::vector<std::string>>{
           {"parallel.stages=2"},
           {"parallel.stages=4", "parallel.schedule=gpipe"},
           {"parallel.stages=3", "parallel.schedule=zb-h1"},
           {"parallel.stages=2", "parallel.schedule=interleaved", "parallel.chunks=2"},
           {"parallel.stages=2", "parallel.checkpoint=every:1"},
           {"parallel.stages=2", "parallel.checkpoint=selective"},
           {"parallel.stages=2", "device.threads=2"}}) {
    const InProcessResult other = with(cut);
    EXPECT_EQ(other.losses, one.losses) << fmt::format("{}", fmt::join(cut, " "));
    EXPECT_EQ(other.param_checksum, one.param_checksum) << fmt::format("{}", fmt::join(cut, " "));
    EXPECT_EQ(other.eval_losses, one.eval_losses) << fmt::format("{}", fmt::join(cut, " "));
  }
  // The same run with packing off (same data, same held-out tail).
  const InProcessResult unpacked = RunInProcess(MakePlan(TinyConfig(
      {"parallel.stages=2", "model.num_layers=4", "train.steps=3", "data.eval_fraction=0.01"})));
  EXPECT_NE(unpacked.losses, one.losses);
}

// A token file is checked against model.vocab_size before the model is allocated: with a large
// vocabulary the allocation failed first (a bare std::bad_alloc) and the data was never named.
// Here nothing of the model is booked by the time the data's error is thrown.
TEST(InProcessTest, DataIsCheckedAgainstTheVocabularyBeforeTheModelIsAllocated) {
  const test_util::TempDir dir("baton-in-process-test");
  const std::string path = dir / "wide.bin";
  std::vector<uint16_t> tokens(64, 7);
  tokens[10] = 300;  // past gpt-tiny's 256 ids
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()),
             static_cast<std::streamsize>(tokens.size() * sizeof(uint16_t)));
  const Plan plan =
      MakePlan(TinyConfig({"parallel.stages=1", "data.path=" + path, "data.format=bin"}));
  MemoryLedger ledger;
  const std::unique_ptr<Backend> backend =
      MakeBackend(DeviceForLocalRank(DeviceType::kCpu, 0), ledger, 1);
  try {
    Trainer trainer(TrainerSetupFor(plan, 0, nullptr), *backend);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(path + ": token 300 at position 10 is >= "
                                                      "vocab_size 256"));
  }
  EXPECT_EQ(ledger.Peak().total, 0);  // no parameter, gradient or optimizer state was allocated
}

// Packed rows made only of separators leave no target to predict: training stops at the first
// such micro-batch naming it (not a loss and grad norm of 0.0), and evaluation likewise (not a
// perplexity of 1.0). Every stage packs the rows, so every stage stops there.
TEST(InProcessTest, PackedRowsOfSeparatorsOnlyAreAnErrorNotALossOfZero) {
  const test_util::TempDir dir("baton-in-process-test");
  const std::string path = dir / "newlines.txt";
  std::ofstream(path) << std::string(4096, '\n');
  for (const char* stages : {"parallel.stages=1", "parallel.stages=2"}) {
    try {
      RunInProcess(MakePlan(TinyConfig(
          {stages, "data.path=" + path, "data.packing=true", "data.document_separator=10"})));
      ADD_FAILURE() << "no error " << stages;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("step 1: micro-batch 0 of " + path +
                                                 ": all 1 x 16 tokens are "
                                                 "data.document_separator 10"));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("the loss is undefined"));
    }
  }
  // Held-out data of separators only: the evaluation after step 1 stops, naming its windows.
  try {
    RunInProcess(MakePlan(
        TinyConfig({"parallel.stages=2", "data.eval_path=" + path, "train.eval_every=1",
                    "train.eval_batches=1", "data.packing=true", "data.document_separator=10"})));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("evaluation: windows 0 to 0 of " + path +
                                               ": all 1 x 16 tokens are"));
  }
}

TEST(InProcessTest, NonFiniteLossStopsEveryRankAtThatStepNamingIt) {
  // A learning rate of 1e6 without clipping: the weights blow up within a few steps.
  const Plan plan = MakePlan(
      TinyConfig({"parallel.stages=2", "train.lr=1e6", "train.grad_clip=0", "train.steps=30"}));
  try {
    RunInProcess(plan);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_THAT(message, ::testing::ContainsRegex("step [0-9]+: the (loss|gradient norm) is not "
                                                  "finite"));
    EXPECT_THAT(message, ::testing::HasSubstr("train.lr 1000000"));
  }
}

// bf16 is as deterministic as fp32 on whichever 16-bit GEMM path this machine takes (oneDNN's
// bf16 matmul where the CPU multiplies bf16, else bf16 staged to f32; kernels/cpu/gemm.h): the
// GEMM blocks depend on the shape only, so losses and parameters are the same bits for any
// thread count and any stage count. 256-row GEMMs here, two blocks each.
TEST(InProcessTest, Bf16IsBitIdenticalAcrossThreadAndStageCounts) {
  const std::vector<std::string> base = {
      "precision.dtype=bf16", "model.num_layers=4",    "model.width=64", "model.context=64",
      "train.batch_size=8",   "train.micro_batches=2", "train.steps=2"};
  const auto run = [&](int stages, int threads) {
    std::vector<std::string> overrides = base;
    overrides.push_back(fmt::format("parallel.stages={}", stages));
    overrides.push_back(fmt::format("device.threads={}", threads));
    return RunInProcess(MakePlan(TinyConfig(overrides)));
  };
  const InProcessResult reference = run(1, 1);
  ASSERT_EQ(reference.losses.size(), 2u);
  for (const auto& [stages, threads] :
       std::vector<std::pair<int, int>>{{1, 2}, {2, 1}, {2, 2}, {4, 1}}) {
    const InProcessResult other = run(stages, threads);
    EXPECT_EQ(other.losses, reference.losses) << stages << " stage(s), " << threads << " thread(s)";
    EXPECT_EQ(other.param_checksum, reference.param_checksum)
        << stages << " stage(s), " << threads << " thread(s)";
  }
}

TEST(InProcessTest, OneFOneBStashesAtMostStagesMinusRankMicroBatches) {
  const InProcessResult r =
      RunInProcess(MakePlan(TinyConfig({"parallel.stages=4", "model.num_layers=6"})));
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(r.ranks[static_cast<size_t>(s)].peak_stashed_microbatches, std::min(4 - s, 4)) << s;
  }
  const InProcessResult gpipe = RunInProcess(
      MakePlan(TinyConfig({"parallel.stages=4", "model.num_layers=6", "parallel.schedule=gpipe"})));
  for (const InProcessRank& rank : gpipe.ranks) EXPECT_EQ(rank.peak_stashed_microbatches, 4);
}

TEST(InProcessTest, CheckpointingEveryLayerCutsTheActivationPeak) {
  const Config base =
      TinyConfig({"parallel.stages=2", "model.num_layers=6", "model.width=64", "model.context=64"});
  Config checkpointed = base;
  checkpointed.parallel.checkpoint = CheckpointPolicy::Every(1);
  const InProcessResult full = RunInProcess(MakePlan(base));
  const InProcessResult cut = RunInProcess(MakePlan(checkpointed));
  const int64_t before = full.ranks[0].peak[MemCategory::kActivations];
  const int64_t after = cut.ranks[0].peak[MemCategory::kActivations];
  EXPECT_LT(after, before);
  RecordProperty("activations_before", std::to_string(before));
  RecordProperty("activations_after", std::to_string(after));
}

TEST(InProcessReplicaTest, ZeroThreeHoldsAShardAndTheLayersInUse) {
  // Eight blocks on one stage over four replicas, one micro-batch each: ZeRO-3's parameters'
  // peak is a quarter of them plus the layers in use (one at a time, or with zero3_keep step
  // all of them by the backward), so params + grads + optimizer state fall well below ZeRO-1's
  // and ZeRO-2's; the optimizer's shard is ZeRO-1's to the byte.
  const std::vector<std::string> base = {"parallel.stages=1",     "parallel.replicas=4",
                                         "model.num_layers=8",    "train.batch_size=8",
                                         "train.micro_batches=4", "train.steps=3"};
  std::map<std::string, InProcessResult> runs;
  for (const char* zero : {"1", "2", "3"}) {
    std::vector<std::string> config = base;
    config.push_back(std::string("parallel.zero=") + zero);
    runs[zero] = RunInProcess(MakePlan(TinyConfig(config)));
  }
  std::vector<std::string> kept = base;
  kept.insert(kept.end(), {"parallel.zero=3", "parallel.zero3_keep=step"});
  runs["3 step"] = RunInProcess(MakePlan(TinyConfig(kept)));
  const auto state = [](const MemoryFigures& m) {
    return m[MemCategory::kParams] + m[MemCategory::kGrads] + m[MemCategory::kOptimizer];
  };
  for (size_t r = 0; r < 4; ++r) {
    const MemoryFigures& one = runs["1"].ranks[r].peak;
    const MemoryFigures& two = runs["2"].ranks[r].peak;
    const MemoryFigures& three = runs["3"].ranks[r].peak;
    const MemoryFigures& step = runs["3 step"].ranks[r].peak;
    EXPECT_EQ(runs["3"].losses, runs["1"].losses);
    EXPECT_EQ(runs["3 step"].param_checksum, runs["1"].param_checksum);
    EXPECT_EQ(three[MemCategory::kOptimizer], one[MemCategory::kOptimizer]) << r;
    // A quarter of the parameters (the build's peak aside: one layer at a time beside its
    // shard) and the largest layer in use, well below all of them.
    EXPECT_LT(three[MemCategory::kParams], one[MemCategory::kParams] / 2) << r;
    EXPECT_LE(three[MemCategory::kParams], step[MemCategory::kParams]) << r;
    EXPECT_LT(state(three), state(two)) << r;
    EXPECT_LT(state(two), state(one)) << r;
    // The gathers' buffer (comm: R x B elements, here as large as the stage's parameters,
    // at most 4 MiB) aside.
    EXPECT_LT(three.total - three[MemCategory::kComm], two.total - two[MemCategory::kComm]) << r;
    RecordProperty(
        fmt::format("rank {} params + grads + optimizer zero1 / zero2 / zero3 / "
                    "zero3 step",
                    r),
        fmt::format("{} / {} / {} / {}", state(one), state(two), state(three), state(step)));
  }
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

TEST(InProcessTest, Fp16OverflowSkipsBacksOffAndRecoversOnEveryStageTogether) {
  // 2^40 overflows fp16 gradients at once; each skipped step halves the scale.
  const InProcessResult r =
      RunInProcess(MakePlan(TinyConfig({"parallel.stages=2", "precision.dtype=fp16",
                                        "precision.initial_loss_scale=1.0e12", "train.steps=40"})));
  const auto& first = r.ranks[0].steps;
  const auto& last = r.ranks[1].steps;
  ASSERT_EQ(first.size(), 40u);
  EXPECT_TRUE(first.front().skipped);
  EXPECT_FALSE(first.back().skipped);
  int skipped = 0;
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i].skipped, last[i].skipped) << "step " << i + 1;
    EXPECT_EQ(first[i].loss_scale, last[i].loss_scale) << "step " << i + 1;
    skipped += first[i].skipped;
    if (i > 0 && first[i - 1].skipped) {
      EXPECT_EQ(first[i].loss_scale, first[i - 1].loss_scale / 2) << "step " << i + 1;
    }
  }
  EXPECT_GT(skipped, 5);
  EXPECT_LT(skipped, 35);
  // Once the scale fits, training proceeds: the loss falls from its start.
  EXPECT_LT(r.losses.back(), r.losses.front());
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

// Cross-layer sharing (model.share): a cut that keeps every share group on one stage trains
// bit-identically to one stage; a cut that splits a group keeps one copy per stage, sums their
// gradients across stages and stays within 1e-6 of one stage, deterministically, every copy of
// every shared parameter holding the same bits.
Config ShareConfig(const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {"model.num_layers=4", "model.share.group=2",  "train.steps=50",
                                  "model.width=32",     "model.context=16",     "model.num_heads=2",
                                  "train.batch_size=4", "train.micro_batches=4"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return LoadConfig(std::string(BATON_SOURCE_DIR) + "/configs/gpt-tiny.yaml", all);
}

void ExpectCopiesAgree(const InProcessResult& result, const std::string& what) {
  std::map<std::string, uint64_t> seen;
  int compared = 0;
  for (const InProcessRank& rank : result.ranks) {
    for (const auto& [name, digest] : rank.tied_digests) {
      const auto [it, first] = seen.emplace(name, digest);
      if (!first) {
        EXPECT_EQ(it->second, digest) << what << ": " << name;
        ++compared;
      }
    }
  }
  ::testing::Test::RecordProperty(what + "_copies_compared", compared);
}

TEST(InProcessShareTest, GroupsKeptWithinStagesAreBitIdenticalToOneStage) {
  for (const char* what : {"all", "attention", "mlp"}) {
    const std::string w = std::string("model.share.what=") + what;
    const InProcessResult one = RunInProcess(MakePlan(ShareConfig({w, "train.steps=10"})));
    const Plan two = MakePlan(ShareConfig({w, "train.steps=10", "parallel.stages=2"}));
    EXPECT_TRUE(SplitShareGroups(two).empty()) << what;
    const InProcessResult other = RunInProcess(two);
    EXPECT_EQ(other.losses, one.losses) << what;
    EXPECT_EQ(other.param_checksum, one.param_checksum) << what;
    EXPECT_LT(one.losses.back(), one.losses.front()) << what;  // it learns
    // Zero-bubble: the weight-gradient GEMMs run later, in the same order per stage.
    const InProcessResult zb = RunInProcess(MakePlan(
        ShareConfig({w, "train.steps=10", "parallel.stages=2", "parallel.schedule=zb-h1"})));
    EXPECT_EQ(zb.losses, one.losses) << what << " zb-h1";
    EXPECT_EQ(zb.param_checksum, one.param_checksum) << what << " zb-h1";
  }
}

TEST(InProcessShareTest, AGroupSplitAcrossStagesStaysWithinOneInAMillionAndIsDeterministic) {
  // All four blocks in one group, cut over three stages: every stage holds a copy.
  const InProcessResult one = RunInProcess(MakePlan(ShareConfig({"model.share.group=4"})));
  const Plan plan = MakePlan(ShareConfig({"model.share.group=4", "parallel.stages=3"}));
  ASSERT_EQ(SplitShareGroups(plan).size(), 1u);
  EXPECT_NE(SplitShareGroups(plan)[0].find("blocks 0-3 (layers 1-4) on stages 0, 1"),
            std::string::npos)
      << SplitShareGroups(plan)[0];
  const InProcessResult split = RunInProcess(plan);
  ASSERT_EQ(split.losses.size(), one.losses.size());
  double worst = 0;
  for (size_t s = 0; s < one.losses.size(); ++s) {
    worst = std::max(worst, std::abs(static_cast<double>(split.losses[s]) - one.losses[s]) /
                                std::abs(static_cast<double>(one.losses[s])));
  }
  EXPECT_LE(worst, 1e-6);
  RecordProperty("worst_relative_loss_difference", fmt::format("{:.3g}", worst));
  ExpectCopiesAgree(split, "split");
  const InProcessResult again = RunInProcess(plan);
  EXPECT_EQ(again.losses, split.losses);
  EXPECT_EQ(again.param_checksum, split.param_checksum);
}

// ---- Data-parallel replicas (parallel.replicas) ----

double WorstRelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t s = 0; s < std::min(a.size(), b.size()); ++s) {
    worst = std::max(
        worst, std::abs(static_cast<double>(a[s]) - b[s]) / std::abs(static_cast<double>(b[s])));
  }
  return worst;
}

// Every replica of a stage holds replica 0's bits: its layers and its tied copies.
void ExpectReplicasIdentical(const Plan& plan, const InProcessResult& result,
                             const std::string& what) {
  ASSERT_EQ(static_cast<int>(result.ranks.size()), plan.world_size()) << what;
  for (int r = plan.num_stages(); r < plan.world_size(); ++r) {
    const InProcessRank& first = result.ranks[static_cast<size_t>(plan.layout().StageOf(r))];
    const InProcessRank& other = result.ranks[static_cast<size_t>(r)];
    EXPECT_FALSE(other.digests.empty()) << what;
    EXPECT_EQ(other.digests, first.digests) << what << ", rank " << r;
    EXPECT_EQ(other.tied_digests, first.tied_digests) << what << ", rank " << r;
  }
}

TEST(InProcessReplicaTest, TwoReplicasTrainLikeOneOnTheSameGlobalBatch) {
  // The check: P=2,R=2 against P=2,R=1 over 50 steps, and P=1,R=2 against P=1,R=1.
  for (const char* stages : {"parallel.stages=2", "parallel.stages=1"}) {
    const std::vector<std::string> base = {stages, "train.steps=50", "train.batch_size=8",
                                           "train.micro_batches=4"};
    const InProcessResult one = RunInProcess(MakePlan(TinyConfig(base)));
    std::vector<std::string> two_replicas = base;
    two_replicas.push_back("parallel.replicas=2");
    const Plan plan = MakePlan(TinyConfig(two_replicas));
    ASSERT_EQ(plan.world_size(), 2 * plan.num_stages());
    ASSERT_EQ(plan.schedule.microbatches, 2);  // each replica runs half the step
    const InProcessResult two = RunInProcess(plan);
    const double worst = WorstRelativeDifference(two.losses, one.losses);
    EXPECT_LE(worst, 1e-5) << stages;
    RecordProperty(std::string(stages) + "_worst_relative_loss_difference",
                   fmt::format("{:.3g}", worst));
    EXPECT_LT(two.losses.back(), two.losses.front()) << stages;  // it learns
    ExpectReplicasIdentical(plan, two, stages);
    // Every replica's head reports the whole step's loss.
    for (int r = 0; r < plan.world_size(); ++r) {
      if (plan.layout().StageOf(r) != plan.num_stages() - 1) continue;
      EXPECT_EQ(two.ranks[static_cast<size_t>(r)].steps.back().loss, two.losses.back()) << r;
    }
    const InProcessResult again = RunInProcess(plan);
    EXPECT_EQ(again.losses, two.losses) << stages;
    EXPECT_EQ(again.param_checksum, two.param_checksum) << stages;
  }
}

// Packed documents with data-parallel replicas: every replica packs its own micro-batches, the
// replicas stay identical, and training matches one replica on the same global batch (to the
// all-reduce's rounding, as unpacked).
TEST(InProcessReplicaTest, PackedDocumentsTrainLikeOneReplica) {
  const std::vector<std::string> base = {"parallel.stages=2",          "train.steps=10",
                                         "train.batch_size=8",         "train.micro_batches=4",
                                         "data.document_separator=10", "data.packing=true"};
  const InProcessResult one = RunInProcess(MakePlan(TinyConfig(base)));
  std::vector<std::string> two_replicas = base;
  two_replicas.push_back("parallel.replicas=2");
  const Plan plan = MakePlan(TinyConfig(two_replicas));
  const InProcessResult two = RunInProcess(plan);
  EXPECT_LE(WorstRelativeDifference(two.losses, one.losses), 1e-5);
  ExpectReplicasIdentical(plan, two, "packed");
  std::vector<std::string> unpacked = base;
  unpacked.pop_back();
  EXPECT_NE(RunInProcess(MakePlan(TinyConfig(unpacked))).losses, one.losses);
}

TEST(InProcessReplicaTest, FourReplicasOfOneMicroBatchEachMatchOneReplica) {
  // More than two members: the all-reduce gathers at the lowest member and sends back.
  const std::vector<std::string> base = {"parallel.stages=2", "train.steps=10"};
  const InProcessResult one = RunInProcess(MakePlan(TinyConfig(base)));
  const Plan plan =
      MakePlan(TinyConfig({"parallel.stages=2", "train.steps=10", "parallel.replicas=4"}));
  const InProcessResult four = RunInProcess(plan);
  EXPECT_LE(WorstRelativeDifference(four.losses, one.losses), 1e-5);
  ExpectReplicasIdentical(plan, four, "4 replicas");
}

TEST(InProcessReplicaTest, SchedulesSharingAndEvaluationWorkWithReplicas) {
  const std::vector<std::string> eval = {"data.eval_fraction=0.01", "train.eval_every=2",
                                         "train.eval_batches=2",    "train.steps=4",
                                         "model.num_layers=4",      "train.batch_size=8"};
  for (const std::vector<std::string>& variant : std::vector<std::vector<std::string>>{
           {"parallel.schedule=zb-h1"},
           {"parallel.schedule=gpipe"},
           {"parallel.schedule=interleaved", "parallel.chunks=2", "train.micro_batches=8"},
           {"model.share.group=4"},
           {"precision.dtype=bf16"}}) {
    std::vector<std::string> one_config = eval;
    one_config.push_back("parallel.stages=2");
    one_config.insert(one_config.end(), variant.begin(), variant.end());
    std::vector<std::string> two_config = one_config;
    two_config.push_back("parallel.replicas=2");
    const std::string what = fmt::format("{}", fmt::join(variant, " "));
    const InProcessResult one = RunInProcess(MakePlan(TinyConfig(one_config)));
    const Plan plan = MakePlan(TinyConfig(two_config));
    const InProcessResult two = RunInProcess(plan);
    const double tolerance = variant[0] == "precision.dtype=bf16" ? 1e-2 : 1e-5;
    EXPECT_LE(WorstRelativeDifference(two.losses, one.losses), tolerance) << what;
    ExpectReplicasIdentical(plan, two, what);
    const std::vector<double> eval_one = one.eval_losses, eval_two = two.eval_losses;
    ASSERT_EQ(eval_two.size(), 2u) << what;
    for (size_t k = 0; k < eval_one.size(); ++k) {
      EXPECT_NEAR(eval_two[k], eval_one[k], tolerance * eval_one[k]) << what;
    }
  }
}

TEST(InProcessReplicaTest, ZeroOneShardsTheOptimizerAndTrainsLikeTheReplicasWithoutIt) {
  for (const char* dtype : {"precision.dtype=fp32", "precision.dtype=bf16"}) {
    for (const char* stages : {"parallel.stages=2", "parallel.stages=1"}) {
      const std::vector<std::string> base = {stages, dtype, "train.steps=30", "train.batch_size=8",
                                             "parallel.replicas=2"};
      const std::string what = std::string(stages) + " " + dtype;
      const InProcessResult plain = RunInProcess(MakePlan(TinyConfig(base)));
      std::vector<std::string> zero = base;
      zero.push_back("parallel.zero=1");
      const Plan plan = MakePlan(TinyConfig(zero));
      const InProcessResult sharded = RunInProcess(plan);
      // fp32: the 1e-6. bf16 rounds the parameters after each step, so a last-bit
      // difference in a sum (the tied sums come before the reduce-scatter) can flip a rounding.
      const double worst = WorstRelativeDifference(sharded.losses, plain.losses);
      EXPECT_LE(worst, std::string(dtype) == "precision.dtype=fp32" ? 1e-6 : 1e-3) << what;
      RecordProperty(what + " worst_relative_loss_difference", fmt::format("{:.3g}", worst));
      ExpectReplicasIdentical(plan, sharded, what);
      // Each replica keeps its half of the stage's optimizer state: together exactly the
      // unsharded bytes, each at most half of them rounded up to an element's state.
      const int64_t per_element = std::string(dtype) == "precision.dtype=fp32" ? 8 : 12;
      for (int s = 0; s < plan.num_stages(); ++s) {
        const int64_t whole = plain.ranks[static_cast<size_t>(s)].peak[MemCategory::kOptimizer];
        const int64_t a = sharded.ranks[static_cast<size_t>(s)].peak[MemCategory::kOptimizer];
        const int64_t b =
            sharded.ranks[static_cast<size_t>(s + plan.num_stages())].peak[MemCategory::kOptimizer];
        EXPECT_EQ(a + b, whole) << what << " stage " << s;
        EXPECT_LE(std::max(a, b), whole / 2 + per_element) << what << " stage " << s;
      }
      const InProcessResult again = RunInProcess(plan);
      EXPECT_EQ(again.losses, sharded.losses) << what;
      EXPECT_EQ(again.param_checksum, sharded.param_checksum) << what;
    }
  }
}

TEST(InProcessReplicaTest, ZeroOneOverFourReplicasAndZeroBubble) {
  const std::vector<std::string> base = {"parallel.stages=2", "train.steps=10",
                                         "parallel.replicas=4", "parallel.schedule=zb-h1"};
  const InProcessResult plain = RunInProcess(MakePlan(TinyConfig(base)));
  std::vector<std::string> zero = base;
  zero.push_back("parallel.zero=1");
  const Plan plan = MakePlan(TinyConfig(zero));
  const InProcessResult sharded = RunInProcess(plan);
  EXPECT_LE(WorstRelativeDifference(sharded.losses, plain.losses), 1e-6);
  ExpectReplicasIdentical(plan, sharded, "4 replicas zb-h1");
}

// The layouts ZeRO-2 and -3 are checked against ZeRO-1 on: schedules, checkpointing, mixed
// precision, tied embeddings (TinyConfig's), sharing, low rank, pruning (each replica prunes its
// shard by the whole matrices' magnitudes).
std::vector<std::vector<std::string>> ZeroVariants() {
  return {
      {"parallel.stages=2", "parallel.replicas=2"},
      {"parallel.stages=2", "parallel.replicas=2", "precision.dtype=bf16"},
      {"parallel.stages=2", "parallel.replicas=2", "precision.dtype=fp16"},
      {"parallel.stages=2", "parallel.replicas=2", "parallel.schedule=zb-h1",
       "parallel.checkpoint=every:1"},
      {"parallel.stages=2", "parallel.replicas=2", "parallel.schedule=zb-v",
       "parallel.checkpoint=selective"},
      {"parallel.stages=2", "parallel.replicas=2", "parallel.schedule=interleaved",
       "parallel.chunks=2", "model.num_layers=4"},
      {"parallel.stages=1", "parallel.replicas=4", "model.share.group=2", "model.num_layers=4"},
      {"parallel.stages=2", "parallel.replicas=2", "model.low_rank.mlp=8"},
      {"parallel.stages=2", "parallel.replicas=2", "prune.at_step=2", "prune.sparsity=0.5"},
      {"parallel.stages=2", "parallel.replicas=2", "optimizer.state=int8", "model.width=64"},
      {"parallel.stages=1", "parallel.replicas=4", "optimizer.state=int8", "model.width=64",
       "prune.at_step=2"},
      {"parallel.stages=2", "parallel.replicas=2", "prune.at_step=2", "prune.pattern=2:4",
       "precision.dtype=bf16"},
      // One micro-batch per replica: each block's gradients live through its backward only.
      {"parallel.stages=2", "parallel.replicas=4", "model.num_layers=6"},
  };
}

TEST(InProcessReplicaTest, ZeroTwoTrainsLikeZeroOneBitForBit) {
  // The same collectives in the same order: ZeRO-2 keeps its shard's sums in a buffer of their
  // own and releases the full gradients in between, so every bit equals ZeRO-1's.
  const std::vector<std::vector<std::string>> variants = ZeroVariants();
  for (const std::vector<std::string>& variant : variants) {
    std::vector<std::string> base = variant;
    base.insert(base.end(), {"train.steps=4", "train.batch_size=8", "train.micro_batches=4"});
    const std::string what = fmt::format("{}", fmt::join(variant, " "));
    std::vector<std::string> one = base, two = base;
    one.push_back("parallel.zero=1");
    two.push_back("parallel.zero=2");
    const Plan plan_one = MakePlan(TinyConfig(one)), plan_two = MakePlan(TinyConfig(two));
    const InProcessResult zero1 = RunInProcess(plan_one);
    const InProcessResult zero2 = RunInProcess(plan_two);
    EXPECT_EQ(zero2.losses, zero1.losses) << what;
    EXPECT_EQ(zero2.param_checksum, zero1.param_checksum) << what;
    ExpectReplicasIdentical(plan_two, zero2, what);
    for (size_t r = 0; r < zero2.ranks.size(); ++r) {
      const MemoryFigures &a = zero1.ranks[r].peak, &b = zero2.ranks[r].peak;
      // Only the gradients change: ZeRO-1's peak where a step holds them all at once (each
      // replica accumulating over several micro-batches), lower where it never does.
      for (MemCategory c : kAllMemCategories) {
        if (c != MemCategory::kGrads) {
          EXPECT_EQ(b[c], a[c]) << what << " rank " << r;
        }
      }
      EXPECT_LE(b[MemCategory::kGrads], a[MemCategory::kGrads]) << what << " rank " << r;
      EXPECT_LE(b.total, a.total) << what << " rank " << r;
      if (variant == variants.back()) {
        EXPECT_LT(b[MemCategory::kGrads], a[MemCategory::kGrads]) << what << " rank " << r;
        EXPECT_LT(b.total, a.total) << what << " rank " << r;
      }
      RecordProperty(fmt::format("{} rank {} peak grads, total zero1 / zero2", what, r),
                     fmt::format("{}, {} / {}, {}", a[MemCategory::kGrads], a.total,
                                 b[MemCategory::kGrads], b.total));
    }
  }
}

// `base` (replicas, no ZeRO) against itself at ZeRO-1 and ZeRO-3: losses within 1e-6 relative
// (ZeRO sums the tied gradients first), every replica identical; the sharded runs, by level.
std::map<std::string, InProcessResult> ExpectZeroFollowsThePlainReplicas(
    const std::vector<std::string>& base) {
  const InProcessResult plain = RunInProcess(MakePlan(TinyConfig(base)));
  std::map<std::string, InProcessResult> sharded;
  for (const char* zero : {"parallel.zero=1", "parallel.zero=3"}) {
    std::vector<std::string> config = base;
    config.push_back(zero);
    const std::string what = fmt::format("{} {}", fmt::join(base, " "), zero);
    const Plan plan = MakePlan(TinyConfig(config));
    const InProcessResult& run = sharded[zero] = RunInProcess(plan);
    const double worst = WorstRelativeDifference(run.losses, plain.losses);
    EXPECT_LE(worst, 1e-6) << what;
    ExpectReplicasIdentical(plan, run, what);
    ::testing::Test::RecordProperty(what + ": worst relative loss difference",
                                    fmt::format("{:.3g}", worst));
  }
  sharded["plain"] = plain;
  return sharded;
}

TEST(InProcessReplicaTest, PrunedReplicasTrainAlikeAtEveryZeroLevel) {
  // Pruning at step 2 under ZeRO: the masks come from the whole matrices (the replicas' shards
  // of the masters gathered); a different mask would differ at once.
  for (const char* dtype : {"precision.dtype=fp32", "precision.dtype=bf16"}) {
    ExpectZeroFollowsThePlainReplicas({"parallel.stages=2", "parallel.replicas=2",
                                       "prune.at_step=2", "prune.sparsity=0.5", "train.steps=6",
                                       dtype});
  }
}

TEST(InProcessReplicaTest, EightBitStateShardsAtBlocksAndTrainsLikeTheReplicasWithoutZero) {
  // optimizer.state int8 under ZeRO: the shards are cut at quantisation blocks, so every block's
  // maximum is the unsharded one's; a cut block would quantise otherwise.
  std::map<std::string, InProcessResult> runs = ExpectZeroFollowsThePlainReplicas(
      {"parallel.stages=1", "parallel.replicas=4", "optimizer.state=int8", "model.width=64",
       "train.steps=6"});
  // Each replica keeps its shard's codes and maxima: together the unsharded bytes.
  for (const char* zero : {"parallel.zero=1", "parallel.zero=3"}) {
    int64_t together = 0;
    for (const InProcessRank& rank : runs[zero].ranks) {
      together += rank.peak[MemCategory::kOptimizer];
    }
    EXPECT_EQ(together, runs["plain"].ranks[0].peak[MemCategory::kOptimizer]) << zero;
  }
}

TEST(InProcessReplicaTest, ZeroThreeTrainsLikeZeroOneBitForBit) {
  // ZeRO-3 gathers each layer's parameters from the replicas' updated shards before each use:
  // the same values, so the same bits as ZeRO-1, with either keep policy. Only the parameters'
  // peak and comm (the gathers' buffer) differ from ZeRO-2's, and keeping gathered
  // layers for the step costs at least as much as releasing them after each use. (These tiny
  // models' embedding outweighs the rest of its stage, so their peak is not lower than ZeRO-2's:
  // ZeroThreeHoldsAShardAndTheLayersInUse checks that on a deeper model.)
  const std::vector<std::vector<std::string>> variants = ZeroVariants();
  for (const std::vector<std::string>& variant : variants) {
    std::vector<std::string> base = variant;
    base.insert(base.end(), {"train.steps=4", "train.batch_size=8", "train.micro_batches=4"});
    const std::string what = fmt::format("{}", fmt::join(variant, " "));
    std::vector<std::string> one = base, two = base, three = base, kept = base;
    one.push_back("parallel.zero=1");
    two.push_back("parallel.zero=2");
    three.push_back("parallel.zero=3");
    kept.insert(kept.end(), {"parallel.zero=3", "parallel.zero3_keep=step"});
    const InProcessResult zero1 = RunInProcess(MakePlan(TinyConfig(one)));
    const InProcessResult zero2 = RunInProcess(MakePlan(TinyConfig(two)));
    const Plan plan_three = MakePlan(TinyConfig(three));
    const InProcessResult zero3 = RunInProcess(plan_three);
    const InProcessResult zero3_step = RunInProcess(MakePlan(TinyConfig(kept)));
    for (const InProcessResult* result : {&zero3, &zero3_step}) {
      const std::string how = what + (result == &zero3 ? " microbatch" : " step");
      EXPECT_EQ(result->losses, zero1.losses) << how;
      EXPECT_EQ(result->param_checksum, zero1.param_checksum) << how;
      ExpectReplicasIdentical(plan_three, *result, how);
    }
    for (size_t r = 0; r < zero3.ranks.size(); ++r) {
      const MemoryFigures &a = zero2.ranks[r].peak, &b = zero3.ranks[r].peak,
                          &c = zero3_step.ranks[r].peak;
      for (MemCategory category : kAllMemCategories) {
        if (category != MemCategory::kParams && category != MemCategory::kComm) {
          EXPECT_EQ(b[category], a[category]) << what << " rank " << r;
        }
      }
      EXPECT_GE(b[MemCategory::kComm], a[MemCategory::kComm]) << what << " rank " << r;
      EXPECT_LE(b[MemCategory::kParams], c[MemCategory::kParams]) << what << " rank " << r;
      RecordProperty(fmt::format("{} rank {} peak params zero2 / zero3 / zero3 step", what, r),
                     fmt::format("{} / {} / {}", a[MemCategory::kParams], b[MemCategory::kParams],
                                 c[MemCategory::kParams]));
    }
  }
}

}  // namespace
}  // namespace baton
