// The memory planner against the ledger: predicted peaks equal the peaks RunInProcess measures.
#include "planner/memory_planner.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "comm/shared_memory.h"
#include "config/config.h"
#include "core/error.h"
#include "core/scoped_env.h"
#include "kernels/backend.h"
#include "kernels/backend_factory.h"
#include "model/cost.h"
#include "model/layer.h"
#include "planner/in_process.h"
#include "planner/planner.h"

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
    EXPECT_EQ(p[MemCategory::kCheckpoint], m[MemCategory::kCheckpoint]) << where;
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

// Materialized attention (flash is the default everywhere above) at full length, where its
// T x T probabilities dominate (stashed, or recomputed into workspace under selective):
// predicted = measured, and a higher total peak than flash's.
TEST(MemoryPlannerTest, PredictsTheLedgerForMaterializedAttention) {
  for (const char* setting : {"fp32 none", "bf16 selective"}) {
    const std::string text = setting;
    const std::string dtype = text.substr(0, 4), policy = text.substr(5);
    const std::vector<std::string> common = {"precision.dtype=" + dtype,
                                             "parallel.checkpoint=" + policy};
    std::vector<std::string> materialized = common;
    materialized.push_back("model.attention=materialized");
    const Plan plan = MakePlan(SmallCpu(materialized, true));
    ExpectPredictedEqualsMeasured(plan, 0.02, std::string("materialized ") + setting);
    const std::vector<RankMemory> flash = PredictMemory(MakePlan(SmallCpu(common, true)));
    const std::vector<RankMemory> probs = PredictMemory(plan);
    EXPECT_LT(flash[0].peak.total, probs[0].peak.total) << setting;
  }
}

// 8-bit optimizer state: predicted = measured, and the optimizer's bytes are about a quarter of
// f32 state's (2 bytes of codes + 8/256 of absmax per element, small tensors at 8 bytes).
// Packed documents: every stage holds each micro-batch's segment starts (B,T) i32, booked as
// activations on the meta backend as on the real one; predicted = measured, and the packed run
// books more activations on a middle stage than the unpacked one.
TEST(MemoryPlannerTest, PredictsTheLedgerForPackedDocuments) {
  for (const char* schedule : {"1f1b", "zb-h1"}) {
    const std::vector<std::string> common = {std::string("parallel.schedule=") + schedule,
                                             "parallel.checkpoint=every:1"};
    std::vector<std::string> packed = common;
    packed.insert(packed.end(), {"data.packing=true", "data.document_separator=10"});
    const Plan plan = MakePlan(SmallCpu(packed));
    ExpectPredictedEqualsMeasured(plan, 0.0, std::string("packed ") + schedule);
    const std::vector<RankMemory> plain = PredictMemory(MakePlan(SmallCpu(common)));
    const std::vector<RankMemory> with = PredictMemory(plan);
    EXPECT_GT(with[1].peak[MemCategory::kActivations], plain[1].peak[MemCategory::kActivations]);
  }
}

TEST(MemoryPlannerTest, PredictsTheLedgerForInt8OptimizerState) {
  for (const char* dtype : {"fp32", "bf16"}) {
    const std::vector<std::string> common = {std::string("precision.dtype=") + dtype};
    std::vector<std::string> int8 = common;
    int8.push_back("optimizer.state=int8");
    const Plan plan = MakePlan(SmallCpu(int8));
    ExpectPredictedEqualsMeasured(plan, 0.02, std::string("int8 state ") + dtype);
    const std::vector<RankMemory> f32 = PredictMemory(MakePlan(SmallCpu(common)));
    const std::vector<RankMemory> q = PredictMemory(plan);
    for (size_t r = 0; r < q.size(); ++r) {
      const double ratio = static_cast<double>(q[r].peak[MemCategory::kOptimizer]) /
                           static_cast<double>(f32[r].peak[MemCategory::kOptimizer]);
      // fp32: m and v only (8 bytes -> ~2.03); bf16 keeps its f32 master (12 -> ~6.03).
      EXPECT_LT(ratio, std::string(dtype) == "fp32" ? 0.27 : 0.51) << dtype << " rank " << r;
      RecordProperty(fmt::format("optimizer_ratio_{}_rank{}", dtype, r), std::to_string(ratio));
    }
  }
}

