// Mixture-of-experts layers (model.moe; model/moe_sublayer.cc, model/moe_routing.h): the routing
// against hand-worked cases (choices, weights, capacity's drop order, the rows' order, the losses),
// the layer's forward against a plain per-token reference, every backward (router, permutation,
// experts, shared experts and their gate, the router losses) against finite differences, and the
// zero-bubble split and selective recompute bit for bit against the plain backward. Expert
// parallelism's are model/expert_parallel_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/graph.h"
#include "model/moe_routing.h"
#include "model/moe_test_util.h"
#include "model/test_util.h"

namespace baton {
namespace {

using model_test::Bits;
using model_test::CpuFixture;
using model_test::GradBits;
using numeric_check::CheckGradient;
using numeric_check::ProjectedSum;
using namespace moe_test;  // NOLINT(build/namespaces): the MoE fixtures

// ---- routing

// Three tokens over four experts, two each: token 1 ties experts 1 and 3 (the lower wins).
const std::vector<float> kLogits = {0.5f, 2.0f,  -1.0f, 1.0f,   // token 0: experts 1, 3
                                    0.0f, 1.5f,  0.2f,  1.5f,   // token 1: experts 1, 3 (tie)
                                    3.0f, -2.0f, 2.5f,  0.0f};  // token 2: experts 0, 2

std::vector<float> SoftmaxOf(const std::vector<float>& z) {
  std::vector<float> p(z.size());
  double sum = 0.0;
  for (float v : z) sum += std::exp(static_cast<double>(v));
  for (size_t i = 0; i < z.size(); ++i) p[i] = static_cast<float>(std::exp(double{z[i]}) / sum);
  return p;
}

TEST(MoeRoutingTest, SoftmaxTopkTakesTheLargestProbabilitiesAndRenormalisesThem) {
  MoeDims moe = Experts(4, 2);
  const MoeRouting r = Route(moe, kLogits, 3);
  EXPECT_EQ(r.choices, (std::vector<int32_t>{1, 3, 1, 3, 0, 2}));
  for (int n = 0; n < 3; ++n) {
    const std::vector<float> p = SoftmaxOf({kLogits.begin() + 4 * n, kLogits.begin() + 4 * n + 4});
    const float a = p[r.choices[2 * n]], b = p[r.choices[2 * n + 1]];
    EXPECT_NEAR(r.weights[2 * n], a / (a + b), 1e-6) << n;
    EXPECT_NEAR(r.weights[2 * n + 1], b / (a + b), 1e-6) << n;
  }
  // Dropless: every choice kept, each expert's rows in token order.
  EXPECT_EQ(r.offsets, (std::vector<int64_t>{0, 1, 3, 4, 6}));
  EXPECT_EQ(r.slots, (std::vector<int32_t>{1, 4, 2, 5, 0, 3}));
  EXPECT_EQ(r.dropped, 0);
  // Qwen2-MoE: the probabilities as they are.
  moe.norm_topk_prob = false;
  const MoeRouting raw = Route(moe, kLogits, 3);
  EXPECT_EQ(raw.choices, r.choices);
  EXPECT_NEAR(raw.weights[4], SoftmaxOf({3.0f, -2.0f, 2.5f, 0.0f})[0], 1e-6);
}

TEST(MoeRoutingTest, TopkSoftmaxIsTheSoftmaxOverTheChosenLogits) {
  MoeDims moe = Experts(4, 2);
  moe.router = MoeDims::Router::kTopkSoftmax;
  const MoeRouting r = Route(moe, kLogits, 3);
  EXPECT_EQ(r.choices, (std::vector<int32_t>{1, 3, 1, 3, 0, 2}));
  const std::vector<float> w = SoftmaxOf({2.0f, 1.0f});
  EXPECT_NEAR(r.weights[0], w[0], 1e-6);
  EXPECT_NEAR(r.weights[1], w[1], 1e-6);
  EXPECT_NEAR(r.weights[2], 0.5f, 1e-6);  // the tie
}

float SigmoidOf(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// DeepSeek-V3's router: the k largest sigmoid(z) + b pick, the sigmoids alone weigh.
TEST(MoeRoutingTest, SigmoidBiasPicksByScorePlusBiasAndWeighsByTheScoresAlone) {
  MoeDims moe = Experts(4, 2);
  moe.router = MoeDims::Router::kSigmoidBias;
  const std::vector<float> zero(4, 0.0f);
  const MoeRouting plain = Route(moe, kLogits, 3, zero);
  EXPECT_EQ(plain.choices, (std::vector<int32_t>{1, 3, 1, 3, 0, 2}));  // sigmoid keeps the order
  // Expert 2's bias lifts it into every token's choices (first for tokens 1 and 2, where it
  // sinks expert 0: 0.95 - 1 < 0.5); token 1's experts 1 and 3 still tie (the lower wins).
  const std::vector<float> bias = {-1.0f, 0.0f, 0.6f, 0.0f};
  const MoeRouting r = Route(moe, kLogits, 3, bias);
  EXPECT_EQ(r.choices, (std::vector<int32_t>{1, 2, 2, 1, 2, 3}));
  for (int n = 0; n < 3; ++n) {
    const float a = SigmoidOf(kLogits[4 * n + r.choices[2 * n]]);
    const float b = SigmoidOf(kLogits[4 * n + r.choices[2 * n + 1]]);
    EXPECT_NEAR(r.weights[2 * n], a / (a + b), 1e-6) << n;
    EXPECT_NEAR(r.weights[2 * n + 1], b / (a + b), 1e-6) << n;
    EXPECT_NEAR(r.probs[4 * n + 3], SigmoidOf(kLogits[4 * n + 3]), 1e-6) << n;
  }
  EXPECT_EQ(r.load, (std::vector<int64_t>{0, 2, 3, 1}));
  EXPECT_EQ(r.aux_loss, 0.0);  // aux-loss-free
  moe.norm_topk_prob = false;
  const MoeRouting raw = Route(moe, kLogits, 3, bias);
  EXPECT_EQ(raw.choices, r.choices);
  EXPECT_NEAR(raw.weights[0], SigmoidOf(kLogits[1]), 1e-6);
  EXPECT_THROW(Route(moe, kLogits, 3), Error);  // the bias is not optional
}

// Capacity ceil(0.5 * 3 * 2 / 4) = 1 row per expert: first choices are admitted first, in token
// order (token 1's first choice, expert 1, is over: token 0 took it), then second choices.
TEST(MoeRoutingTest, CapacityAdmitsFirstChoicesFirstAndDropsTheRest) {
  MoeDims moe = Experts(4, 2);
  moe.capacity_factor = 0.5;
  EXPECT_EQ(moe.capacity(3), 1);
  EXPECT_EQ(moe.routed_rows(3), 4);
  const MoeRouting r = Route(moe, kLogits, 3);
  // admitted: token 0 -> 1, token 2 -> 0 (first choices); token 0 -> 3, token 2 -> 2 (second).
  EXPECT_EQ(r.slots, (std::vector<int32_t>{1, 3, -1, -1, 0, 2}));
  EXPECT_EQ(r.offsets, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(r.dropped, 2);
  EXPECT_EQ(r.load, (std::vector<int64_t>{1, 2, 1, 2}));  // choices, dropped or not
}

// aux = E sum_e f_e P_e, z = mean logsumexp^2: the Switch Transformer's and ST-MoE's formulas.
TEST(MoeRoutingTest, TheRouterLossesAreSwitchsBalanceAndTheZLoss) {
  const MoeDims moe = Experts(4, 2);
  const MoeRouting r = Route(moe, kLogits, 3);
  double aux = 0.0, z = 0.0;
  const std::vector<double> f = {1.0 / 3, 2.0 / 3, 1.0 / 3, 2.0 / 3};
  for (int e = 0; e < 4; ++e) {
    double mean_p = 0.0;
    for (int n = 0; n < 3; ++n) {
      mean_p += SoftmaxOf({kLogits.begin() + 4 * n, kLogits.begin() + 4 * n + 4})[e] / 3.0;
    }
    aux += f[e] * mean_p;
  }
  for (int n = 0; n < 3; ++n) {
    double sum = 0.0;
    for (int e = 0; e < 4; ++e) sum += std::exp(double{kLogits[4 * n + e]});
    z += std::log(sum) * std::log(sum) / 3.0;
  }
  EXPECT_NEAR(r.aux_loss, 4 * aux, 1e-6);
  EXPECT_NEAR(r.z_loss, z, 1e-5);
}

// A checkpoint resumes into a run that weighs the router's losses or sets a capacity otherwise
// (CheckpointReader::CheckCompatible asks SameModel), not into other experts or another router.
TEST(MoeRoutingTest, TheTrainingChoicesOfTheExpertsAreNotTheModel) {
  ModelDims a{11, 6, 2, 4, 16};
  a.family = ModelFamily::kLlama;
  a.moe = Experts(4, 2);
  ModelDims b = a;
  b.moe.aux_loss_coef = 0.1;
  b.moe.z_loss_coef = 1e-3;
  b.moe.capacity_factor = 1.25;
  b.moe.bias_update_rate = 0.01;
  EXPECT_TRUE(SameModel(a, b));
  EXPECT_FALSE(a == b);
  for (const auto& change : std::vector<std::function<void(ModelDims&)>>{
           [](ModelDims& d) { d.moe.top_k = 1; },
           [](ModelDims& d) { d.moe.router = MoeDims::Router::kTopkSoftmax; },
           [](ModelDims& d) { d.moe.router = MoeDims::Router::kSigmoidBias; },
           [](ModelDims& d) { d.moe.norm_topk_prob = false; },
           [](ModelDims& d) { d.moe.every = 2; }, [](ModelDims& d) { d.width = 32; }}) {
    ModelDims other = b;
    change(other);
    EXPECT_FALSE(SameModel(a, other)) << ToString(other);
  }
}

// ---- the layer

// An MLP block's output by a plain loop per token and choice, in double: RMSNorm, the router
// (its logits through Route), each chosen expert's SwiGLU, the shared experts and their gate.
// Also the router losses of that routing (for the finite differences of the losses; with
// `routing_only` the output is not computed, y is x).
struct Reference {
  std::vector<double> y;
  MoeRouting routing;
};
Reference ReferenceBlock(MoeCase& c, bool routing_only = false) {
  const MoeDims& moe = c.dims.moe;
  const int64_t n_tokens = kBatch * kSeq, cw = c.dims.width, e = moe.num_experts;
  const int64_t hi = moe.expert_hidden, s = moe.shared_width();
  auto p = c.Params();
  const float* x = c.x.data<float>();
  std::vector<double> ln(static_cast<size_t>(n_tokens * cw));
  std::vector<float> logits(static_cast<size_t>(n_tokens * e));
  for (int64_t n = 0; n < n_tokens; ++n) {
    double squares = 0.0;
    for (int64_t k = 0; k < cw; ++k) squares += double{x[n * cw + k]} * x[n * cw + k];
    const double rstd = 1.0 / std::sqrt(squares / cw + c.dims.norm_eps);
    for (int64_t k = 0; k < cw; ++k) ln[n * cw + k] = x[n * cw + k] * rstd * p["ln_2.weight"][k];
    for (int64_t j = 0; j < e; ++j) {
      double z = 0.0;
      for (int64_t k = 0; k < cw; ++k) z += ln[n * cw + k] * p["mlp.router.weight"][k * e + j];
      logits[n * e + j] = static_cast<float>(z);
    }
  }
  // A SwiGLU MLP of width h on token n: fc (C, 2h) row-major, proj (h, C).
  const auto swiglu = [&](int64_t n, const float* fc, const float* proj, int64_t h) {
    std::vector<double> out(static_cast<size_t>(cw), 0.0);
    for (int64_t u = 0; u < h; ++u) {
      double gate = 0.0, up = 0.0;
      for (int64_t k = 0; k < cw; ++k) {
        gate += ln[n * cw + k] * fc[k * 2 * h + u];
        up += ln[n * cw + k] * fc[k * 2 * h + h + u];
      }
      const double act = gate / (1.0 + std::exp(-gate)) * up;
      for (int64_t k = 0; k < cw; ++k) out[k] += act * proj[u * cw + k];
    }
    return out;
  };
  Reference ref{std::vector<double>(x, x + n_tokens * cw), Route(moe, logits, n_tokens, c.Bias())};
  if (routing_only) return ref;
  for (int64_t n = 0; n < n_tokens; ++n) {
    for (int64_t j = 0; j < moe.top_k; ++j) {
      if (ref.routing.slots[n * moe.top_k + j] < 0) continue;
      const int64_t ex = ref.routing.choices[n * moe.top_k + j];
      const std::vector<double> o = swiglu(n, p["mlp.experts.c_fc.weight"] + ex * cw * 2 * hi,
                                           p["mlp.experts.c_proj.weight"] + ex * hi * cw, hi);
      for (int64_t k = 0; k < cw; ++k)
        ref.y[n * cw + k] += ref.routing.weights[n * moe.top_k + j] * o[k];
    }
    if (s == 0) continue;
    const std::vector<double> o =
        swiglu(n, p["mlp.shared.c_fc.weight"], p["mlp.shared.c_proj.weight"], s);
    double g = 1.0;
    if (moe.shared_gate) {
      double z = 0.0;
      for (int64_t k = 0; k < cw; ++k) z += ln[n * cw + k] * p["mlp.shared_gate.weight"][k];
      g = 1.0 / (1.0 + std::exp(-z));
    }
    for (int64_t k = 0; k < cw; ++k) ref.y[n * cw + k] += g * o[k];
  }
  return ref;
}

TEST(MoeLayerTest, TheForwardIsAPlainLoopOverEachTokensExperts) {
  for (const ModelDims& dims : Variants()) {
    MoeCase c(LayerKind::kMlpBlock, dims);
    Stash stash;
    const Tensor y = c.layer->Forward(c.x, c.batch, stash);
    const Reference ref = ReferenceBlock(c);
    if (dims.moe.capacity_factor > 0) {
      EXPECT_GT(ref.routing.dropped, 0) << ToString(dims);
    }
    for (int64_t i = 0; i < y.numel(); ++i) {
      ASSERT_NEAR(y.data<float>()[i], ref.y[i], 1e-4 * (1.0 + std::abs(ref.y[i])))
          << ToString(dims) << " element " << i;
    }
  }
}

// sigmoid_bias's rule: b_e -= rate where expert e's load is over the mean, += rate where under.
TEST(MoeLayerTest, TheRoutingBiasMovesOverloadedExpertsDownAndUnderloadedUp) {
  ModelDims dims = MoeModel(false);
  dims.moe.router = MoeDims::Router::kSigmoidBias;
  dims.moe.bias_update_rate = 0.125;
  MoeCase c(LayerKind::kMlpBlock, dims);  // loads {8,0,0,0} then {0,0,8,0}, mean 2
  EXPECT_EQ(c.Bias(), (std::vector<float>{0.0f, 0.25f, 0.0f, 0.25f}));
  const std::string name = c.layer->routing_bias().name;
  EXPECT_TRUE(name.ends_with(".mlp.router.expert_bias")) << name;
  c.layer->UpdateRoutingBias({3, 3, 3, 3});  // balanced: nothing moves
  c.layer->UpdateRoutingBias({2, 3, 4, 3});
  EXPECT_EQ(c.Bias(), (std::vector<float>{0.125f, 0.25f, -0.125f, 0.25f}));
  EXPECT_THROW(c.layer->UpdateRoutingBias({1, 2}), Error);
  // The other routers keep no bias.
  MoeCase softmax(LayerKind::kMlpBlock, MoeModel(false));
  EXPECT_FALSE(softmax.layer->routing_bias().values.defined());
}

// Every gradient against central differences of loss = <y, r> + the router losses (weighted as
// the config says), for each router, with and without shared experts and capacity, and with
// selective recompute; the step is small enough that no choice changes.
TEST(MoeLayerTest, EveryBackwardMatchesFiniteDifferences) {
  for (ModelDims dims : Variants()) {
    dims.moe.aux_loss_coef = 0.5;
    dims.moe.z_loss_coef = 0.1;
    // Selective recompute once (its backward is the plain one's: the bit-for-bit test below).
    for (const bool selective : {false, true}) {
      if (selective && dims != Variants().front()) continue;
      MoeCase c(LayerKind::kMlpBlock, dims);
      c.layer->set_selective_recompute(selective);
      model_test::ZeroGrads(*c.fx.backend, *c.layer);
      Stash stash;
      c.layer->Forward(c.x, c.batch, stash);
      const Tensor dx = c.layer->Backward(c.r, c.batch, stash, BackwardArgs{1.0f});
      EXPECT_TRUE(stash.empty());
      const auto loss = [&] {
        Stash s;
        const double projected = ProjectedSum(c.layer->Forward(c.x, c.batch, s), c.r);
        const MoeRouting routing = ReferenceBlock(c, /*routing_only=*/true).routing;
        return projected + dims.moe.aux_loss_coef * routing.aux_loss +
               dims.moe.z_loss_coef * routing.z_loss;
      };
      numeric_check::GradCheckOptions options;
      options.step = 1e-3;
      options.tolerance = 5e-3;
      const auto result = CheckGradient(c.x, loss, dx, options);
      EXPECT_TRUE(result.ok) << ToString(dims) << " dx: " << result.Describe();
      for (Param* p : c.layer->params()) {
        const auto r = CheckGradient(p->value, loss, p->grad, options);
        EXPECT_TRUE(r.ok) << ToString(dims) << " " << p->name << ": " << r.Describe();
      }
    }
  }
}

// The zero-bubble split (BackwardInput then BackwardWeight) and selective recompute give the
// plain backward's dx and gradients bit for bit, in a whole block (attention then experts).
TEST(MoeLayerTest, TheZeroBubbleSplitAndSelectiveRecomputeAreThePlainBackward) {
  for (ModelDims dims : Variants()) {
    dims.moe.aux_loss_coef = 0.01;
    MoeCase c(LayerKind::kBlock, dims);
    const auto run = [&](bool selective, bool split) {
      c.layer->set_selective_recompute(selective);
      model_test::ZeroGrads(*c.fx.backend, *c.layer);
      Stash stash;
      c.layer->Forward(c.x, c.batch, stash);
      const BackwardArgs args{0.5f};
      std::string dx;
      if (split) {
        dx = Bits(c.layer->BackwardInput(c.r, c.batch, stash, args));
        c.layer->BackwardWeight(stash);
      } else {
        dx = Bits(c.layer->Backward(c.r, c.batch, stash, args));
      }
      std::vector<std::string> bits = GradBits(*c.layer);
      bits.push_back(dx);
      return bits;
    };
    const std::vector<std::string> plain = run(false, false);
    EXPECT_EQ(run(false, true), plain) << ToString(dims);
    EXPECT_EQ(run(true, false), plain) << ToString(dims);
    EXPECT_EQ(run(true, true), plain) << ToString(dims);
  }
}

}  // namespace
}  // namespace baton
