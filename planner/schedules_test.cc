// Every schedule the runtime runs, against one stage: the zero-bubble and V-shaped schedules
// (zb-h2, zb-v, v-half, v-min, dualpipev, interleaved-zb), looped BFS, a user's own V-layout
// schedule file and a schedule torch.distributed.pipelining wrote in its CSV form
// train the same bits as one stage in fp32 on the CPU (DESIGN.md's first invariant), with
// checkpointing, 16-bit precision, a tied head, sharing, evaluation, and replicas with ZeRO-1.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/temp_dir.h"
#include "planner/in_process.h"
#include "planner/planner.h"
#include "scheduler/generators.h"
#include "scheduler/schedule.h"

namespace baton {
namespace {

// The schedules this file is about, with the stage counts each is run on.
const std::vector<std::string> kSchedules = {"zb-h2",     "zb-v",       "v-half",        "v-min",
                                             "dualpipev", "looped-bfs", "interleaved-zb"};

// The loop-layout schedules of several chunks (looped-bfs, interleaved-zb) run 2 here.
bool Looped(const std::string& name) { return name == "looped-bfs" || name == "interleaved-zb"; }
std::string ChunksOf(const std::string& name) {
  return Looped(name) ? "parallel.chunks=2" : "parallel.chunks=1";
}

Config Tiny(const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {
      "model.num_layers=6", "model.width=32",        "model.context=16", "model.num_heads=2",
      "train.batch_size=8", "train.micro_batches=8", "train.steps=3",    "train.warmup_steps=0"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return LoadConfig(std::string(BATON_SOURCE_DIR) + "/configs/gpt-tiny.yaml", all);
}

std::vector<std::string> With(std::vector<std::string> base, const std::vector<std::string>& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

std::string Describe(const std::vector<std::string>& overrides) {
  return fmt::format("{}", fmt::join(overrides, " "));
}

// GPipe in the V layout, as a user would write it in a schedule file: every forward of chunk 0,
// then of chunk 1 (which comes back up the stages), then the backwards in reverse.
Schedule GPipeV(int stages, int microbatches) {
  Schedule schedule{"gpipe-v", stages, microbatches, 2, ChunkLayout::kV, {}};
  schedule.per_stage.resize(static_cast<size_t>(stages));
  for (int s = 0; s < stages; ++s) {
    auto& actions = schedule.per_stage[static_cast<size_t>(s)];
    for (int chunk : {0, 1}) {
      for (int mb = 0; mb < microbatches; ++mb)
        actions.push_back({s, ActionKind::kForward, mb, chunk});
    }
    for (int chunk : {1, 0}) {
      for (int mb = 0; mb < microbatches; ++mb)
        actions.push_back({s, ActionKind::kBackward, mb, chunk});
    }
  }
  return schedule;
}

TEST(ScheduleRuntimeTest, AVLayoutScheduleFileTrainsTheBitsOfOneStage) {
  const std::vector<std::string> eval = {"data.eval_fraction=0.01", "train.eval_every=3"};
  const InProcessResult one = RunInProcess(MakePlan(Tiny(eval)));
  ASSERT_EQ(one.eval_losses.size(), 1u);
  for (int stages : {2, 3}) {
    TempDir dir;
    const std::string file = dir / "gpipe-v.csv";
    SaveScheduleCsv(GPipeV(stages, 8), file);
    const Plan plan = MakePlan(Tiny(
        With(eval, {fmt::format("parallel.stages={}", stages), "parallel.schedule_file=" + file})));
    ASSERT_EQ(plan.schedule.layout, ChunkLayout::kV);
    EXPECT_EQ(plan.head_stage(), 0);
    // Stage 0 holds the embedding and the head: the tied embedding is one local parameter.
    EXPECT_EQ(plan.ChunkRanges(0).front().first, 0);
    EXPECT_EQ(plan.ChunkRanges(0).back().last, static_cast<int>(plan.graph.size()) - 1);
    for (const TiedGroup& group : plan.tied) EXPECT_EQ(group.stages, std::vector<int>{0});
    const InProcessResult v = RunInProcess(plan);
    EXPECT_EQ(v.losses, one.losses) << stages;
    EXPECT_EQ(v.param_checksum, one.param_checksum) << stages;
    EXPECT_EQ(v.eval_losses, one.eval_losses) << stages;
  }
}

// torch's ScheduleInterleavedZeroBubble for 2 ranks x 2 chunks x 4 micro-batches, as torch
// wrote it (tests/fixtures/torch_schedules, its CSV form: no header, explicit virtual stages):
// read as a schedule_file, it trains the bits of one stage.
TEST(ScheduleRuntimeTest, ATorchCsvScheduleFileTrainsTheBitsOfOneStage) {
  const std::vector<std::string> four = {"train.micro_batches=4"};
  const InProcessResult one = RunInProcess(MakePlan(Tiny(four)));
  const std::string file =
      std::string(BATON_SOURCE_DIR) + "/tests/fixtures/torch_schedules/interleaved-zb_p2_m4_v2.csv";
  const Plan plan =
      MakePlan(Tiny(With(four, {"parallel.stages=2", "parallel.schedule_file=" + file})));
  EXPECT_EQ(plan.schedule.layout, ChunkLayout::kLoop);
  EXPECT_EQ(plan.num_chunks(), 2);
  const InProcessResult torch = RunInProcess(plan);
  EXPECT_EQ(torch.losses, one.losses);
  EXPECT_EQ(torch.param_checksum, one.param_checksum);
}

TEST(ScheduleRuntimeTest, EveryScheduleIsBitIdenticalToOneStageWithCheckpointingAndEval) {
  const std::vector<std::string> eval = {"data.eval_fraction=0.01", "train.eval_every=3"};
  const InProcessResult one = RunInProcess(MakePlan(Tiny(eval)));
  for (const std::string& name : kSchedules) {
    const std::string chunks = ChunksOf(name);
    for (const std::vector<std::string>& variant : std::vector<std::vector<std::string>>{
             {"parallel.stages=2"},
             {"parallel.stages=3"},
             {"parallel.stages=2", "parallel.checkpoint=every:1"},
             {"parallel.stages=2", "parallel.checkpoint=selective"},
             {"parallel.stages=3", "parallel.checkpoint=every:2", "device.threads=2"}}) {
      const std::vector<std::string> overrides =
          With(With(eval, variant), {"parallel.schedule=" + name, chunks});
      const Plan plan = MakePlan(Tiny(overrides));
      const bool v_shaped = name != "zb-h2" && !Looped(name);
      EXPECT_EQ(plan.schedule.layout, v_shaped ? ChunkLayout::kV : ChunkLayout::kLoop) << name;
      EXPECT_EQ(plan.num_chunks(), name == "zb-h2" ? 1 : 2) << name;
      EXPECT_EQ(plan.head_stage(), v_shaped ? 0 : plan.num_stages() - 1) << name;
      const InProcessResult other = RunInProcess(plan);
      EXPECT_EQ(other.losses, one.losses) << Describe(overrides);
      EXPECT_EQ(other.param_checksum, one.param_checksum) << Describe(overrides);
      EXPECT_EQ(other.eval_losses, one.eval_losses) << Describe(overrides);
    }
  }
}

TEST(ScheduleRuntimeTest, EveryScheduleIsBitIdenticalToOneStageIn16BitsAndWithSharing) {
  for (const std::vector<std::string>& base :
       std::vector<std::vector<std::string>>{{"precision.dtype=bf16"},
                                             {"precision.dtype=fp16"},
                                             {"model.share.group=2"},
                                             {"model.tie_embeddings=false"}}) {
    const InProcessResult one = RunInProcess(MakePlan(Tiny(base)));
    for (const std::string& name : kSchedules) {
      const std::vector<std::string> overrides =
          With(base, {"parallel.stages=2", "parallel.schedule=" + name, ChunksOf(name)});
      const InProcessResult other = RunInProcess(MakePlan(Tiny(overrides)));
      EXPECT_EQ(other.losses, one.losses) << Describe(overrides);
      EXPECT_EQ(other.param_checksum, one.param_checksum) << Describe(overrides);
    }
  }
}

// Replicas: the same bits as 1F1B's replicas (one replica's gradients sum in the same order
// whatever the schedule), each replica holding the same bits as the others; ZeRO-1 within
// rounding of the replicas without it (the 1e-6, as in_process_test's ZeRO-1 test).
TEST(ScheduleRuntimeTest, EveryScheduleWorksWithReplicasAndZeroOne) {
  const std::vector<std::string> replicas = {"parallel.stages=2", "parallel.replicas=2"};
  const InProcessResult reference = RunInProcess(MakePlan(Tiny(replicas)));
  for (const std::string& name : kSchedules) {
    const std::vector<std::string> base =
        With(replicas, {"parallel.schedule=" + name, ChunksOf(name)});
    const InProcessResult plain = RunInProcess(MakePlan(Tiny(base)));
    EXPECT_EQ(plain.losses, reference.losses) << name;
    EXPECT_EQ(plain.param_checksum, reference.param_checksum) << name;
    const InProcessResult sharded = RunInProcess(MakePlan(Tiny(With(base, {"parallel.zero=1"}))));
    ASSERT_EQ(sharded.losses.size(), plain.losses.size());
    for (size_t i = 0; i < plain.losses.size(); ++i) {
      EXPECT_NEAR(sharded.losses[i], plain.losses[i], 1e-6 * std::abs(plain.losses[i]))
          << name << " step " << i + 1;
    }
    for (const InProcessResult* result : {&plain, &sharded}) {
      for (size_t r = 2; r < result->ranks.size(); ++r) {
        EXPECT_EQ(result->ranks[r].digests, result->ranks[r - 2].digests) << name << " rank " << r;
      }
    }
  }
}

}  // namespace
}  // namespace baton
