#include "planner/planner.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "model/from_config.h"
#include "planner/memory_planner.h"
#include "planner/partitioner.h"
#include "scheduler/generators.h"
#include "scheduler/lowering.h"
#include "scheduler/validator.h"
#include "worker/run_data.h"

namespace baton {

namespace {

// parallel.cut as layer ranges, checked against the graph (config/ checked the syntax).
std::vector<LayerRange> ExplicitCut(const std::string& text, int num_layers) {
  std::vector<LayerRange> cut;
  for (const auto& [first, last] : ParseCut(text)) cut.push_back({first, last});
  BATON_CHECK(!cut.empty() && cut.back().last == num_layers - 1,
              "parallel.cut {} must end at the graph's last layer, {}", text, num_layers - 1);
  return cut;
}

Schedule MakeComputeSchedule(const Config& config) {
  const ParallelConfig& parallel = config.parallel;
  if (!parallel.schedule_file.empty()) {
    Schedule loaded = LoadScheduleCsv(parallel.schedule_file);
    BATON_CHECK(loaded.stages == parallel.stages,
                "{}: the schedule has {} ranks but parallel.stages is {}", parallel.schedule_file,
                loaded.stages, parallel.stages);
    BATON_CHECK(loaded.microbatches == MicroBatchesPerReplica(config),
                "{}: the schedule has {} micro-batches but train.micro_batches is {}{}",
                parallel.schedule_file, loaded.microbatches, config.train.micro_batches,
                parallel.replicas > 1
                    ? fmt::format(" ({} per replica of {})", MicroBatchesPerReplica(config),
                                  parallel.replicas)
                    : std::string());
    return loaded;
  }
  return MakeSchedule(Name(parallel.schedule), parallel.stages, MicroBatchesPerReplica(config),
                      ChunksFor(Name(parallel.schedule), ScheduleChunks(parallel)));
}
}  // namespace

Plan MakePlan(const Config& config, int64_t memory_budget) {
  Plan plan;
  plan.config = config;
  plan.dims = DimsOf(config.model);
  Validate(plan.dims);
  plan.graph = GraphOf(config.model);
  plan.timeouts = TimeoutsFor(config.parallel);
  // The compute schedule lowered to the program the engines run (scheduler/lowering.h).
  try {
    plan.schedule = Lower(MakeComputeSchedule(config), RuntimeLowering());
  } catch (const Error& e) {
    BATON_FAIL("schedule: {}", e.what());
  }
  plan.eval_schedule = Lower(ForwardOnly(plan.schedule.stages, plan.schedule.microbatches,
                                         plan.schedule.chunks, plan.schedule.layout),
                             RuntimeLowering());
  plan.sends_complete_before_compute =
      plan.num_stages() > 1 &&
      static_cast<bool>(Validate(plan.schedule, CommSemantics::kRendezvous)) &&
      static_cast<bool>(Validate(plan.eval_schedule, CommSemantics::kRendezvous));
  plan.eval_batches = EvalBatchesFor(config);
  plan.layer_costs =
      LayerCosts(plan.graph, plan.dims, config.parallel.partition, plan.micro_batch_shape());
  if (config.parallel.cut.empty()) {
    plan.SetCut(PartitionKeepingGroups(plan.layer_costs, plan.schedule.num_virtual_stages(),
                                       ShareGroups(plan.graph, plan.dims)));
  } else {
    plan.SetCut(ExplicitCut(config.parallel.cut, static_cast<int>(plan.graph.size())));
  }
  if (memory_budget > 0 && !config.parallel.cut.empty()) {
    // An explicit cut is the user's (or `baton tune`'s) decision: checked, never moved.
    const std::vector<RankMemory> predicted = PredictMemory(plan);
    for (size_t r = 0; r < predicted.size(); ++r) {
      BATON_CHECK(predicted[r].peak.total <= memory_budget,
                  "memory budget {}: parallel.cut {} needs {} on rank {}",
                  FormatBytes(memory_budget), config.parallel.cut,
                  FormatBytes(predicted[r].peak.total), r);
    }
    plan.memory_budget = memory_budget;
    plan.partition_bound = "parallel.cut";
  } else if (memory_budget > 0) {
    const BudgetedPartition cut = PartitionWithinBudget(plan, memory_budget);
    BATON_CHECK(cut.fits, "memory budget {}: {}", FormatBytes(memory_budget), cut.bound);
    plan.SetCut(cut.virtual_stages);
    plan.memory_budget = memory_budget;
    plan.partition_bound = cut.bound;
  }
  return plan;
}

std::vector<std::string> SplitShareGroups(const Plan& plan) {
  std::vector<std::string> split;
  for (const std::vector<int>& group : ShareGroups(plan.graph, plan.dims)) {
    const std::vector<int> ranks =
        StagesHolding(group, plan.virtual_stages, plan.num_stages(), plan.schedule.layout);
    if (ranks.size() < 2) continue;
    const LayerSpec& first = plan.graph[static_cast<size_t>(group.front())];
    const LayerSpec& last = plan.graph[static_cast<size_t>(group.back())];
    split.push_back(fmt::format("blocks {}-{} (layers {}-{}) on stages {}", first.block_index,
                                last.block_index, group.front(), group.back(),
                                fmt::join(ranks, ", ")));
  }
  return split;
}

std::string FormatPartitionTable(const Plan& plan) {
  const MicroBatchShape shape = plan.micro_batch_shape();
  std::string out = fmt::format("{:>5} {:>5} {:>9} {:>14} {:>14} {:>16}\n", "stage", "chunk",
                                "layers", "parameters", "fwd+bwd FLOPs", "stash B/mbatch");
  int64_t held = 0;
  for (int j = 0; j < static_cast<int>(plan.virtual_stages.size()); ++j) {
    const LayerRange& r = plan.virtual_stages[static_cast<size_t>(j)];
    const int64_t params = StoredParamCount(plan.graph, r.first, r.last, plan.dims);
    held += params;
    int64_t flops = 0;
    for (int i = r.first; i <= r.last; ++i) {
      const LayerSpec& spec = plan.graph[static_cast<size_t>(i)];
      flops += ForwardFlops(spec, plan.dims, shape) + BackwardFlops(spec, plan.dims, shape);
    }
    out += fmt::format("{:>5} {:>5} {:>9} {:>14} {:>14} {:>16}\n", plan.schedule.StageOf(j),
                       ChunkOfVirtualStage(j, plan.num_stages()),
                       fmt::format("{}-{}", r.first, r.last), params, flops,
                       StashBytesPerMicroBatch(plan, r));
  }
  for (const TiedGroup& tied : plan.tied) {
    if (tied.stages.size() < 2) continue;
    out += fmt::format("tied: {} on stages {}: each holds a copy, gradients summed across them\n",
                       tied.param, fmt::join(tied.stages, ", "));
  }
  for (const std::string& group : SplitShareGroups(plan)) {
    out += fmt::format("share group split: {}: each holds a copy, gradients summed across them\n",
                       group);
  }
  const int64_t model =
      StoredParamCount(plan.graph, 0, static_cast<int>(plan.graph.size()) - 1, plan.dims);
  if (held != model) {
    out += fmt::format(
        "the chunks' parameters add up to {}, {} more than the model's {}: a parameter held in "
        "more than one chunk counts in each\n",
        held, held - model, model);
  }
  return out;
}

}  // namespace baton
