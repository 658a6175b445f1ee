#include "plan/plan.h"

#include <algorithm>
#include <utility>

#include "scheduler/action.h"

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
  shape.flash_attention = config.model.attention == AttentionKind::kFlash;
  return shape;
}

void Plan::SetCut(std::vector<LayerRange> cut) {
  virtual_stages = std::move(cut);
  tied = TiedGroupsFor(graph, dims, virtual_stages, num_ranks());
}

std::vector<int> RanksHolding(const std::vector<int>& layers,
                              const std::vector<LayerRange>& virtual_stages, int num_ranks) {
  std::vector<int> ranks;
  for (int layer : layers) {
    for (int j = 0; j < static_cast<int>(virtual_stages.size()); ++j) {
      const LayerRange& r = virtual_stages[static_cast<size_t>(j)];
      if (layer >= r.first && layer <= r.last) ranks.push_back(RankOfVirtualStage(j, num_ranks));
    }
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

std::vector<TiedGroup> TiedGroupsFor(const std::vector<LayerSpec>& graph, const ModelDims& dims,
                                     const std::vector<LayerRange>& virtual_stages, int num_ranks) {
  std::vector<TiedGroup> groups;
  for (const TiedParameter& tied : TiedParameters(graph, dims)) {
    groups.push_back(
        {tied.name, tied.layers, RanksHolding(tied.layers, virtual_stages, num_ranks)});
  }
  return groups;
}

}  // namespace baton
