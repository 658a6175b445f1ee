// Mixture of experts (model.moe) through the planner and the real trainer in one process: every
// schedule and checkpointing policy bit-identical to one stage (fp32 and bf16), each router and a
// capacity factor across stages, replicas with every ZeRO level alike, expert parallelism
// (parallel.experts) bit-identical to the replicas holding every expert, and the memory plan
// predicting the ledger of each.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "config/config.h"
#include "kernels/cpu/gemm.h"
#include "model/cost.h"
#include "model/from_config.h"
#include "planner/fit.h"
#include "planner/in_process.h"
#include "planner/memory_planner.h"
#include "planner/planner.h"
#include "planner/planner_test_util.h"

namespace baton {
namespace {

// configs/moe-tiny.yaml made small: 4 blocks of width 32 (the first dense), 4 experts of width 16,
// two per token, one gated shared expert, the load-balancing and z-losses on.
Config MoeTiny(const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {"model.num_layers=4",
                                  "model.width=32",
                                  "model.context=16",
                                  "model.num_heads=4",
                                  "model.num_kv_heads=2",
                                  "model.intermediate_size=48",
                                  "model.moe.num_experts=4",
                                  "model.moe.expert_intermediate_size=16",
                                  "model.moe.z_loss_coef=0.001",
                                  "train.batch_size=4",
                                  "train.micro_batches=4",
                                  "train.steps=3",
                                  "train.warmup_steps=0"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return LoadConfig(std::string(BATON_SOURCE_DIR) + "/configs/moe-tiny.yaml", all);
}

TEST(MoeInProcessTest, EveryScheduleAndCheckpointingIsBitIdenticalToOneStage) {
  planner_test::ExpectEveryScheduleBitIdenticalToOneStage(MoeTiny, /*dualpipev=*/true);
}

// Each router (sigmoid_bias's bias moving every step), no shared expert, top-1, a capacity that
// drops tokens, MoE every second block, packed documents in fp16 (loss scaling scales the router
// losses' gradient too): bit-identical on 1 and 3 stages, and each trains a model of its own.
TEST(MoeInProcessTest, EveryRouterAndCapacityTrainsBitIdenticallyAcrossStages) {
  std::vector<std::string> checksums;
  for (const std::vector<std::string>& variant : std::vector<std::vector<std::string>>{
           {"model.moe.router=topk_softmax"},
           {"model.moe.norm_topk_prob=false", "model.moe.shared_expert_gate=false"},
           {"model.moe.shared_experts=0", "model.moe.shared_expert_gate=false",
            "model.moe.top_k=1"},
           {"model.moe.capacity_factor=0.5"},
           {"model.moe.first_dense_layers=0", "model.moe.every=2"},
           {"model.moe.router=sigmoid_bias", "model.moe.aux_loss_coef=0",
            "model.moe.bias_update_rate=0.05"},
           {"data.packing=true", "data.document_separator=10", "precision.dtype=fp16"}}) {
    std::vector<std::string> one = variant, three = variant;
    one.push_back("parallel.stages=1");
    three.push_back("parallel.stages=3");
    const InProcessResult a = RunInProcess(MakePlan(MoeTiny(one)));
    const InProcessResult b = RunInProcess(MakePlan(MoeTiny(three)));
    EXPECT_EQ(a.losses, b.losses) << fmt::format("{}", variant);
    EXPECT_EQ(a.param_checksum, b.param_checksum) << fmt::format("{}", variant);
    checksums.push_back(a.param_checksum);
  }
  std::sort(checksums.begin(), checksums.end());
  EXPECT_EQ(std::unique(checksums.begin(), checksums.end()), checksums.end());
}

// Two replicas: the same losses and parameters whatever the ZeRO level.
TEST(MoeInProcessTest, ReplicasTrainAlikeAtEveryZeroLevel) {
  const std::vector<std::string> base = {"parallel.stages=2", "parallel.replicas=2",
                                         "train.batch_size=8"};
  std::vector<std::string> plain = base;
  plain.push_back("parallel.zero=0");
  const InProcessResult reference = RunInProcess(MakePlan(MoeTiny(plain)));
  for (int zero = 1; zero <= 3; ++zero) {
    std::vector<std::string> sharded = base;
    sharded.push_back(fmt::format("parallel.zero={}", zero));
    const InProcessResult other = RunInProcess(MakePlan(MoeTiny(sharded)));
    EXPECT_EQ(other.losses, reference.losses) << "zero " << zero;
    EXPECT_EQ(other.param_checksum, reference.param_checksum) << "zero " << zero;
  }
}

// sigmoid_bias: every replica moves its bias by the loads of all of them, so the replicas keep
// the same bias (the digests cover it), train alike at every ZeRO level and as one replica does
// (within rounding: replicas sum gradients in another order); the bias changes what trains (rate
// 0 trains another model).
TEST(MoeInProcessTest, ARoutingBiasMovesByEveryReplicasLoadsAndStaysTheSameOnAll) {
  const std::vector<std::string> base = {"parallel.stages=2", "train.batch_size=8",
                                         "model.moe.router=sigmoid_bias",
                                         "model.moe.aux_loss_coef=0"};
  std::vector<std::string> single = base;
  single.push_back("model.moe.bias_update_rate=0.05");
  const std::vector<float> one_replica = RunInProcess(MakePlan(MoeTiny(single))).losses;
  std::string reference_checksum;
  std::vector<float> reference_losses;
  for (const char* rate : {"model.moe.bias_update_rate=0.05", "model.moe.bias_update_rate=0"}) {
    for (int zero : {0, 1}) {
      std::vector<std::string> overrides = base;
      overrides.push_back("parallel.replicas=2");
      overrides.push_back(rate);
      overrides.push_back(fmt::format("parallel.zero={}", zero));
      const Plan plan = MakePlan(MoeTiny(overrides));
      const InProcessResult result = RunInProcess(plan);
      const ParallelLayout layout = plan.layout();
      for (int stage = 0; stage < 2; ++stage) {
        const auto& a = result.ranks[static_cast<size_t>(layout.WorldRank({.stage = stage}))];
        const auto& b =
            result.ranks[static_cast<size_t>(layout.WorldRank({.stage = stage, .replica = 1}))];
        EXPECT_EQ(a.digests, b.digests) << rate << " zero " << zero << " stage " << stage;
      }
      if (reference_checksum.empty()) {
        reference_checksum = result.param_checksum;
        reference_losses = result.losses;
        ASSERT_EQ(result.losses.size(), one_replica.size());
        for (size_t i = 0; i < one_replica.size(); ++i) {
          EXPECT_NEAR(result.losses[i], one_replica[i], 1e-5 * one_replica[i]) << "step " << i + 1;
        }
      } else if (zero == 1 && std::string(rate).ends_with("0.05")) {
        EXPECT_EQ(result.param_checksum, reference_checksum);
        EXPECT_EQ(result.losses, reference_losses);
      } else {
        EXPECT_NE(result.param_checksum, reference_checksum) << rate << " zero " << zero;
      }
    }
  }
}

// Expert parallelism: E = 1, 2, 4 over four replicas (R = E and R > E: the expert-data-parallel
// all-gather), and E = 2 over two replicas on two stages under 1F1B, DualPipeV, selective
// checkpointing, each router and a dropping capacity: the losses and parameters of E = 1 bit for
// bit, every replica's digests equal (the experts hashed whole), and grad_clip acting (the norm
// summed expert by expert). Each member holds its share of the experts.
// moe-tiny with `overrides` and its experts split `experts` ways, trained in one process: the
// plan exact but for the activations (booked for the worst routing), every replica's digests
// equal (the experts hashed whole).
InProcessResult TrainExperts(std::vector<std::string> overrides, int experts) {
  overrides.push_back(fmt::format("parallel.experts={}", experts));
  const Plan plan = MakePlan(MoeTiny(overrides));
  const InProcessResult result = RunInProcess(plan);
  const std::vector<RankMemory> predicted = PredictMemory(plan, {CommTransport::kInProcess});
  for (size_t r = 0; r < predicted.size(); ++r) {
    const std::string what = fmt::format("{} E={}: rank {}", overrides, experts, r);
    EXPECT_GE(predicted[r].peak.total, result.ranks[r].peak.total) << what;
    EXPECT_GE(predicted[r].peak[MemCategory::kActivations],
              result.ranks[r].peak[MemCategory::kActivations])
        << what;
    for (MemCategory c :
         {MemCategory::kParams, MemCategory::kGrads, MemCategory::kOptimizer, MemCategory::kComm}) {
      EXPECT_EQ(predicted[r].peak[c], result.ranks[r].peak[c]) << what << " " << Name(c);
    }
  }
  for (size_t r = 0; r < result.ranks.size(); ++r) {
    const int first = plan.layout().GroupOf(Axis::kData, static_cast<int>(r)).front();
    EXPECT_EQ(result.ranks[r].digests, result.ranks[static_cast<size_t>(first)].digests)
        << fmt::format("{} E={}: rank {}", overrides, experts, r);
  }
  return result;
}

TEST(MoeInProcessTest, ExpertParallelismTrainsTheBitsOfReplicasHoldingEveryExpert) {
  const auto run = [](std::vector<std::string> overrides, int experts) {
    overrides.push_back("train.grad_clip=0.05");
    return TrainExperts(overrides, experts);
  };
  const std::vector<std::string> four = {"parallel.stages=1", "parallel.replicas=4",
                                         "train.batch_size=8"};
  const InProcessResult whole = run(four, 1);
  for (int experts : {2, 4}) {
    const InProcessResult split = run(four, experts);
    EXPECT_EQ(split.losses, whole.losses) << "R=4 E=" << experts;
    EXPECT_EQ(split.param_checksum, whole.param_checksum) << "R=4 E=" << experts;
  }
  for (const std::vector<std::string>& variant : std::vector<std::vector<std::string>>{
           {"parallel.schedule=1f1b"},
           {"parallel.schedule=dualpipev", "parallel.checkpoint=selective"},
           {"model.moe.router=sigmoid_bias", "model.moe.aux_loss_coef=0",
            "model.moe.bias_update_rate=0.05", "parallel.checkpoint=every:1"},
           {"model.moe.router=topk_softmax", "model.moe.capacity_factor=0.5"}}) {
    std::vector<std::string> overrides = {"parallel.stages=2", "parallel.replicas=2",
                                          "train.batch_size=8"};
    overrides.insert(overrides.end(), variant.begin(), variant.end());
    const InProcessResult a = run(overrides, 1);
    const InProcessResult b = run(overrides, 2);
    EXPECT_EQ(a.losses, b.losses) << fmt::format("{}", variant);
    EXPECT_EQ(a.param_checksum, b.param_checksum) << fmt::format("{}", variant);
  }
}

// ZeRO-1 with the experts split: the other parameters' optimizer state sharded over every
// replica, each member's experts' over the replicas holding the same experts (E = 2 of R = 4:
// two each; E = 4: one, unsharded). E = 2 and 4 train the same bits with clipping acting (the
// norm takes the experts whole, expert by expert, as without ZeRO), and so do ZeRO-2 and -3
// (both keeps) with E = 2; where clipping does not act, the
// bits of replicas holding every expert with no ZeRO and with E = 1's ZeRO-1 (the norm's
// summation order is all that differs). Sharding leaves each rank less optimizer state.
TEST(MoeInProcessTest, ZeroOneShardsTheSplitExpertsStateOverTheReplicasHoldingThem) {
  const std::vector<std::string> four = {"parallel.stages=1", "parallel.replicas=4",
                                         "train.batch_size=8"};
  const auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), four.begin(), four.end());
    return more;
  };
  const InProcessResult two = TrainExperts(with({"parallel.zero=1", "train.grad_clip=0.05"}), 2);
  const InProcessResult all = TrainExperts(with({"parallel.zero=1", "train.grad_clip=0.05"}), 4);
  EXPECT_EQ(two.losses, all.losses);
  EXPECT_EQ(two.param_checksum, all.param_checksum);
  // ZeRO-2 and -3 (the other parameters' gradients, and values, released outside the shard; the
  // experts' whole on their holders): ZeRO-1's bits.
  for (const std::vector<std::string>& level :
       std::vector<std::vector<std::string>>{{"parallel.zero=2"},
                                             {"parallel.zero=3"},
                                             {"parallel.zero=3", "parallel.zero3_keep=step"}}) {
    std::vector<std::string> overrides = with(level);
    overrides.push_back("train.grad_clip=0.05");
    const InProcessResult higher = TrainExperts(overrides, 2);
    EXPECT_EQ(higher.losses, two.losses) << fmt::format("{}", level);
    EXPECT_EQ(higher.param_checksum, two.param_checksum) << fmt::format("{}", level);
  }
  const InProcessResult plain = TrainExperts(with({"train.grad_clip=0"}), 1);
  const InProcessResult zero_whole =
      TrainExperts(with({"parallel.zero=1", "train.grad_clip=0"}), 1);
  const InProcessResult unsharded = TrainExperts(with({"train.grad_clip=0"}), 2);
  const InProcessResult sharded = TrainExperts(with({"parallel.zero=1", "train.grad_clip=0"}), 2);
  for (const InProcessResult* r : {&zero_whole, &unsharded, &sharded}) {
    EXPECT_EQ(r->losses, plain.losses);
    EXPECT_EQ(r->param_checksum, plain.param_checksum);
  }
  for (size_t r = 0; r < sharded.ranks.size(); ++r) {
    EXPECT_LT(sharded.ranks[r].peak[MemCategory::kOptimizer],
              unsharded.ranks[r].peak[MemCategory::kOptimizer])
        << "rank " << r;
  }
  // On two stages under DualPipeV with selective recompute and bf16 (its f32 masters sharded
  // alike): E = 2 of 4 replicas is E = 4's bits.
  const std::vector<std::string> dual = {
      "parallel.stages=2",     "parallel.replicas=4",         "train.batch_size=8",
      "parallel.zero=1",       "parallel.schedule=dualpipev", "parallel.checkpoint=selective",
      "train.micro_batches=8", "precision.dtype=bf16",        "train.grad_clip=0.05"};
  const InProcessResult dual_two = TrainExperts(dual, 2);
  const InProcessResult dual_four = TrainExperts(dual, 4);
  EXPECT_EQ(dual_two.losses, dual_four.losses);
  EXPECT_EQ(dual_two.param_checksum, dual_four.param_checksum);
}

