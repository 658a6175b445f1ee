#include "launcher/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace baton {

void CheckSamplingOptions(const SamplingOptions& options) {
  BATON_CHECK(options.temperature >= 0 && std::isfinite(options.temperature),
              "--temperature {}: must be >= 0", options.temperature);
  BATON_CHECK(options.top_k >= 0, "--top-k {}: must be >= 0", options.top_k);
  BATON_CHECK(options.top_p > 0 && options.top_p <= 1, "--top-p {}: must be in (0, 1]",
              options.top_p);
}

int SampleToken(const std::vector<float>& logits, const SamplingOptions& options, SplitMix64& rng) {
  BATON_CHECK(!logits.empty(), "sampling from no logits");
  const int v = static_cast<int>(logits.size());
  std::vector<int> order(static_cast<size_t>(v));
  std::iota(order.begin(), order.end(), 0);
  // Largest first; ties by token id, so the order never depends on the sort.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
  });
  if (options.temperature == 0.0) return order.front();
  const int k = options.top_k > 0 ? std::min(options.top_k, v) : v;
  const double top = logits[static_cast<size_t>(order.front())];
  std::vector<double> weights(static_cast<size_t>(k));
  double sum = 0;
  for (int i = 0; i < k; ++i) {
    const double logit = logits[static_cast<size_t>(order[static_cast<size_t>(i)])];
    weights[static_cast<size_t>(i)] = std::exp((logit - top) / options.temperature);
    sum += weights[static_cast<size_t>(i)];
  }
  // The nucleus: the likeliest first until their share reaches top_p.
  int kept = k;
  if (options.top_p < 1) {
    double mass = 0;
    for (int i = 0; i < k; ++i) {
      mass += weights[static_cast<size_t>(i)];
      if (mass >= options.top_p * sum) {
        kept = i + 1;
        sum = mass;
        break;
      }
    }
  }
  double u = rng.Uniform() * sum;
  for (int i = 0; i < kept; ++i) {
    u -= weights[static_cast<size_t>(i)];
    if (u < 0) return order[static_cast<size_t>(i)];
  }
  return order[static_cast<size_t>(kept - 1)];
}

}  // namespace baton