// Pruning masks: one u8 per element of each block matrix, booked as params from the start:
// predicted = measured (pruning at step 1, the step the planner runs), and exactly 12 C^2 bytes
// per block more params than without.
TEST(MemoryPlannerTest, PredictsTheLedgerForPruningMasks) {
  const Plan plan = MakePlan(SmallCpu({"prune.at_step=1", "prune.pattern=2:4"}));
  ExpectPredictedEqualsMeasured(plan, 0.02, "prune 2:4 at step 1");
  // Under ZeRO-3 the prune step gathers each matrix's masters from the replicas' shards.
  ExpectPredictedEqualsMeasured(MakePlan(SmallCpu({"prune.at_step=1", "parallel.replicas=2",
                                                   "parallel.zero=3", "train.micro_batches=2"})),
                                0.02, "prune at step 1, ZeRO-3 over 2 replicas");
  // With 8-bit state each replica holds whole blocks of codes and maxima.
  ExpectPredictedEqualsMeasured(
      MakePlan(SmallCpu({"prune.at_step=1", "parallel.replicas=2", "parallel.zero=3",
                         "train.micro_batches=2", "optimizer.state=int8"})),
      0.02, "prune at step 1, ZeRO-3 over 2 replicas, 8-bit state");
  const std::vector<RankMemory> dense = PredictMemory(MakePlan(SmallCpu({})));
  const std::vector<RankMemory> masked = PredictMemory(plan);
  const int64_t c = plan.dims.width;
  for (size_t r = 0; r < masked.size(); ++r) {
    int64_t blocks = 0;
    for (const LayerRange& range : plan.ChunkRanges(static_cast<int>(r))) {
      for (int i = range.first; i <= range.last; ++i) {
        blocks += plan.graph[static_cast<size_t>(i)].kind == LayerKind::kBlock ? 1 : 0;
      }
    }
    EXPECT_EQ(masked[r].peak[MemCategory::kParams] - dense[r].peak[MemCategory::kParams],
              blocks * 12 * c * c)
        << "rank " << r;
  }
}