// 8-bit optimizer state with the experts split: a member's moments are whole blocks of its experts
// (the whole's blocks), 8-bit because the whole is large enough where a member's part is not
// (4 experts of 32 x 32: 4096 elements whole, 2048 and 1024 a member's). E = 2 and 4 of four
// replicas, and E = 2 on two stages under 1F1B, train E = 1's bits, in less optimizer memory
// than f32 state; under ZeRO-1 E = 2 trains E = 4's.
TEST(MoeInProcessTest, EightBitStateWithSplitExpertsTrainsTheBitsOfWholeExperts) {
  const std::vector<std::string> eight_bit = {"model.moe.expert_intermediate_size=32",
                                              "train.grad_clip=0.05", "optimizer.state=int8"};
  const auto with = [&](std::vector<std::string> layout) {
    layout.insert(layout.end(), eight_bit.begin(), eight_bit.end());
    return layout;
  };
  const std::vector<std::string> four =
      with({"parallel.stages=1", "parallel.replicas=4", "train.batch_size=8"});
  const InProcessResult whole = TrainExperts(four, 1);
  for (int experts : {2, 4}) {
    const InProcessResult split = TrainExperts(four, experts);
    EXPECT_EQ(split.losses, whole.losses) << "E=" << experts;
    EXPECT_EQ(split.param_checksum, whole.param_checksum) << "E=" << experts;
  }
  const std::vector<std::string> two = with(
      {"parallel.stages=2", "parallel.replicas=2", "train.batch_size=8", "parallel.schedule=1f1b"});
  const InProcessResult a = TrainExperts(two, 1);
  const InProcessResult b = TrainExperts(two, 2);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.param_checksum, b.param_checksum);
  // Under ZeRO-1 (each member's experts' runs whole blocks): E = 2 is E = 4's bits.
  std::vector<std::string> zero = four;
  zero.push_back("parallel.zero=1");
  const InProcessResult zero_two = TrainExperts(zero, 2);
  const InProcessResult zero_four = TrainExperts(zero, 4);
  EXPECT_EQ(zero_two.losses, zero_four.losses);
  EXPECT_EQ(zero_two.param_checksum, zero_four.param_checksum);
  std::vector<std::string> f32 = two;
  f32.back() = "optimizer.state=f32";  // in place of int8
  const InProcessResult full = TrainExperts(f32, 2);
  for (size_t r = 0; r < b.ranks.size(); ++r) {
    EXPECT_LT(b.ranks[r].peak[MemCategory::kOptimizer], full.ranks[r].peak[MemCategory::kOptimizer])
        << "rank " << r;
  }
}

