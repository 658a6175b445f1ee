#include "planner/partitioner.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace baton {

std::vector<double> LayerCosts(const std::vector<LayerSpec>& graph, const ModelDims& dims,
                               PartitionPolicy policy, const MicroBatchShape& shape) {
  std::vector<double> costs;
  for (const LayerSpec& spec : graph) {
    switch (policy) {
      case PartitionPolicy::kUniform:
        costs.push_back(1.0);
        break;
      case PartitionPolicy::kParameters:
        costs.push_back(static_cast<double>(StoredParamCount(spec, dims)));
        break;
      case PartitionPolicy::kFlops:
        costs.push_back(static_cast<double>(ForwardFlops(spec, dims, shape) +
                                            BackwardFlops(spec, dims, shape)));
        break;
    }
  }
  return costs;
}

std::optional<std::vector<LayerRange>> MinMaxPartition(int num_layers, int parts,
                                                       const PartCost& cost) {
  const int n = num_layers;
  BATON_CHECK(parts >= 1, "need at least one stage, got {}", parts);
  BATON_CHECK(parts <= n,
              "cannot cut a {}-layer graph into {} pipeline parts: every stage (and every "
              "interleaved chunk) needs at least one layer; use fewer stages or chunks",
              n, parts);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const auto at = [](auto& table, int k, int i) -> auto& {
    return table[static_cast<size_t>(k)][static_cast<size_t>(i)];
  };
  // best[k][i]: the smallest max-part cost cutting layers [0, i) into k parts; cut[k][i] the
  // start of the last part.
  std::vector<std::vector<double>> best(static_cast<size_t>(parts) + 1,
                                        std::vector<double>(static_cast<size_t>(n) + 1, kInf));
  std::vector<std::vector<int>> cut(static_cast<size_t>(parts) + 1,
                                    std::vector<int>(static_cast<size_t>(n) + 1, -1));
  at(best, 0, 0) = 0.0;
  for (int k = 1; k <= parts; ++k) {
    // The last part ends at the last layer: only [0, n) matters for it (its cost function may
    // assume so, e.g. the memory planner running the rank that holds the head).
    for (int i = k == parts ? n : k; i <= n - (parts - k); ++i) {
      for (int j = k - 1; j < i; ++j) {
        const double before = at(best, k - 1, j);
        if (before == kInf || before >= at(best, k, i)) continue;  // cannot improve
        const double candidate = std::max(before, cost(k - 1, LayerRange{j, i - 1}));
        if (candidate < at(best, k, i)) {
          at(best, k, i) = candidate;
          at(cut, k, i) = j;
        }
      }
    }
  }
  if (at(best, parts, n) == kInf) return std::nullopt;
  std::vector<LayerRange> ranges(static_cast<size_t>(parts));
  int end = n;
  for (int k = parts; k >= 1; --k) {
    const int start = at(cut, k, end);
    ranges[static_cast<size_t>(k) - 1] = {start, end - 1};
    end = start;
  }
  return ranges;
}

std::vector<LayerRange> PartitionLayers(const std::vector<double>& costs, int parts) {
  std::vector<double> prefix(costs.size() + 1, 0.0);
  for (size_t i = 0; i < costs.size(); ++i) prefix[i + 1] = prefix[i] + costs[i];
  const auto sum = [&](int, const LayerRange& r) {
    return prefix[static_cast<size_t>(r.last) + 1] - prefix[static_cast<size_t>(r.first)];
  };
  return *MinMaxPartition(static_cast<int>(costs.size()), parts, sum);
}

std::vector<LayerRange> PartitionKeepingGroups(const std::vector<double>& costs, int parts,
                                               const std::vector<std::vector<int>>& groups) {
  const std::vector<LayerRange> best = PartitionLayers(costs, parts);
  if (groups.empty()) return best;
  std::vector<double> prefix(costs.size() + 1, 0.0);
  for (size_t i = 0; i < costs.size(); ++i) prefix[i + 1] = prefix[i] + costs[i];
  const auto sum = [&](const LayerRange& r) {
    return prefix[static_cast<size_t>(r.last) + 1] - prefix[static_cast<size_t>(r.first)];
  };
  // A part may not start inside a group (after its first layer).
  std::vector<bool> inside(costs.size(), false);
  for (const std::vector<int>& group : groups) {
    for (size_t k = 1; k < group.size(); ++k) inside[static_cast<size_t>(group[k])] = true;
  }
  const auto keeping = [&](int, const LayerRange& r) {
    return inside[static_cast<size_t>(r.first)] ? std::numeric_limits<double>::infinity() : sum(r);
  };
  const std::optional<std::vector<LayerRange>> kept =
      MinMaxPartition(static_cast<int>(costs.size()), parts, keeping);
  if (!kept) return best;
  double best_max = 0, kept_max = 0;
  for (const LayerRange& r : best) best_max = std::max(best_max, sum(r));
  for (const LayerRange& r : *kept) kept_max = std::max(kept_max, sum(r));
  return kept_max <= (1.0 + kShareSplitTolerance) * best_max ? *kept : best;
}

}  // namespace baton