// Cross-layer sharing, all 8 blocks in one group (ALBERT): on one stage the blocks' params,
// grads and optimizer state are exactly 1/8 of unshared (predicted = measured); with 2 stages
// each stage holds one copy. Low rank C/4 on the MLP: its bytes drop by 8C^2 - 2.5C^2 per block.
TEST(MemoryPlannerTest, PredictsTheLedgerForSharedAndLowRankBlocks) {
  const std::vector<std::string> one = {"parallel.stages=1"};
  const Plan dense = MakePlan(SmallCpu(one));
  const Plan shared = MakePlan(SmallCpu({"parallel.stages=1", "model.share.group=8"}));
  ExpectPredictedEqualsMeasured(shared, 0.02, "all-shared, 1 stage");
  const MemoryFigures d = PredictMemory(dense)[0].peak, s = PredictMemory(shared)[0].peak;
  const std::vector<LayerSpec>& graph = dense.graph;
  // The embedding's and the head's bytes (f32: params and grads 4 bytes, AdamW m and v 8).
  const int64_t ends =
      StoredParamCount(graph.front(), dense.dims) + StoredParamCount(graph.back(), dense.dims);
  const int64_t distinct_ends =
      ParamCount(graph.front(), dense.dims) + ParamCount(graph.back(), dense.dims);
  for (auto [category, ends_bytes] : {std::pair{MemCategory::kParams, 4 * ends},
                                      {MemCategory::kGrads, 4 * ends},
                                      {MemCategory::kOptimizer, 8 * distinct_ends}}) {
    const int64_t dense_blocks = d[category] - ends_bytes, shared_blocks = s[category] - ends_bytes;
    EXPECT_EQ(dense_blocks, 8 * shared_blocks) << Name(category);
    RecordProperty(std::string("blocks_") + std::string(Name(category)) + "_ratio",
                   std::to_string(static_cast<double>(shared_blocks) / dense_blocks));
  }
  ExpectPredictedEqualsMeasured(
      MakePlan(SmallCpu({"parallel.stages=2", "model.share.group=8", "precision.dtype=bf16"})),
      0.02, "all-shared, split over 2 stages, bf16");
  const Plan low = MakePlan(SmallCpu({"parallel.stages=1", "model.low_rank.mlp=64"}));
  ExpectPredictedEqualsMeasured(low, 0.02, "low rank");
  const int64_t c = dense.dims.width;
  EXPECT_EQ(d[MemCategory::kParams] - PredictMemory(low)[0].peak[MemCategory::kParams],
            8 * 4 * (8 * c * c - 10 * c * (c / 4)));
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

// The zero-bubble, V-shaped and looped schedules: every category exactly, on every rank, with
// the checkpointing, precision and replica settings they run with (planner/schedules_test.cc
// runs the same configurations for bits).
TEST(MemoryPlannerTest, PredictsTheLedgerExactlyForVShapedAndLoopedSchedules) {
  for (const char* name :
       {"zb-h2", "zb-v", "v-half", "v-min", "dualpipev", "looped-bfs", "interleaved-zb"}) {
    const std::string schedule = std::string("parallel.schedule=") + name;
    const std::string chunks =
        std::string(name) == "looped-bfs" || std::string(name) == "interleaved-zb"
            ? "parallel.chunks=2"
            : "parallel.chunks=1";
    for (const std::vector<std::string>& variant : std::vector<std::vector<std::string>>{
             {"parallel.stages=2"},
             {"parallel.stages=3", "parallel.checkpoint=every:1"},
             {"parallel.stages=2", "precision.dtype=bf16", "parallel.checkpoint=selective"},
             {"parallel.stages=2", "parallel.replicas=2", "parallel.zero=1"},
             {"parallel.stages=2", "parallel.replicas=4", "parallel.zero=2"}}) {
      std::vector<std::string> overrides = {schedule, chunks, "train.micro_batches=8"};
      overrides.insert(overrides.end(), variant.begin(), variant.end());
      ExpectPredictedEqualsMeasured(MakePlan(Tiny(overrides)), 0.0,
                                    fmt::format("{}", fmt::join(overrides, " ")));
    }
  }
}

TEST(MemoryPlannerTest, PredictsTheLedgerExactlyWithTensorRanks) {
  for (const std::vector<std::string>& variant : std::vector<std::vector<std::string>>{
           {"parallel.tensor=2"},
           {"parallel.tensor=4", "parallel.stages=2", "parallel.checkpoint=every:1"},
           {"parallel.tensor=2", "parallel.stages=2", "parallel.schedule=zb-v"},
           {"parallel.tensor=2", "parallel.stages=2", "precision.dtype=bf16",
            "parallel.checkpoint=selective"},
           {"parallel.tensor=2", "parallel.stages=2", "parallel.replicas=2", "parallel.zero=1"},
           {"parallel.tensor=2", "parallel.stages=2", "parallel.replicas=2", "parallel.zero=2",
            "parallel.sequence_parallel=true"},
           {"parallel.tensor=2", "parallel.stages=2", "parallel.sequence_parallel=true"},
           {"parallel.tensor=2", "parallel.stages=2", "parallel.sequence_parallel=true",
            "parallel.schedule=zb-h1", "precision.dtype=bf16", "parallel.checkpoint=every:1"}}) {
    ExpectPredictedEqualsMeasured(MakePlan(Tiny(variant)), 0.0,
                                  fmt::format("{}", fmt::join(variant, " ")));
  }
}

TEST(MemoryPlannerTest, OneRankHoldingBothEndsBooksTheTiedEmbeddingOnceAfterSetup) {
  const Plan plan = MakePlan(Tiny({"parallel.stages=1", "precision.dtype=bf16"}));
  ExpectPredictedEqualsMeasured(plan, 0.0, "one stage");
  // The head builds its own wte before StageModel shares the embedding's: the params peak holds
  // both, the optimizer one master, m and v per distinct parameter, the grads both copies.
  const RankMemory rank = PredictMemory(plan).front();
  const int64_t wte = int64_t{plan.dims.vocab_size} * plan.dims.width;
  int64_t stored = 0;
  for (const LayerSpec& spec : plan.graph) stored += StoredParamCount(spec, plan.dims);
  EXPECT_EQ(rank.peak[MemCategory::kParams], 2 * stored);  // bf16
  EXPECT_EQ(rank.peak[MemCategory::kGrads], 4 * stored);
  EXPECT_EQ(rank.peak[MemCategory::kOptimizer], 12 * (stored - wte));
}

TEST(MemoryPlannerTest, GlooStagesTheTiedGradientOnTheFirstAndLastStage) {
  const Plan plan = MakePlan(Tiny({"parallel.stages=3"}));
  const int64_t wte_grad = int64_t{plan.dims.vocab_size} * plan.dims.width * 4;
  {
    // Over TCP the tied pair's all-reduce stages the peer's copy of the gradient.
    ScopedEnv tcp("BATON_SHARED_MEMORY", "0");
    const std::vector<RankMemory> gloo = PredictMemory(plan);
    EXPECT_EQ(gloo[0].peak[MemCategory::kComm], wte_grad);
    EXPECT_EQ(gloo[1].peak[MemCategory::kComm], 0);
    EXPECT_EQ(gloo[2].peak[MemCategory::kComm], wte_grad);
  }
  {
    // Through shared memory it streams the sum, staging nothing: each rank books its segment
    // for its two peers on this host, nothing more.
    ScopedEnv shm("BATON_SHARED_MEMORY", "1");
    for (const RankMemory& r : PredictMemory(plan)) {
      EXPECT_EQ(r.peak[MemCategory::kComm], SharedMemorySegmentBytes(2));
    }
  }
  for (const RankMemory& r : PredictMemory(plan, {CommTransport::kInProcess})) {
    EXPECT_EQ(r.peak[MemCategory::kComm], 0);
  }
}

TEST(MemoryPlannerTest, PredictsTheLedgerOfEveryReplica) {
  for (const char* dtype : {"fp32", "bf16"}) {
    for (const char* schedule : {"1f1b", "zb-h1"}) {
      ExpectPredictedEqualsMeasured(MakePlan(Tiny({"parallel.stages=2", "parallel.replicas=2",
                                                   std::string("precision.dtype=") + dtype,
                                                   std::string("parallel.schedule=") + schedule})),
                                    0.02, fmt::format("2 replicas {} {}", dtype, schedule));
    }
  }
  ExpectPredictedEqualsMeasured(MakePlan(Tiny({"parallel.stages=1", "parallel.replicas=4"})), 0.0,
                                "1 stage x 4 replicas");
}

// output.async_checkpoint: the ranks that write (replica 0) keep a host copy of their layers'
// whole state from the first save on, booked as checkpoint memory, and the steps after it run
// beside it; the other replicas copy nothing.
TEST(MemoryPlannerTest, BooksABackgroundCheckpointsHostCopyOnTheRanksThatWrite) {
  for (const char* zero : {"parallel.zero=0", "parallel.zero=1", "parallel.zero=2"}) {
    const Plan plan =
        MakePlan(Tiny({"parallel.stages=2", "parallel.replicas=2", zero, "train.steps=3",
                       "output.checkpoint_every=2", "output.async_checkpoint=true"}));
    ExpectPredictedEqualsMeasured(plan, 0.0, fmt::format("background checkpoints, {}", zero));
    const std::vector<RankMemory> predicted = PredictMemory(plan, {CommTransport::kInProcess});
    const ParallelLayout layout = plan.layout();
    for (int r = 0; r < plan.world_size(); ++r) {
      const MemoryFigures& peak = predicted[static_cast<size_t>(r)].peak;
      if (layout.ReplicaOf(r) != 0) {
        EXPECT_EQ(peak[MemCategory::kCheckpoint], 0) << zero << ", rank " << r;
      } else if (layout.StageOf(r) == 0) {
        // fp32 without masters: each param, and both its moments whole even under ZeRO-1.
        EXPECT_EQ(peak[MemCategory::kCheckpoint], 3 * peak[MemCategory::kParams])
            << zero << ", rank " << r;
      } else {
        EXPECT_GT(peak[MemCategory::kCheckpoint], 0) << zero << ", rank " << r;
      }
    }
  }
  // Saving only after the last step: no step runs beside the copy, which the peak then shows
  // only as what the save itself held.
  const Plan last_only = MakePlan(Tiny({"parallel.stages=2", "output.async_checkpoint=true"}));
  ExpectPredictedEqualsMeasured(last_only, 0.0, "background checkpoint of the last step");
}

TEST(MemoryPlannerTest, ReplicasBookTheGradientBucketAndGloosStagingAsComm) {
  // Tiny's gradients fit one bucket: each rank books it (a copy of its gradients); over TCP
  // Gloo's two-member all-reduce stages the other replica's bucket, both comm; through shared
  // memory the sum streams (nothing staged) and the rank books its segment for the ranks it talks
  // to (its pipeline neighbour and its replica) instead. Replica 1's ranks book what replica 0's
  // do, and params, grads and optimizer state do not change with R.
  const Plan one = MakePlan(Tiny({"parallel.stages=2"}));
  const Plan plan = MakePlan(Tiny({"parallel.stages=2", "parallel.replicas=2"}));
  const Plan small = MakePlan(SmallCpu({"parallel.stages=2", "parallel.replicas=2"}));
  for (const bool shared_memory : {false, true}) {
    ScopedEnv transport("BATON_SHARED_MEMORY", shared_memory ? "1" : "0");
    const std::vector<RankMemory> r1 = PredictMemory(one);
    const std::vector<RankMemory> r2 = PredictMemory(plan);
    ASSERT_EQ(r2.size(), 4u);
    for (int r = 0; r < 4; ++r) {
      ASSERT_EQ(plan.LinkedRanks(r).size(), 2u) << r;
      const MemoryFigures& peak = r2[static_cast<size_t>(r)].peak;
      const MemoryFigures& same_stage = r1[static_cast<size_t>(plan.layout().StageOf(r))].peak;
      EXPECT_EQ(peak[MemCategory::kComm],
                shared_memory ? SharedMemorySegmentBytes(2) + peak[MemCategory::kGrads]
                              : 2 * peak[MemCategory::kGrads])
          << r;
      EXPECT_EQ(peak[MemCategory::kParams], same_stage[MemCategory::kParams]) << r;
      EXPECT_EQ(peak[MemCategory::kGrads], same_stage[MemCategory::kGrads]) << r;
      EXPECT_EQ(peak[MemCategory::kOptimizer], same_stage[MemCategory::kOptimizer]) << r;
      EXPECT_EQ(peak.total, r2[static_cast<size_t>(plan.layout().StageOf(r))].peak.total) << r;
    }
    // A model larger than a bucket reuses one kGradBucketBytes buffer (over TCP plus one staged
    // bucket, or the staged tied gradient where that is larger).
    const RankMemory last = PredictMemory(small)[1];
    ASSERT_GT(last.peak[MemCategory::kGrads], 2 * kGradBucketBytes);
    EXPECT_EQ(last.peak[MemCategory::kComm],
              shared_memory ? SharedMemorySegmentBytes(2) + kGradBucketBytes
                            : std::max(2 * kGradBucketBytes,
                                       kGradBucketBytes +
                                           int64_t{small.dims.vocab_size} * small.dims.width * 4));
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

// A layer that allocates more than the real ones: every block stashes an extra (B,T,C+3) f32
// tensor in Forward and books a scratch of 1000 + 7 x rows floats in each backward call. The
// planner has no code for it: running the real code predicts it.
class PaddedLayer final : public Layer {
 public:
  PaddedLayer(std::unique_ptr<Layer> inner, Backend& backend)
      : inner_(std::move(inner)), backend_(backend) {}
  const std::string& name() const override { return inner_->name(); }
  std::vector<Param*> params() override { return inner_->params(); }
  void set_selective_recompute(bool on) override { inner_->set_selective_recompute(on); }
  bool selective_recompute() const override { return inner_->selective_recompute(); }
  Tensor Forward(const Tensor& x, const MicroBatch& batch, Stash& stash) override {
    Tensor y = inner_->Forward(x, batch, stash);
    if (x.defined()) {
      stash.Put("padding",
                Tensor::Empty(backend_.allocator(), {x.size(0), x.size(1), x.size(2) + 3},
                              DType::kF32, MemCategory::kActivations));
    }
    return y;
  }
  Tensor Backward(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                  const BackwardArgs& args) override {
    const Tensor scratch = Scratch(dy);
    return inner_->Backward(dy, batch, stash, args);
  }
  Tensor BackwardInput(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                       const BackwardArgs& args) override {
    const Tensor scratch = Scratch(dy);
    return inner_->BackwardInput(dy, batch, stash, args);
  }
  void BackwardWeight(Stash& stash) override { inner_->BackwardWeight(stash); }

 private:
  Tensor Scratch(const Tensor& dy) {
    const int64_t rows = dy.defined() ? dy.numel() / dy.size(-1) : 1;
    return Tensor::Empty(backend_.allocator(), {1000 + 7 * rows}, DType::kF32,
                         MemCategory::kWorkspace);
  }
  std::unique_ptr<Layer> inner_;
  Backend& backend_;
};

TEST(MemoryPlannerTest, PredictsALayerItHasNoCodeFor) {
  const Plan plan = MakePlan(Tiny({"parallel.stages=2", "precision.dtype=bf16"}));
  const std::vector<RankMemory> plain = PredictMemory(plan, {CommTransport::kInProcess});
  ScopedLayerWrapperForTesting padded([](std::unique_ptr<Layer> layer, Backend& backend) {
    return std::unique_ptr<Layer>(new PaddedLayer(std::move(layer), backend));
  });
  ExpectPredictedEqualsMeasured(plan, 0.0, "padded layers");
  const std::vector<RankMemory> with_padding = PredictMemory(plan, {CommTransport::kInProcess});
  for (size_t r = 0; r < plain.size(); ++r) {
    EXPECT_GT(with_padding[r].peak[MemCategory::kActivations],
              plain[r].peak[MemCategory::kActivations]);
    EXPECT_GT(with_padding[r].peak[MemCategory::kWorkspace],
              plain[r].peak[MemCategory::kWorkspace]);
  }
}

// GPU stages are predicted with the CUDA backend's own bookings (no f32 staging, the cuBLASLt
// workspace, NCCL's barrier scratch and the norm partials it reduces on the device), without a
// GPU; layers, optimizer and engine book the same as on the CPU.
TEST(MemoryPlannerTest, PredictsGpuStagesWithTheCudaBackendsBookings) {
  if (!BuiltWithCuda()) GTEST_SKIP() << "built without CUDA";
  const std::vector<std::string> common = {"parallel.stages=2", "precision.dtype=bf16"};
  std::vector<std::string> on_gpu = common;
  on_gpu.push_back("device.type=cuda");
  const Plan cpu_plan = MakePlan(Tiny(common));
  const Plan gpu_plan = MakePlan(Tiny(on_gpu));
  const std::vector<RankMemory> cpu = PredictMemory(cpu_plan);
  const std::vector<RankMemory> gpu = PredictMemory(gpu_plan);
  // The step end's all-reduce: a float per layer, then overflow, stop and bad-loss flags.
  const int64_t norm_partials = 4 * (static_cast<int64_t>(gpu_plan.graph.size()) + 3);
  for (size_t r = 0; r < gpu.size(); ++r) {
    for (MemCategory c : {MemCategory::kParams, MemCategory::kGrads, MemCategory::kOptimizer,
                          MemCategory::kActivations}) {
      EXPECT_EQ(gpu[r].peak[c], cpu[r].peak[c]) << "stage " << r << ", " << Name(c);
    }
    EXPECT_GE(gpu[r].peak[MemCategory::kWorkspace], int64_t{32} << 20) << "stage " << r;
    EXPECT_EQ(gpu[r].peak[MemCategory::kComm], 4 + norm_partials) << "stage " << r;
  }
}

// A GPU rank's background-checkpoint copy is host memory of the same bytes as a CPU rank's.
TEST(MemoryPlannerTest, BooksAGpuRanksBackgroundCheckpointCopyLikeACpuRanks) {
  if (!BuiltWithCuda()) GTEST_SKIP() << "built without CUDA";
  const std::vector<std::string> common = {"parallel.stages=2", "precision.dtype=bf16",
                                           "train.steps=3", "output.checkpoint_every=1",
                                           "output.async_checkpoint=true"};
  std::vector<std::string> on_gpu = common;
  on_gpu.push_back("device.type=cuda");
  const std::vector<RankMemory> cpu = PredictMemory(MakePlan(Tiny(common)));
  const std::vector<RankMemory> gpu = PredictMemory(MakePlan(Tiny(on_gpu)));
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t r = 0; r < gpu.size(); ++r) {
    EXPECT_GT(cpu[r].peak[MemCategory::kCheckpoint], 0) << "stage " << r;
    EXPECT_EQ(gpu[r].peak[MemCategory::kCheckpoint], cpu[r].peak[MemCategory::kCheckpoint])
        << "stage " << r;
  }
}

// On a GPU: a one-stage GPU run's ledger equals the prediction byte for byte.
TEST(MemoryPlannerGpuTest, PredictsTheGpuLedger) {
  if (CudaDevicesVisible() == 0) GTEST_SKIP() << "no GPU";
  for (const char* dtype : {"fp32", "bf16"}) {
    const Plan plan = MakePlan(
        Tiny({"parallel.stages=1", "device.type=cuda", std::string("precision.dtype=") + dtype}));
    ExpectPredictedEqualsMeasured(plan, 0.0, std::string("one GPU stage, ") + dtype);
  }
}

// docs/memory.md's worked example: a gpt-small-cpu block stashes 16u + 16N + L per micro-batch
// under flash attention (u = N C 4, L the f32 lse, B NH T 4), 16u + 16N + P under materialized
// (P the f32 attention probabilities, B NH T T 4); the embedding nothing.
TEST(MemoryPlannerTest, StashPerMicroBatchIsMeasuredFromTheRealLayers) {
  const Plan plan = MakePlan(SmallCpu({}, /*full_length=*/true));
  const int64_t n = 256, c = 256, u = n * c * 4, lse = 8 * 256 * 4, probs = 8 * 256 * 256 * 4;
  EXPECT_EQ(StashBytesPerMicroBatch(plan, {1, 1}), 16 * u + 16 * n + lse);
  EXPECT_EQ(StashBytesPerMicroBatch(plan, {1, 1}), 4'206'592);
  EXPECT_EQ(StashBytesPerMicroBatch(plan, {0, 0}), 0);
  EXPECT_EQ(StashBytesPerMicroBatch(plan, {0, 2}), 2 * 4'206'592);
  const Plan selective = MakePlan(SmallCpu({"parallel.checkpoint=selective"}, true));
  EXPECT_EQ(StashBytesPerMicroBatch(selective, {1, 1}), 8 * u + 16 * n + lse);

  const Plan materialized = MakePlan(SmallCpu({"model.attention=materialized"}, true));
  EXPECT_EQ(StashBytesPerMicroBatch(materialized, {1, 1}), 16 * u + 16 * n + probs);
  EXPECT_EQ(StashBytesPerMicroBatch(materialized, {1, 1}), 6'295'552);
  const Plan materialized_selective =
      MakePlan(SmallCpu({"model.attention=materialized", "parallel.checkpoint=selective"}, true));
  EXPECT_EQ(StashBytesPerMicroBatch(materialized_selective, {1, 1}), 8 * u + 16 * n);
}

}  // namespace
}  // namespace baton
