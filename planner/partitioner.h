// Cuts the layer graph into contiguous pipeline parts, balancing a per-layer cost.
//
// A part is a virtual stage (a rank's chunk under interleaving): part j runs on rank j % p.
// The cut minimises the largest part's cost (the pipeline's slowest stage sets its pace); among
// equally good cuts the one whose parts end earliest wins, so results are deterministic.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "model/cost.h"
#include "model/graph.h"

namespace baton {

// Per-layer cost under `policy`: uniform counts layers, parameters counts stored parameters
// (the head's tied copy included: it is a real cost on the last stage), flops counts forward +
// backward FLOPs of one micro-batch.
std::vector<double> LayerCosts(const std::vector<LayerSpec>& graph, const ModelDims& dims,
                               PartitionPolicy policy, const MicroBatchShape& shape);

// Contiguous ranges covering layers 0..n-1, `parts` of them, none empty, minimising the largest
// sum of costs. Throws baton::Error when parts > n or parts < 1.
std::vector<LayerRange> PartitionLayers(const std::vector<double>& costs, int parts);

// Sharing (model.share) saves memory only where a share group's blocks live in one process, so
// the cut keeps every group (graph indices, ascending, as model/graph.h's ShareGroups) within
// one part unless that makes the slowest part cost more than (1 + kShareSplitTolerance) times
// the best cut's; then it is the best cut, and the groups it splits keep one copy per stage.
inline constexpr double kShareSplitTolerance = 0.25;
std::vector<LayerRange> PartitionKeepingGroups(const std::vector<double>& costs, int parts,
                                               const std::vector<std::vector<int>>& groups);

// The cost of part `part` spanning `range`; +infinity forbids it (e.g. over a memory budget).
using PartCost = std::function<double(int part, const LayerRange& range)>;

// The general form: `parts` contiguous non-empty ranges covering layers 0..num_layers-1 that
// minimise the largest part cost, ties going to the cut whose parts end earliest. std::nullopt
// when every cut has a forbidden part. `cost` is called O(parts * num_layers^2) times at most,
// never for a part that could not improve on the best cut found so far at that point, and only
// with ranges a cut can have (part 0 starts at layer 0, the last part ends at the last layer).
std::optional<std::vector<LayerRange>> MinMaxPartition(int num_layers, int parts,
                                                       const PartCost& cost);

}  // namespace baton
