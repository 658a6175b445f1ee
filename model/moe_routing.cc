// The mixture-of-experts routing and its gradient (see moe_routing.h).
#include "model/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>

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

float Sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

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

// dp[c_j] += the loss's gradient on token n's score of its choice c_j, through its weights:
// w_j = s_j / S over the chosen when norm_topk_prob (dp_j = (dw_j - sum_i dw_i w_i) / S), else
// w_j = s_j. The scores s are probs: the softmax's, or sigmoid_bias's sigmoids.
void ChosenScoresGradient(const MoeDims& moe, const MoeRouting& r, int64_t n, const float* dw,
                          std::vector<double>& dp) {
  const int64_t e = moe.num_experts, k = moe.top_k;
  const float* s = &r.probs[static_cast<size_t>(n * e)];
  const int32_t* c = &r.choices[static_cast<size_t>(n * k)];
  const float* w = &r.weights[static_cast<size_t>(n * k)];
  if (!moe.norm_topk_prob) {
    for (int64_t j = 0; j < k; ++j) dp[static_cast<size_t>(c[j])] += dw[j];
    return;
  }
  double total = 0.0, dot = 0.0;
  for (int64_t j = 0; j < k; ++j) {
    total += s[c[j]];
    dot += static_cast<double>(dw[j]) * w[j];
  }
  for (int64_t j = 0; j < k; ++j) dp[static_cast<size_t>(c[j])] += (dw[j] - dot) / total;
}

// d z-loss / d z[n,x] = coef 2 lse(z[n]) softmax(z[n])[x] / N, scaled: this function is all of it
// but the softmax (0 without a z-loss).
double ZLossTerm(const MoeDims& moe, const MoeRouting& r, int64_t n, float loss_grad_scale) {
  if (moe.z_loss_coef <= 0.0) return 0.0;
  return moe.z_loss_coef * loss_grad_scale * 2.0 *
         LogSumExp(&r.logits[static_cast<size_t>(n * moe.num_experts)], moe.num_experts) / r.tokens;
}

// sigmoid_bias, token n: g (E) += the logits' gradient. The scores s = sigmoid(z) take dp (the
// chosen ones', dp holding no other term) and dz = dp s (1 - s): the bias only picks, so it
// has no gradient. The z-loss adds its term (ZLossTerm) times softmax(z), made in `softmax` (E,
// the caller's scratch) only where there is a z-loss.
void SigmoidScoresGradient(const MoeDims& moe, const MoeRouting& r, int64_t n, const float* dw,
                           std::vector<double>& dp, float loss_grad_scale,
                           std::vector<float>& softmax, float* g) {
  const int64_t e = moe.num_experts;
  ChosenScoresGradient(moe, r, n, dw, dp);
  const float* s = &r.probs[static_cast<size_t>(n * e)];
  const double lse_term = ZLossTerm(moe, r, n, loss_grad_scale);
  if (lse_term != 0.0) Softmax(&r.logits[static_cast<size_t>(n * e)], e, softmax.data());
  for (int64_t x = 0; x < e; ++x) {
    const double z_loss = lse_term != 0.0 ? softmax[static_cast<size_t>(x)] * lse_term : 0.0;
    g[x] += static_cast<float>(dp[static_cast<size_t>(x)] * s[x] * (1.0 - s[x]) + z_loss);
  }
}

}  // namespace