// The shipped Mixtral 8x7B config: Mistral's parameter counts (all, and active per token), and
// its plan on 8 stages x 8 replicas, each stage's experts split over its 8 replicas: every rank
// holds one expert of each of its layers (an eighth of E = 1's expert parameters).
TEST(MoeConfigTest, Mixtral8x7bHasMistralsCountsAndPlansOnEightStagesByEightExperts) {
  const std::string file = std::string(BATON_SOURCE_DIR) + "/configs/mixtral-8x7b.yaml";
  const Config config = LoadConfig(file, {"device.type=cpu"});
  const ModelDims dims = DimsOf(config.model);
  const std::vector<LayerSpec> graph = GraphOf(config.model);
  EXPECT_EQ(ParamCount(graph, dims), 46702792704);
  EXPECT_EQ(ActiveParamCount(graph, dims), 12879925248);
  const Plan plan = MakePlan(config);
  EXPECT_EQ(plan.layout().world_size(), 64);
  EXPECT_EQ(plan.layout().experts(), 8);
  const std::vector<RankMemory> predicted = PredictMemory(plan);
  ASSERT_EQ(predicted.size(), 64u);
  // Stage 1 (rank 1) holds 4 of the 32 blocks (flops-balanced), each with its attention (q, k, v,
  // o: 41,943,040), two norms, the router (4096 x 8) and one expert (3 x 4096 x 14336), in bf16.
  const int64_t block = 41943040 + 2 * 4096 + 4096 * 8 + int64_t{3} * 4096 * 14336;
  EXPECT_EQ(predicted[1].peak[MemCategory::kParams], 4 * block * 2);
}

