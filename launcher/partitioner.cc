#include "launcher/partitioner.h"

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

std::vector<LayerRange> PartitionLayers(const std::vector<double>& costs, int parts) {
  const int n = static_cast<int>(costs.size());
  BATON_CHECK(parts >= 1, "need at least one stage, got {}", parts);
  BATON_CHECK(parts <= n,
              "cannot cut a {}-layer graph into {} pipeline parts: every stage (and every "
              "interleaved chunk) needs at least one layer; use fewer stages or chunks",
              n, parts);
  std::vector<double> prefix(static_cast<size_t>(n) + 1, 0.0);
  for (int i = 0; i < n; ++i)
    prefix[static_cast<size_t>(i) + 1] =
        prefix[static_cast<size_t>(i)] + costs[static_cast<size_t>(i)];
  const auto sum = [&](int a, int b) {
    return prefix[static_cast<size_t>(b)] - prefix[static_cast<size_t>(a)];
  };
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[k][i]: the smallest max-part cost cutting layers [0, i) into k parts; cut[k][i] the
  // start of the last part.
  std::vector<std::vector<double>> best(static_cast<size_t>(parts) + 1,
                                        std::vector<double>(static_cast<size_t>(n) + 1, kInf));
  std::vector<std::vector<int>> cut(static_cast<size_t>(parts) + 1,
                                    std::vector<int>(static_cast<size_t>(n) + 1, 0));
  best[0][0] = 0.0;
  for (int k = 1; k <= parts; ++k) {
    for (int i = k; i <= n - (parts - k); ++i) {
      for (int j = k - 1; j < i; ++j) {
        const double candidate =
            std::max(best[static_cast<size_t>(k) - 1][static_cast<size_t>(j)], sum(j, i));
        if (candidate < best[static_cast<size_t>(k)][static_cast<size_t>(i)]) {
          best[static_cast<size_t>(k)][static_cast<size_t>(i)] = candidate;
          cut[static_cast<size_t>(k)][static_cast<size_t>(i)] = j;
        }
      }
    }
  }
  std::vector<LayerRange> ranges(static_cast<size_t>(parts));
  int end = n;
  for (int k = parts; k >= 1; --k) {
    const int start = cut[static_cast<size_t>(k)][static_cast<size_t>(end)];
    ranges[static_cast<size_t>(k) - 1] = {start, end - 1};
    end = start;
  }
  return ranges;
}

}  // namespace baton
