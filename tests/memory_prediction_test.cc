// The run report's memory promise (docs/memory.md) with real processes over Gloo: for every rank
// of P stages x T tensor ranks x R replicas, in fp32 and bf16, the peaks the plan predicted equal
// the peaks the rank's ledger measured over the whole run (its steps and the final checkpoint),
// per category and in total, byte for byte, as report.json gives them; with ZeRO-1, -2 and -3,
// and background checkpoints (their host copy booked as checkpoint memory).
//
// The in-process planner tests (planner/memory_planner_test.cc) hold the prediction to
// RunInProcess, which talks through FakeHub; this one reads what a user reads. The avx2_emulation
// test (scripts/avx2-emulation.sh) runs it again with the launcher and its workers on an emulated
// AVX2-only CPU (BATON_WORKER_PREFIX, tests/baton_process.h), where f32 products take OpenBLAS and
// bf16 ones are staged to f32.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/baton_process.h"
#include "tests/run_report.h"

namespace baton::testing {
namespace {

struct Layout {
  int stages = 1;
  int tensor = 1;
  int replicas = 1;
  std::vector<std::string> extra;  // more --set values
};

// gpt-tiny made small enough for several jobs under emulation: 2 steps of 2 micro-batches.
const std::vector<std::string> kSmall = {
    "model.num_layers=2",    "model.width=64", "model.context=32",     "train.batch_size=4",
    "train.micro_batches=2", "train.steps=2",  "train.warmup_steps=0", "train.log_every=1"};

std::string Describe(const Layout& layout, const std::string& dtype) {
  std::string what =
      fmt::format("{} P={} T={} R={}", dtype, layout.stages, layout.tensor, layout.replicas);
  for (const std::string& s : layout.extra) what += " " + s;
  return what;
}

nlohmann::json Run(const std::string& dir, const Layout& layout, const std::string& dtype) {
  std::vector<std::string> sets = kSmall;
  sets.push_back(fmt::format("parallel.stages={}", layout.stages));
  sets.push_back(fmt::format("parallel.tensor={}", layout.tensor));
  sets.push_back(fmt::format("parallel.replicas={}", layout.replicas));
  sets.push_back("precision.dtype=" + dtype);
  sets.insert(sets.end(), layout.extra.begin(), layout.extra.end());
  std::vector<std::string> args;
  for (const std::string& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  return RunAndReport("configs/gpt-tiny.yaml", dir, args);
}

// Every category of every rank: predicted == measured.
void ExpectPredictionExact(const nlohmann::json& report, const Layout& layout,
                           const std::string& what) {
  ASSERT_TRUE(report.contains("stages")) << what;
  const nlohmann::json& ranks = report.at("stages");
  ASSERT_EQ(ranks.size(), static_cast<size_t>(layout.stages * layout.tensor * layout.replicas))
      << what;
  for (const nlohmann::json& rank : ranks) {
    const nlohmann::json& peak = rank.at("memory").at("peak");
    const nlohmann::json& predicted = rank.at("memory").at("predicted");
    ASSERT_EQ(peak.size(), 8u) << what;  // seven categories and the total
    for (const auto& [key, bytes] : peak.items()) {
      EXPECT_EQ(predicted.at(key), bytes)
          << what << ", rank " << rank.value("rank", rank.at("stage").get<int>()) << " (stage "
          << rank.at("stage") << "), " << key;
    }
  }
}

void ExpectEveryLayoutPredictedExactly(const std::string& dtype) {
  const std::vector<Layout> layouts = {
      {1, 1, 1, {}},
      {1, 2, 1, {}},  // the cut matrices made whole for the final checkpoint
      {2, 2, 1, {"parallel.sequence_parallel=true"}},
      {2, 1, 2, {"parallel.zero=1"}},  // replica 0 gathers the optimizer state to save it
      {2, 2, 2, {"parallel.zero=1"}},
      // Background checkpoints: the ranks that write keep a host copy of their whole layers from
      // the first save on, and the second step runs beside it. With ZeRO-2, whose released
      // gradients come and go around each layer's backward.
      {2, 2, 2, {"parallel.zero=2", "output.async_checkpoint=true", "output.checkpoint_every=1"}},
      // ZeRO-3: each layer's parameters gathered for each use (and for the final checkpoint),
      // or kept from the first use to the step's end.
      {2, 2, 2, {"parallel.zero=3"}},
      {2,
       1,
       2,
       {"parallel.zero=3", "parallel.zero3_keep=step", "output.async_checkpoint=true",
        "output.checkpoint_every=1"}},
  };
  const std::string root = TempDir("memory-" + dtype);
  for (size_t i = 0; i < layouts.size(); ++i) {
    const std::string what = Describe(layouts[i], dtype);
    const nlohmann::json report = Run(fmt::format("{}/{}", root, i), layouts[i], dtype);
    ExpectPredictionExact(report, layouts[i], what);
    // The copy is there on the writers (replica 0, tensor rank 0: a quarter of the ranks) only.
    int copies = 0;
    for (const nlohmann::json& rank : report.value("stages", nlohmann::json::array())) {
      copies += rank.at("memory").at("peak").at("checkpoint").get<int64_t>() > 0 ? 1 : 0;
    }
    const bool async = std::find(layouts[i].extra.begin(), layouts[i].extra.end(),
                                 "output.async_checkpoint=true") != layouts[i].extra.end();
    EXPECT_EQ(copies, async ? layouts[i].stages : 0) << what;
  }
}

TEST(MemoryPredictionTest, EveryRanksPeaksEqualThePredictionInFp32) {
  ExpectEveryLayoutPredictedExactly("fp32");
}

TEST(MemoryPredictionTest, EveryRanksPeaksEqualThePredictionInBf16) {
  ExpectEveryLayoutPredictedExactly("bf16");
}

}  // namespace
}  // namespace baton::testing