// What a replica sends per step (baton plan's replica_bytes_per_step): the split experts leave
// the all-reduce, and with R > E their every source is all-gathered over the replicas holding
// the same experts (under ZeRO-1 their updated values too); tensor ranks send their part.
TEST(MoeConfigTest, ReplicaBytesCountTheSplitExpertsApart) {
  const auto bytes = [](int replicas, int experts, int zero = 0, int tensor = 1) {
    return ReplicaBytesPerStep(MakePlan(MoeTiny(
        {"parallel.stages=1", "train.batch_size=8", fmt::format("parallel.replicas={}", replicas),
         fmt::format("parallel.experts={}", experts), fmt::format("parallel.zero={}", zero),
         fmt::format("parallel.tensor={}", tensor)})));
  };
  const Plan plan = MakePlan(MoeTiny({"parallel.stages=1"}));
  const int64_t n =
      StoredParamCount(plan.graph, 0, static_cast<int>(plan.graph.size()) - 1, plan.dims);
  const int64_t x =
      3 * 4 * (3 * 32 * 16);      // blocks 1-3: 4 experts of c_fc (32, 32), c_proj (16, 32)
  EXPECT_EQ(bytes(2, 1), n * 4);  // 2 (R-1)/R N 4
  EXPECT_EQ(bytes(2, 2), (n - x) * 4);
  EXPECT_EQ(bytes(4, 2), 6 * (n - x) + x * 4);  // 2 (3/4) (N-X) 4 + (4/2 - 1) X 4
  // ZeRO-1: the rest reduce-scattered and its values gathered, (3/4) (N-X) (4 + 4); the experts'
  // sources as without; a member's run of its updated X/2 to the other holder, (1/2) (X/2) 4.
  EXPECT_EQ(bytes(4, 2, 1), 6 * (n - x) + x * 4 + x);
  // Two tensor ranks: a rank's half of the rest, and of the experts (its fold) split over E = 2.
  EXPECT_EQ(bytes(4, 2, 0, 2), 3 * (n - x) + x * 2);
}

