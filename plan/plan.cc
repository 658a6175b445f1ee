#include "plan/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/timeouts.h"
#include "scheduler/action.h"

namespace baton {

std::vector<LayerRange> Plan::ChunkRanges(int stage) const {
  std::vector<LayerRange> ranges;
  for (int c = 0; c < num_chunks(); ++c) {
    ranges.push_back(virtual_stages.at(
        static_cast<size_t>(VirtualStage(stage, c, num_stages(), schedule.layout))));
  }
  return ranges;
}

MicroBatchShape Plan::micro_batch_shape() const {
  MicroBatchShape shape;
  shape.batch_size = MicroBatchSize(config);
  shape.seq_len = SequenceLength(config);
  shape.act_dtype = config.precision.dtype;
  shape.selective_recompute = config.parallel.checkpoint.kind == CheckpointPolicy::Kind::kSelective;
  shape.flash_attention = config.model.attention == AttentionKind::kFlash;
  return shape;
}

std::vector<std::vector<int>> Plan::CollectiveGroups(int world_rank) const {
  const ParallelLayout l = layout();
  std::vector<std::vector<int>> groups;
  for (const TiedGroup& group : tied) {
    std::vector<int> ranks = TiedRanks(group, world_rank);
    if (ranks.size() >= 2) groups.push_back(std::move(ranks));
  }
  if (l.replicas() > 1) groups.push_back(l.GroupOf(Axis::kData, world_rank));
  if (l.tensor() > 1) groups.push_back(l.GroupOf(Axis::kTensor, world_rank));
  return groups;
}

std::vector<int> Plan::TiedRanks(const TiedGroup& group, int world_rank) const {
  const ParallelLayout l = layout();
  Coordinates at = l.At(world_rank);
  if (std::find(group.stages.begin(), group.stages.end(), at.stage) == group.stages.end()) {
    return {};
  }
  std::vector<int> ranks;
  for (int s : group.stages) {
    at.stage = s;
    ranks.push_back(l.WorldRank(at));
  }
  return ranks;
}

std::vector<int> Plan::Peers(int world_rank) const {
  // Its pipeline neighbours, then with ZeRO-1/2 its stage's replicas (the reduce-scatter and
  // all-gather are point to point between them), then its stage's tensor ranks (sequence
  // parallelism's and the checkpoint's all-gathers are point to point too).
  const ParallelLayout l = layout();
  const std::vector<int> pipeline = l.GroupOf(Axis::kPipeline, world_rank);
  const int stage = l.StageOf(world_rank);
  std::vector<int> peers = {pipeline[static_cast<size_t>((stage + l.stages() - 1) % l.stages())],
                            pipeline[static_cast<size_t>((stage + 1) % l.stages())]};
  if (l.replicas() > 1 && config.parallel.zero >= 1) {
    for (int peer : l.GroupOf(Axis::kData, world_rank)) peers.push_back(peer);
  }
  if (l.tensor() > 1) {
    for (int peer : l.GroupOf(Axis::kTensor, world_rank)) peers.push_back(peer);
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  peers.erase(std::remove(peers.begin(), peers.end(), world_rank), peers.end());
  return peers;
}

std::vector<int> Plan::LinkedRanks(int world_rank) const {
  std::vector<int> ranks = Peers(world_rank);
  for (const auto& group : CollectiveGroups(world_rank)) {
    ranks.insert(ranks.end(), group.begin(), group.end());
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  ranks.erase(std::remove(ranks.begin(), ranks.end(), world_rank), ranks.end());
  return ranks;
}

void Plan::SetCut(std::vector<LayerRange> cut) {
  virtual_stages = std::move(cut);
  tied = TiedGroupsFor(graph, dims, virtual_stages, num_stages(), schedule.layout);
}

std::vector<int> StagesHolding(const std::vector<int>& layers,
                               const std::vector<LayerRange>& virtual_stages, int num_stages,
                               ChunkLayout layout) {
  std::vector<int> stages;
  for (int layer : layers) {
    for (int j = 0; j < static_cast<int>(virtual_stages.size()); ++j) {
      const LayerRange& r = virtual_stages[static_cast<size_t>(j)];
      if (layer >= r.first && layer <= r.last)
        stages.push_back(StageOfVirtualStage(j, num_stages, layout));
    }
  }
  std::sort(stages.begin(), stages.end());
  stages.erase(std::unique(stages.begin(), stages.end()), stages.end());
  return stages;
}

std::vector<TiedGroup> TiedGroupsFor(const std::vector<LayerSpec>& graph, const ModelDims& dims,
                                     const std::vector<LayerRange>& virtual_stages, int num_stages,
                                     ChunkLayout layout) {
  std::vector<TiedGroup> groups;
  for (const TiedParameter& tied : TiedParameters(graph, dims)) {
    groups.push_back(
        {tied.name, tied.layers, StagesHolding(tied.layers, virtual_stages, num_stages, layout)});
  }
  return groups;
}

std::chrono::milliseconds StartupPerProcess(int64_t processes) {
  return kStartupWaitPerProcess * std::max<int64_t>(processes, 0);
}

Timeouts TimeoutsFor(const ParallelConfig& parallel) {
  // Start-up waits also cover peers that are still starting (process start, joining, building
  // and loading their stage), which a loaded machine or a slow job scheduler stretches: they wait
  // at least a minute, whatever timeout_s says, and half a second more per process beyond 120
  // (256 processes starting on 2 cores took over a minute). Writing a large checkpoint may take
  // longer than a pipeline wait: ten times as long.
  Timeouts t;
  t.wait = std::chrono::milliseconds(static_cast<int64_t>(parallel.timeout_s * 1000.0));
  t.startup =
      std::max({t.wait, kStartupFloorWait, StartupPerProcess(parallel.stages * parallel.replicas)});
  t.checkpoint = 10 * t.wait;
  t.heartbeat_interval = kHeartbeatInterval;
  return t;
}

}  // namespace baton
