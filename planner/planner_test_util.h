// Checks the in-process planner tests of a model family share (llama_planner_test.cc,
// moe_planner_test.cc): the memory plan against the ledger of a real run, and every schedule and
// checkpointing policy against one stage, bit for bit.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "config/config.h"
#include "planner/in_process.h"
#include "planner/memory_planner.h"
#include "planner/planner.h"

namespace baton::planner_test {

// Every rank's predicted peak equals its measured one, per category and in total.
inline void ExpectPredictedEqualsMeasured(const Plan& plan, const std::string& what) {
  const std::vector<RankMemory> predicted = PredictMemory(plan, {CommTransport::kInProcess});
  const InProcessResult measured = RunInProcess(plan);
  ASSERT_EQ(predicted.size(), measured.ranks.size()) << what;
  for (size_t r = 0; r < predicted.size(); ++r) {
    const MemoryFigures& p = predicted[r].peak;
    const MemoryFigures& m = measured.ranks[r].peak;
    for (MemCategory c : {MemCategory::kParams, MemCategory::kGrads, MemCategory::kOptimizer,
                          MemCategory::kActivations, MemCategory::kComm, MemCategory::kWorkspace}) {
      EXPECT_EQ(p[c], m[c]) << what << ", rank " << r << ", " << Name(c);
    }
    EXPECT_EQ(p.total, m.total) << what << ", rank " << r;
  }
}

// The config `make` builds from --set overrides trains to one stage's losses and parameters, bit
// for bit, in fp32 and bf16, on 2 and 4 stages under GPipe, 1F1B, ZB-H1, interleaved and, with
// `dualpipev`, DualPipeV, with and without checkpointing. One stage's losses must fall.
inline void ExpectEveryScheduleBitIdenticalToOneStage(
    const std::function<Config(const std::vector<std::string>&)>& make, bool dualpipev = false) {
  std::vector<std::tuple<int, const char*, const char*>> layouts = {{2, "gpipe", "none"},
                                                                    {2, "1f1b", "every:1"},
                                                                    {2, "zb-h1", "selective"},
                                                                    {4, "1f1b", "every:2"},
                                                                    {2, "interleaved", "none"}};
  if (dualpipev) layouts.emplace_back(2, "dualpipev", "none");
  for (const char* dtype : {"fp32", "bf16"}) {
    const std::string d = std::string("precision.dtype=") + dtype;
    const InProcessResult one = RunInProcess(MakePlan(make({d, "parallel.stages=1"})));
    ASSERT_GE(one.losses.size(), 2u);
    EXPECT_LT(one.losses.back(), one.losses.front()) << dtype;
    for (const auto& [stages, schedule, policy] : layouts) {
      const std::string what = fmt::format("{} {} stages {} {}", dtype, stages, schedule, policy);
      std::vector<std::string> overrides = {d, fmt::format("parallel.stages={}", stages)};
      if (std::string(schedule) == "interleaved") overrides.push_back("parallel.chunks=2");
      overrides.push_back(std::string("parallel.schedule=") + schedule);
      overrides.push_back(std::string("parallel.checkpoint=") + policy);
      const InProcessResult other = RunInProcess(MakePlan(make(overrides)));
      EXPECT_EQ(other.losses, one.losses) << what;
      EXPECT_EQ(other.param_checksum, one.param_checksum) << what;
    }
  }
}

}  // namespace baton::planner_test