MoeRouting Route(const MoeDims& moe, std::vector<float> logits, int64_t tokens,
                 std::span<const float> bias) {
  const int64_t e = moe.num_experts, k = moe.top_k;
  BATON_CHECK(static_cast<int64_t>(logits.size()) == tokens * e,
              "routing {} tokens over {} experts needs {} logits, got {}", tokens, e, tokens * e,
              logits.size());
  BATON_CHECK(static_cast<int64_t>(bias.size()) == (moe.routing_bias() ? e : 0),
              "routing over {} experts with {} bias values", e, bias.size());
  MoeRouting r;
  r.tokens = tokens;
  r.logits = std::move(logits);
  r.probs.resize(r.logits.size());
  r.choices.resize(static_cast<size_t>(tokens * k));
  r.weights.resize(r.choices.size());
  r.load.assign(static_cast<size_t>(e), 0);
  double z_sum = 0.0;
  std::vector<float> chosen(static_cast<size_t>(k)), biased(static_cast<size_t>(e));
  for (int64_t n = 0; n < tokens; ++n) {
    const float* z = &r.logits[static_cast<size_t>(n * e)];
    float* p = &r.probs[static_cast<size_t>(n * e)];
    int32_t* c = &r.choices[static_cast<size_t>(n * k)];
    float* w = &r.weights[static_cast<size_t>(n * k)];
    const double lse = LogSumExp(z, e);
    z_sum += lse * lse;
    if (moe.router == MoeDims::Router::kSigmoidBias) {
      for (int64_t x = 0; x < e; ++x) {
        p[x] = Sigmoid(z[x]);
        biased[static_cast<size_t>(x)] = p[x] + bias[static_cast<size_t>(x)];
      }
      TopK(biased.data(), e, k, c);
    } else {
      Softmax(z, e, p);
    }
    if (moe.router == MoeDims::Router::kTopkSoftmax) {
      TopK(z, e, k, c);
      for (int64_t j = 0; j < k; ++j) chosen[static_cast<size_t>(j)] = z[c[j]];
      Softmax(chosen.data(), k, w);
    } else {
      if (moe.router == MoeDims::Router::kSoftmaxTopk) TopK(p, e, k, c);
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
  // The losses (no auxiliary loss with sigmoid_bias: config refuses its coefficient).
  double aux = 0.0;
  for (int64_t x = 0; x < e && !moe.routing_bias(); ++x) {
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
  // d aux / d p[n,x] = coef E f_x / N, the same for every token (no aux with sigmoid_bias).
  std::vector<double> daux_dp(static_cast<size_t>(e), 0.0);
  for (int64_t x = 0; x < e && !moe.routing_bias(); ++x) {
    daux_dp[x] = moe.aux_loss_coef * loss_grad_scale * e *
                 (static_cast<double>(r.load[x]) / tokens) / tokens;
  }
  std::vector<double> dp(static_cast<size_t>(e));
  std::vector<float> softmax(moe.routing_bias() ? static_cast<size_t>(e) : 0);
  for (int64_t n = 0; n < tokens; ++n) {
    const float* p = &r.probs[static_cast<size_t>(n * e)];
    const int32_t* c = &r.choices[static_cast<size_t>(n * k)];
    const float* w = &r.weights[static_cast<size_t>(n * k)];
    const float* dw = &dweights[static_cast<size_t>(n * k)];
    float* g = &dz[static_cast<size_t>(n * e)];
    std::copy(daux_dp.begin(), daux_dp.end(), dp.begin());
    if (moe.router == MoeDims::Router::kSigmoidBias) {
      SigmoidScoresGradient(moe, r, n, dw, dp, loss_grad_scale, softmax, g);
      continue;
    }
    if (moe.router == MoeDims::Router::kTopkSoftmax) {
      // w = softmax(z[c]): dz[c_i] = w_i (dw_i - sum_j w_j dw_j).
      double dot = 0.0;
      for (int64_t j = 0; j < k; ++j) dot += static_cast<double>(w[j]) * dw[j];
      for (int64_t j = 0; j < k; ++j) g[c[j]] += static_cast<float>(w[j] * (dw[j] - dot));
    } else {
      ChosenScoresGradient(moe, r, n, dw, dp);
    }
    // Through the softmax over all experts: dz += p (dp - p . dp); the z-loss adds
    // coef 2 lse p / N.
    double pdp = 0.0;
    for (int64_t x = 0; x < e; ++x) pdp += p[x] * dp[static_cast<size_t>(x)];
    const double lse_term = ZLossTerm(moe, r, n, loss_grad_scale);
    for (int64_t x = 0; x < e; ++x) {
      g[x] += static_cast<float>(p[x] * (dp[static_cast<size_t>(x)] - pdp + lse_term));
    }
  }
  return dz;
}

}  // namespace baton
