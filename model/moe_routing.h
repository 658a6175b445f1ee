// A mixture-of-experts layer's routing, decided on the host from the router's logits
// (docs/model.md, "Mixture of experts"), and the gradient it sends back to them. Deterministic:
// the same logits give the same routing, so a recompute or a backward routes as the forward did.
//
// Per token n, p = softmax(z[n]) over all experts (f32, in expert order), and its k choices
// c[n,0..k-1] with weights w[n,j]:
//   softmax_topk: the k largest p (ties to the lower expert), w = those p, divided by their sum
//                 when norm_topk_prob (Mixtral, Qwen3-MoE) and as they are otherwise (Qwen2-MoE);
//   topk_softmax: the k largest logits, w = the softmax over those k;
//   sigmoid_bias: s = sigmoid(z) instead of p (probs holds s), the k largest s + b (the
//                 per-expert routing bias, which only picks: DeepSeek-V3's aux-loss-free
//                 balancing), w = those s, divided by their sum when norm_topk_prob.
// Capacity (capacity_factor > 0): each expert takes at most MoeDims::capacity(N) rows; choices are
// admitted by rank (every token's first choice, in token order, then every second choice...),
// and a choice over its expert's capacity is dropped (slot -1, weight kept but unused). Kept
// rows are grouped by expert, each expert's in token order.
//
// Losses (per micro-batch and layer, added to the step's loss as the cross-entropy is, scaled by
// BackwardArgs::loss_grad_scale):
//   aux = aux_loss_coef * E * sum_e f_e P_e (0 with sigmoid_bias, which config keeps at 0), f_e =
//   (choices of e, dropped or not) / N,
//         P_e = mean_n p[n,e]  (Switch / transformers' load_balancing_loss_func for one layer);
//   z   = z_loss_coef * mean_n logsumexp(z[n])^2  (ST-MoE's router z-loss).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/dims.h"

namespace baton {

struct MoeRouting {
  int64_t tokens = 0;
  std::vector<int32_t> choices;  // (N,k) expert of each choice
  std::vector<int32_t> slots;    // (N,k) its row among the routed rows, or -1 (dropped)
  std::vector<float> weights;    // (N,k)
  std::vector<int64_t> offsets;  // (E+1) expert e's rows are [offsets[e], offsets[e+1])
  std::vector<float> probs;      // (N,E) softmax over all experts (sigmoid_bias: sigmoids)
  std::vector<float> logits;     // (N,E) as given
  std::vector<int64_t> load;     // (E) choices of each expert, before capacity
  int64_t dropped = 0;           // choices over capacity
  double aux_loss = 0.0;         // E sum_e f_e P_e, unweighted
  double z_loss = 0.0;           // mean logsumexp^2, unweighted
};

// What one MoE layer's routing did over some micro-batches (a step's, on one rank): the
// choices each expert got (before capacity), the tokens, the dropped choices, and the sums of
// the unweighted router losses over the micro-batches.
struct ExpertStats {
  std::vector<int64_t> load;  // (E)
  int64_t tokens = 0;
  int64_t dropped = 0;
  int64_t microbatches = 0;
  double aux_loss = 0.0;
  double z_loss = 0.0;
  void Add(const MoeRouting& routing);
  bool operator==(const ExpertStats&) const = default;
};

// Routes `tokens` rows of logits (N,E) row-major f32; `bias` is sigmoid_bias's routing bias (E),
// empty for the other routers.
MoeRouting Route(const MoeDims& moe, std::vector<float> logits, int64_t tokens,
                 std::span<const float> bias = {});

// d(loss)/d(logits) (N,E) f32: from the combine weights' gradient dweights (N,k) (already scaled
// through dy) and the router losses weighted by their coefficients times `loss_grad_scale`.
std::vector<float> RouterGradient(const MoeDims& moe, const MoeRouting& routing,
                                  const std::vector<float>& dweights, float loss_grad_scale);

}  // namespace baton
