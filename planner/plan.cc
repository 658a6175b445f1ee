#include "planner/plan.h"

#include <fmt/format.h>

#include "core/error.h"
#include "model/from_config.h"
#include "planner/memory_planner.h"
#include "planner/partitioner.h"
#include "scheduler/communication.h"
#include "scheduler/generators.h"
#include "scheduler/validator.h"

namespace baton {

std::vector<LayerRange> Plan::ChunkRanges(int rank) const {
  std::vector<LayerRange> ranges;
  for (int c = 0; c < num_chunks(); ++c) {
    ranges.push_back(virtual_stages.at(static_cast<size_t>(VirtualStage(rank, c, num_ranks()))));
  }
  return ranges;
}

MicroBatchShape Plan::micro_batch_shape() const {
  MicroBatchShape shape;
  shape.batch_size = MicroBatchSize(config);
  shape.seq_len = SequenceLength(config);
  shape.act_dtype = config.precision.dtype;
  shape.selective_recompute = config.parallel.checkpoint.kind == CheckpointPolicy::Kind::kSelective;
  return shape;
}

namespace {
Schedule MakeComputeSchedule(const Config& config) {
  const ParallelConfig& parallel = config.parallel;
  if (!parallel.schedule_file.empty()) {
    Schedule loaded = LoadScheduleCsv(parallel.schedule_file);
    BATON_CHECK(loaded.stages == parallel.stages,
                "{}: the schedule has {} ranks but parallel.stages is {}", parallel.schedule_file,
                loaded.stages, parallel.stages);
    BATON_CHECK(loaded.microbatches == config.train.micro_batches,
                "{}: the schedule has {} micro-batches but train.micro_batches is {}",
                parallel.schedule_file, loaded.microbatches, config.train.micro_batches);
    return loaded;
  }
  return MakeSchedule(Name(parallel.schedule), parallel.stages, config.train.micro_batches,
                      parallel.chunks);
}
}  // namespace

Plan MakePlan(const Config& config, int64_t memory_budget) {
  Plan plan;
  plan.config = config;
  plan.dims = DimsOf(config.model);
  Validate(plan.dims);
  plan.graph = GraphOf(config.model);
  Schedule schedule;
  try {
    schedule = MakeComputeSchedule(config);
    // RECVs posted when their data is produced: safe for sends that complete before the next
    // compute (worker/engine.h), which makes every rank's memory peak deterministic.
    if (!HasCommunication(schedule)) {
      schedule = InsertCommunication(schedule, CommPlacement::kRendezvousSafe);
    }
    CheckValid(schedule);
  } catch (const Error& e) {
    BATON_FAIL("schedule: {}", e.what());
  }
  plan.schedule = std::move(schedule);
  plan.layer_costs =
      LayerCosts(plan.graph, plan.dims, config.parallel.partition, plan.micro_batch_shape());
  plan.virtual_stages = PartitionLayers(plan.layer_costs, plan.schedule.num_virtual_stages());
  if (memory_budget > 0) {
    const BudgetedPartition cut = PartitionWithinBudget(plan, memory_budget);
    BATON_CHECK(cut.fits, "memory budget {}: {}", FormatBytes(memory_budget), cut.bound);
    plan.virtual_stages = cut.virtual_stages;
    plan.memory_budget = memory_budget;
    plan.partition_bound = cut.bound;
  }
  return plan;
}

std::string FormatPartitionTable(const Plan& plan) {
  const MicroBatchShape shape = plan.micro_batch_shape();
  std::string out = fmt::format("{:>5} {:>5} {:>9} {:>14} {:>14} {:>16}\n", "stage", "chunk",
                                "layers", "parameters", "fwd+bwd FLOPs", "stash B/mbatch");
  for (int j = 0; j < static_cast<int>(plan.virtual_stages.size()); ++j) {
    const LayerRange& r = plan.virtual_stages[static_cast<size_t>(j)];
    int64_t params = 0, flops = 0;
    for (int i = r.first; i <= r.last; ++i) {
      const LayerSpec& spec = plan.graph[static_cast<size_t>(i)];
      params += StoredParamCount(spec, plan.dims);
      flops += ForwardFlops(spec, plan.dims, shape) + BackwardFlops(spec, plan.dims, shape);
    }
    out += fmt::format(
        "{:>5} {:>5} {:>9} {:>14} {:>14} {:>16}\n", RankOfVirtualStage(j, plan.num_ranks()),
        ChunkOfVirtualStage(j, plan.num_ranks()), fmt::format("{}-{}", r.first, r.last), params,
        flops, StashBytesPerMicroBatch(plan, r));
  }
  return out;
}

}  // namespace baton