// Tensor parallelism folds the experts over a stage's tensor ranks (each holds N/T whole experts
// and runs its experts' rows of the tokens all of them route alike) and cuts the shared expert as
// the MLP: T = 1's losses to 1e-6 relative in fp32 (the branch is summed over the ranks), with
// sequence parallelism, stages under 1F1B and DualPipeV, selective and full recompute, replicas
// with ZeRO-1, each router and a dropping capacity, clipping acting (the norm adds each rank's
// experts). The plan: every rank's parameters, gradients and optimizer state exact, its
// activations and peak bounded (booked as if every token chose its experts).
TEST(MoeInProcessTest, TensorRanksFoldTheExpertsAndTrainOneRanksLosses) {
  const auto expect_near = [](const InProcessResult& one, const InProcessResult& tp,
                              const std::string& what) {
    ASSERT_EQ(tp.losses.size(), one.losses.size()) << what;
    for (size_t i = 0; i < one.losses.size(); ++i) {
      ASSERT_TRUE(std::isfinite(tp.losses[i])) << what << ", step " << i + 1;
      EXPECT_NEAR(tp.losses[i], one.losses[i], 1e-6 * std::abs(one.losses[i]))
          << what << ", step " << i + 1;
    }
  };
  for (const std::vector<std::string>& variant : std::vector<std::vector<std::string>>{
           {"parallel.stages=1"},
           {"parallel.stages=1", "parallel.sequence_parallel=true"},
           {"parallel.stages=2", "parallel.schedule=1f1b", "parallel.checkpoint=selective"},
           {"parallel.stages=2", "parallel.schedule=dualpipev", "parallel.checkpoint=every:1",
            "parallel.sequence_parallel=true"},
           {"parallel.stages=1", "parallel.replicas=2", "parallel.zero=1"},
           {"parallel.stages=1", "model.moe.router=topk_softmax", "model.moe.capacity_factor=0.5"},
           {"parallel.stages=1", "model.moe.router=sigmoid_bias", "model.moe.aux_loss_coef=0",
            "model.moe.bias_update_rate=0.05"}}) {
    std::vector<std::string> overrides = {"train.steps=6", "train.grad_clip=0.05",
                                          "model.moe.shared_experts=1",
                                          "model.moe.shared_expert_gate=true"};
    overrides.insert(overrides.end(), variant.begin(), variant.end());
    std::vector<std::string> whole = overrides;  // T = 1 has no sequence to cut
    std::erase(whole, "parallel.sequence_parallel=true");
    const InProcessResult one = RunInProcess(MakePlan(MoeTiny(whole)));
    overrides.push_back("parallel.tensor=2");
    const std::string what = fmt::format("{}", overrides);
    const Plan plan = MakePlan(MoeTiny(overrides));
    const InProcessResult tp = RunInProcess(plan);
    expect_near(one, tp, what);
    const std::vector<RankMemory> predicted = PredictMemory(plan, {CommTransport::kInProcess});
    ASSERT_EQ(predicted.size(), tp.ranks.size()) << what;
    for (size_t r = 0; r < predicted.size(); ++r) {
      EXPECT_GE(predicted[r].peak.total, tp.ranks[r].peak.total) << what << ", rank " << r;
      EXPECT_GE(predicted[r].peak[MemCategory::kActivations],
                tp.ranks[r].peak[MemCategory::kActivations])
          << what << ", rank " << r;
      for (MemCategory c : {MemCategory::kParams, MemCategory::kGrads, MemCategory::kOptimizer}) {
        EXPECT_EQ(predicted[r].peak[c], tp.ranks[r].peak[c])
            << what << ", rank " << r << " " << Name(c);
      }
    }
  }
  // Four tensor ranks: one expert each (four key/value heads to cut).
  const std::vector<std::string> four = {"train.steps=6", "model.num_kv_heads=4"};
  const InProcessResult one = RunInProcess(MakePlan(MoeTiny(four)));
  std::vector<std::string> folded = four;
  folded.push_back("parallel.tensor=4");
  const Plan plan = MakePlan(MoeTiny(folded));
  const InProcessResult tp = RunInProcess(plan);
  expect_near(one, tp, "T=4");
  // Each rank holds a quarter of every expert matrix, and the routed rows of its expert.
  const std::vector<RankMemory> whole = PredictMemory(MakePlan(MoeTiny(four)));
  EXPECT_LT(tp.ranks[0].peak[MemCategory::kParams], whole[0].peak[MemCategory::kParams]);
}

