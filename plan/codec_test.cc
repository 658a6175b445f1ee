// The job's wire messages: a plan and a rank's result come back equal, bad bytes are errors.
#include "plan/codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "config/config.h"
#include "core/error.h"
#include "planner/planner.h"
#include "proto/baton.pb.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

Config TinyConfig(const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {"model.num_layers=4", "model.width=32",
                                  "model.context=16",   "model.num_heads=2",
                                  "train.batch_size=4", "train.micro_batches=4"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return LoadConfig(std::string(BATON_SOURCE_DIR) + "/configs/gpt-tiny.yaml", all);
}

TEST(CodecTest, JobPlanComesBackEqualForEverySchedule) {
  const Launch launch{"job-1", "/ckpt/step-00000007", 2, true, {{0, 50}, {40, 60}, {55, 90}}};
  for (const std::vector<std::string>& overrides : std::vector<std::vector<std::string>>{
           {"parallel.stages=1"},
           {"parallel.stages=4", "parallel.schedule=gpipe"},
           {"parallel.stages=3", "parallel.schedule=zb-h1", "precision.dtype=fp16"},
           {"parallel.stages=2", "parallel.schedule=interleaved", "parallel.chunks=2",
            "parallel.checkpoint=every:2", "data.eval_fraction=0.05"}}) {
    const Plan plan = MakePlan(TinyConfig(overrides));
    Launch decoded_launch;
    const Plan decoded = DecodeJobPlan(EncodeJobPlan(plan, launch), &decoded_launch);
    EXPECT_EQ(decoded, plan) << overrides.front();
    EXPECT_EQ(decoded_launch, launch);
    EXPECT_EQ(decoded.eval_schedule.per_stage.size(), static_cast<size_t>(plan.num_stages()));
    for (int r = 0; r < plan.num_stages(); ++r) {
      EXPECT_EQ(decoded.ChunkRanges(r), plan.ChunkRanges(r));
    }
  }
}

// A Llama's head size set apart from the width travels with the plan (one of width / num_heads
// is the default, spelled 0), and so does Qwen3's family.
TEST(CodecTest, AHeadSizeApartFromTheWidthTravelsWithThePlan) {
  const Plan apart = MakePlan(TinyConfig({"model.preset=llama", "model.head_dim=12"}));
  ASSERT_EQ(apart.dims.head_size, 12);
  EXPECT_EQ(DecodeJobPlan(EncodeJobPlan(apart, Launch{}), nullptr).dims, apart.dims);
  EXPECT_EQ(MakePlan(TinyConfig({"model.preset=llama", "model.head_dim=16"})).dims.head_size, 0);
  const Plan qwen3 = MakePlan(TinyConfig({"model.preset=qwen3", "model.head_dim=12"}));
  ASSERT_TRUE(qwen3.dims.qwen3());
  EXPECT_EQ(DecodeJobPlan(EncodeJobPlan(qwen3, Launch{}), nullptr).dims, qwen3.dims);
}

TEST(CodecTest, PlanCarriesTheTiedGroupAndTheTimeouts) {
  const Plan four = MakePlan(TinyConfig({"parallel.stages=4", "parallel.timeout_s=2"}));
  ASSERT_EQ(four.tied.size(), 1u);
  EXPECT_EQ(four.tied[0].param, "wte.weight");
  EXPECT_EQ(four.tied[0].layers, (std::vector<int>{0, 5}));
  EXPECT_EQ(four.tied[0].stages, (std::vector<int>{0, 3}));
  EXPECT_EQ(four.timeouts.wait, std::chrono::milliseconds(2000));
  EXPECT_EQ(four.timeouts.startup, std::chrono::milliseconds(60000));  // the start-up floor
  EXPECT_EQ(four.timeouts.checkpoint, std::chrono::milliseconds(20000));
  const Plan one = MakePlan(TinyConfig({"parallel.stages=1", "parallel.timeout_s=90"}));
  EXPECT_EQ(one.tied[0].stages, (std::vector<int>{0}));
  EXPECT_EQ(one.timeouts.startup, std::chrono::milliseconds(90000));
  // Hundreds of processes take longer to start: 4 stages x 64 replicas wait 0.5 s per process.
  ParallelConfig many;
  many.stages = 4;
  many.replicas = 64;
  many.timeout_s = 2;
  EXPECT_EQ(TimeoutsFor(many).startup, std::chrono::milliseconds(128000));
  EXPECT_EQ(TimeoutsFor(many).wait, std::chrono::milliseconds(2000));
}

TEST(CodecTest, PlanCountsEvalBatchesFromTheHeldOutTailAndNamesAShortOne) {
  // gpt-tiny's data (/usr/share/common-licenses) with 16-token windows, batches of 4.
  const Plan none = MakePlan(TinyConfig({"parallel.stages=2"}));
  EXPECT_EQ(none.eval_batches, 0);
  const Plan two = MakePlan(
      TinyConfig({"parallel.stages=2", "data.eval_fraction=0.01", "train.eval_batches=2"}));
  EXPECT_EQ(two.eval_batches, 2);
  const Plan all = MakePlan(TinyConfig({"data.eval_fraction=0.01"}));
  EXPECT_GT(all.eval_batches, 2);
  try {
    MakePlan(TinyConfig({"data.eval_fraction=0.01", "train.eval_batches=1000000"}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("(data.eval_fraction)"));
    EXPECT_THAT(e.what(), HasSubstr("train.eval_batches asks for 1000000"));
  }
}

TEST(CodecTest, MalformedOrInconsistentPlanIsAnError) {
  EXPECT_THROW(DecodeJobPlan("\xff\xff\xff", nullptr), Error);
  pb::JobPlan message;
  ASSERT_TRUE(
      message.ParseFromString(EncodeJobPlan(MakePlan(TinyConfig({"parallel.stages=2"})), {})));
  message.mutable_stages()->RemoveLast();
  try {
    DecodeJobPlan(message.SerializeAsString(), nullptr);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("1 stages and 1 chunks for 2 ranks"));
  }
}

TEST(CodecTest, RankResultComesBackEqualWithTypedSpans) {
  RankResult result;
  result.rank = 2;
  result.digests = {{3, 0xfedcba9876543210ull}, {4, 7}};
  result.memory_peak.bytes = {1, 2, 3, 4, 5, 6};
  result.memory_peak.total = 19;
  result.compute_s = 1.25;
  result.wall_s = 2.5;
  result.holds_head = true;
  StepTrace step{9, {}};
  step.spans.push_back({TraceSpan::Kind::kWait, {2, ActionKind::kRecvForward, 1, 1}, 10, 20});
  step.spans.push_back({TraceSpan::Kind::kCompute, {2, ActionKind::kForward, 1, 1}, 20, 35});
  step.spans.push_back({TraceSpan::Kind::kWait, {2, ActionKind::kSendBackward, 0, 0}, 35, 36});
  step.spans.push_back({TraceSpan::Kind::kOptimizer, {}, 36, 50});
  result.trace.push_back(step);
  EXPECT_EQ(DecodeRankResult(EncodeRankResult(result)), result);
  result.eval = EvalRecord{2.5, 3, 96, 0.25};
  EXPECT_EQ(DecodeRankResult(EncodeRankResult(result)), result);
  EXPECT_EQ(step.spans[0].Name(4, ChunkLayout::kLoop), "wait 6RECV_F1");
  EXPECT_EQ(step.spans[1].Name(4, ChunkLayout::kLoop), "6F1");
  EXPECT_EQ(step.spans[2].Name(4, ChunkLayout::kLoop), "wait SEND_B0");
  EXPECT_EQ(step.spans[3].Name(4, ChunkLayout::kLoop), "optimizer");
  EXPECT_THROW(DecodeRankResult("\xff\xff"), Error);
}

}  // namespace
}  // namespace baton
