// The mixture-of-experts routing and its gradient (see moe_routing.h).
#include "model/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace baton {
namespace {

// softmax of x[0..n) into out, f32, max-subtracted, summed in order.
void Softmax(const float* x, int64_t n, float* out) {
  float max = x[0];
  for (int64_t i = 1; i < n; ++i) max = std::max(max, x[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = std::exp(x[i] - max);
    sum += out[i];
  }
  for (int64_t i = 0; i < n; ++i) out[i] /= sum;
}

// log sum exp(z[0..e)), in double after subtracting the f32 maximum.
double LogSumExp(const float* z, int64_t e) {
  float max = z[0];
  for (int64_t i = 1; i < e; ++i) max = std::max(max, z[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < e; ++i) sum += std::exp(static_cast<double>(z[i] - max));
  return std::log(sum) + max;
}

// The k largest of score[0..e), ties to the lower index, in descending order.
void TopK(const float* score, int64_t e, int64_t k, int32_t* out) {
  std::vector<int32_t> order(static_cast<size_t>(e));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  std::copy(order.begin(), order.begin() + k, out);
}

}  // namespace

MoeRouting Route(const MoeDims& moe, std::vector<float> logits, int64_t tokens) {
  const int64_t e = moe.num_experts, k = moe.top_k;
  BATON_CHECK(static_cast<int64_t>(logits.size()) == tokens * e,
              "routing {} tokens over {} experts needs {} logits, got {}", tokens, e, tokens * e,
              logits.size());
  MoeRouting r;
  r.tokens = tokens;
  r.logits = std::move(logits);
  r.probs.resize(r.logits.size());
  r.choices.resize(static_cast<size_t>(tokens * k));
  r.weights.resize(r.choices.size());
  r.load.assign(static_cast<size_t>(e), 0);
  double z_sum = 0.0;
  std::vector<float> chosen(static_cast<size_t>(k)), soft(static_cast<size_t>(k));
  for (int64_t n = 0; n < tokens; ++n) {
    const float* z = &r.logits[static_cast<size_t>(n * e)];
    float* p = &r.probs[static_cast<size_t>(n * e)];
    int32_t* c = &r.choices[static_cast<size_t>(n * k)];
    float* w = &r.weights[static_cast<size_t>(n * k)];
    Softmax(z, e, p);
    const double lse = LogSumExp(z, e);
    z_sum += lse * lse;
    if (moe.router == MoeDims::Router::kTopkSoftmax) {
      TopK(z, e, k, c);
      for (int64_t j = 0; j < k; ++j) chosen[static_cast<size_t>(j)] = z[c[j]];
      Softmax(chosen.data(), k, w);
    } else {
      TopK(p, e, k, c);
      float total = 0.0f;
      for (int64_t j = 0; j < k; ++j) total += p[c[j]];
      for (int64_t j = 0; j < k; ++j) w[j] = moe.norm_topk_prob ? p[c[j]] / total : p[c[j]];
    }
    for (int64_t j = 0; j < k; ++j) ++r.load[static_cast<size_t>(c[j])];
  }
  // Capacity: admitted by rank, then token; kept rows grouped by expert in token order.
  const int64_t capacity = moe.capacity(tokens);
  std::vector<int64_t> kept(static_cast<size_t>(e), 0);
  std::vector<char> admitted(r.choices.size(), 0);
  for (int64_t j = 0; j < k; ++j) {
    for (int64_t n = 0; n < tokens; ++n) {
      const size_t i = static_cast<size_t>(n * k + j);
      int64_t& count = kept[static_cast<size_t>(r.choices[i])];
      if (count < capacity) {
        ++count;
        admitted[i] = 1;
      } else {
        ++r.dropped;
      }
    }
  }
  r.offsets.assign(static_cast<size_t>(e + 1), 0);
  for (int64_t x = 0; x < e; ++x) r.offsets[static_cast<size_t>(x + 1)] = r.offsets[x] + kept[x];
  std::vector<int64_t> next(r.offsets.begin(), r.offsets.end() - 1);
  r.slots.assign(r.choices.size(), -1);
  for (size_t i = 0; i < r.choices.size(); ++i) {
    if (admitted[i]) r.slots[i] = static_cast<int32_t>(next[static_cast<size_t>(r.choices[i])]++);
  }
  // The losses.
  double aux = 0.0;
  for (int64_t x = 0; x < e; ++x) {
    double mean_p = 0.0;
    for (int64_t n = 0; n < tokens; ++n) mean_p += r.probs[static_cast<size_t>(n * e + x)];
    aux += static_cast<double>(r.load[x]) / tokens * (mean_p / tokens);
  }
  r.aux_loss = aux * e;
  r.z_loss = z_sum / tokens;
  return r;
}

void ExpertStats::Add(const MoeRouting& routing) {
  if (load.empty()) load.assign(routing.load.size(), 0);
  BATON_CHECK(load.size() == routing.load.size(), "expert statistics of {} and {} experts",
              load.size(), routing.load.size());
  for (size_t e = 0; e < load.size(); ++e) load[e] += routing.load[e];
  tokens += routing.tokens;
  dropped += routing.dropped;
  ++microbatches;
  aux_loss += routing.aux_loss;
  z_loss += routing.z_loss;
}

std::vector<float> RouterGradient(const MoeDims& moe, const MoeRouting& r,
                                  const std::vector<float>& dweights, float loss_grad_scale) {
  const int64_t e = moe.num_experts, k = moe.top_k, tokens = r.tokens;
  BATON_CHECK(static_cast<int64_t>(dweights.size()) == tokens * k,
              "{} weight gradients for {} tokens of {} choices", dweights.size(), tokens, k);
  std::vector<float> dz(static_cast<size_t>(tokens * e), 0.0f);
  // d aux / d p[n,x] = coef E f_x / N, the same for every token.
  std::vector<double> daux_dp(static_cast<size_t>(e), 0.0);
  for (int64_t x = 0; x < e; ++x) {
    daux_dp[x] = moe.aux_loss_coef * loss_grad_scale * e *
                 (static_cast<double>(r.load[x]) / tokens) / tokens;
  }
  std::vector<double> dp(static_cast<size_t>(e));
  for (int64_t n = 0; n < tokens; ++n) {
    const float* p = &r.probs[static_cast<size_t>(n * e)];
    const int32_t* c = &r.choices[static_cast<size_t>(n * k)];
    const float* w = &r.weights[static_cast<size_t>(n * k)];
    const float* dw = &dweights[static_cast<size_t>(n * k)];
    float* g = &dz[static_cast<size_t>(n * e)];
    std::copy(daux_dp.begin(), daux_dp.end(), dp.begin());
    if (moe.router == MoeDims::Router::kTopkSoftmax) {
      // w = softmax(z[c]): dz[c_i] = w_i (dw_i - sum_j w_j dw_j).
      double dot = 0.0;
      for (int64_t j = 0; j < k; ++j) dot += static_cast<double>(w[j]) * dw[j];
      for (int64_t j = 0; j < k; ++j) g[c[j]] += static_cast<float>(w[j] * (dw[j] - dot));
    } else if (moe.norm_topk_prob) {
      // w_i = p_i / S over the chosen: dp_i = (dw_i - sum_j dw_j w_j) / S.
      double total = 0.0, dot = 0.0;
      for (int64_t j = 0; j < k; ++j) {
        total += p[c[j]];
        dot += static_cast<double>(dw[j]) * w[j];
      }
      for (int64_t j = 0; j < k; ++j) dp[static_cast<size_t>(c[j])] += (dw[j] - dot) / total;
    } else {
      for (int64_t j = 0; j < k; ++j) dp[static_cast<size_t>(c[j])] += dw[j];
    }
    // Through the softmax over all experts: dz += p (dp - p . dp); the z-loss adds
    // coef 2 lse p / N.
    double pdp = 0.0;
    for (int64_t x = 0; x < e; ++x) pdp += p[x] * dp[static_cast<size_t>(x)];
    double lse_term = 0.0;
    if (moe.z_loss_coef > 0.0) {
      lse_term = moe.z_loss_coef * loss_grad_scale * 2.0 *
                 LogSumExp(&r.logits[static_cast<size_t>(n * e)], e) / tokens;
    }
    for (int64_t x = 0; x < e; ++x) {
      g[x] += static_cast<float>(p[x] * (dp[static_cast<size_t>(x)] - pdp + lse_term));
    }
  }
  return dz;
}

}  // namespace baton