// Tensor ranks and an expert group at once: each tensor rank's fold (N/T experts) splits over its
// expert group (the same tensor rank of E replicas), one expert per member of T = 2 x E = 2 here.
// The bits of E = 1 at the same T and R (the experts' gradients folded in source order, as the
// replicas' all-reduce sums them; the norm expert by expert, clipping acting), on one stage, with
// sequence parallelism, on two stages under DualPipeV with recompute, and each router with a
// dropping capacity; with ZeRO-1 (the experts' state sharded over no one: R = E) the bits of no
// ZeRO where clipping does not act. On four replicas (two expert groups per tensor rank) E = 2
// trains E = 1's bits with clipping acting, and under ZeRO-1 (each member's experts' state
// sharded over the two replicas holding them) the bits of no ZeRO where it does not. Every
// replica's digests equal, the plan exact but for the activations (TrainExperts).
TEST(MoeInProcessTest, AnExpertGroupSplitsEachTensorRanksFoldWithTheBitsOfWholeFolds) {
  const std::vector<std::string> base = {"parallel.tensor=2", "parallel.replicas=2",
                                         "train.batch_size=8", "model.moe.shared_experts=1",
                                         "model.moe.shared_expert_gate=true"};
  for (const std::vector<std::string>& variant : std::vector<std::vector<std::string>>{
           {"parallel.stages=1", "train.grad_clip=0.05"},
           {"parallel.stages=1", "parallel.sequence_parallel=true", "train.grad_clip=0.05"},
           {"parallel.stages=2", "parallel.schedule=dualpipev", "parallel.checkpoint=selective",
            "train.grad_clip=0.05"},
           {"parallel.stages=1", "model.moe.router=sigmoid_bias", "model.moe.aux_loss_coef=0",
            "model.moe.bias_update_rate=0.05", "parallel.checkpoint=every:1"},
           {"parallel.stages=1", "model.moe.router=topk_softmax",
            "model.moe.capacity_factor=0.5"}}) {
    std::vector<std::string> overrides = base;
    overrides.insert(overrides.end(), variant.begin(), variant.end());
    const InProcessResult folds = TrainExperts(overrides, 1);
    const InProcessResult split = TrainExperts(overrides, 2);
    EXPECT_EQ(split.losses, folds.losses) << fmt::format("{}", variant);
    EXPECT_EQ(split.param_checksum, folds.param_checksum) << fmt::format("{}", variant);
  }
  std::vector<std::string> zero = base;
  zero.push_back("parallel.stages=1");
  const InProcessResult plain = TrainExperts(zero, 2);
  zero.push_back("parallel.zero=1");
  const InProcessResult sharded = TrainExperts(zero, 2);
  EXPECT_EQ(sharded.losses, plain.losses);
  EXPECT_EQ(sharded.param_checksum, plain.param_checksum);
  // Four replicas, E = 2: two expert groups per tensor rank, the sources all-gathered over the
  // replicas holding the same experts (and under ZeRO-1 their state sharded over those two).
  std::vector<std::string> four = {"parallel.tensor=2", "parallel.replicas=4", "train.batch_size=8",
                                   "parallel.stages=1"};
  std::vector<std::string> clipped = four;
  clipped.push_back("train.grad_clip=0.05");
  const InProcessResult folds_of_four = TrainExperts(clipped, 1);
  const InProcessResult two_groups = TrainExperts(clipped, 2);
  EXPECT_EQ(two_groups.losses, folds_of_four.losses);
  EXPECT_EQ(two_groups.param_checksum, folds_of_four.param_checksum);
  const InProcessResult unsharded = TrainExperts(four, 2);
  four.push_back("parallel.zero=1");
  const InProcessResult two_groups_sharded = TrainExperts(four, 2);
  EXPECT_EQ(two_groups_sharded.losses, unsharded.losses);
  EXPECT_EQ(two_groups_sharded.param_checksum, unsharded.param_checksum);
}

// The plan books the worst routing (every token to experts 0 .. k-1, each expert's largest
// block of rows), whose buffers do not depend on the data: exact in fp32, and in bf16 where the
// CPU multiplies bf16 itself. Where a 16-bit product is staged to f32 (fp16; bf16 on an AVX2-only
// CPU) its staging follows each expert's rows, so the plan is an upper bound of the ledger there.
TEST(MoeMemoryPlannerTest, PredictsTheLedgerExactlyOrBoundsItFromAbove) {
  for (const std::vector<std::string>& overrides : std::vector<std::vector<std::string>>{
           {"parallel.stages=2", "parallel.schedule=1f1b"},
           {"parallel.stages=2", "parallel.schedule=zb-h1", "precision.dtype=bf16"},
           {"parallel.stages=2", "parallel.checkpoint=selective", "precision.dtype=fp16"},
           {"parallel.stages=4", "parallel.checkpoint=every:1", "model.moe.capacity_factor=1"},
           {"parallel.stages=2", "parallel.replicas=2", "parallel.zero=3"}}) {
    const std::string what = fmt::format("{}", overrides);
    const Plan plan = MakePlan(MoeTiny(overrides));
    const DType dtype = plan.config.precision.dtype;
    if (dtype == DType::kF32 || (dtype == DType::kBF16 && cpu::Bf16GemmInUse())) {
      planner_test::ExpectPredictedEqualsMeasured(plan, what);
      continue;
    }
    const std::vector<RankMemory> predicted = PredictMemory(plan, {CommTransport::kInProcess});
    const InProcessResult measured = RunInProcess(plan);
    ASSERT_EQ(predicted.size(), measured.ranks.size()) << what;
    for (size_t r = 0; r < predicted.size(); ++r) {
      EXPECT_GE(predicted[r].peak.total, measured.ranks[r].peak.total) << what << ", rank " << r;
      for (MemCategory c : {MemCategory::kParams, MemCategory::kGrads, MemCategory::kOptimizer,
                            MemCategory::kActivations, MemCategory::kComm}) {
        EXPECT_EQ(predicted[r].peak[c], measured.ranks[r].peak[c]) << what << ", rank " << r;
      }
    }
  }
}

}  // namespace
}  // namespace baton
