// Mixture-of-experts layers (model.moe; model/moe_sublayer.cc, model/moe_routing.h): the routing
// against hand-worked cases (choices, weights, capacity's drop order, the rows' order, the losses),
// the layer's forward against a plain per-token reference, every backward (router, permutation,
// experts, shared experts and their gate, the router losses) against finite differences, and the
// zero-bubble split and selective recompute bit for bit against the plain backward; expert
// parallelism (model/expert_parallel.h) over threads bit for bit against replicas holding every
// expert.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/expert_parallel.h"
#include "model/graph.h"
#include "model/moe_routing.h"
#include "model/test_util.h"

namespace baton {
namespace {

using model_test::Bits;
using model_test::CpuFixture;
using model_test::GradBits;
using numeric_check::CheckGradient;
using numeric_check::ProjectedSum;

MoeDims Experts(int num_experts, int top_k) {
  MoeDims moe;
  moe.num_experts = num_experts;
  moe.top_k = top_k;
  moe.expert_hidden = 4;
  return moe;
}

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

constexpr int64_t kBatch = 2;
constexpr int64_t kSeq = 4;

// V=11, T=6, L=2, NH=4, C=16, Llama blocks, 4 experts of width 6, two per token.
ModelDims MoeModel(bool shared = true, bool gate = true) {
  ModelDims dims{11, 6, 2, 4, 16};
  dims.family = ModelFamily::kLlama;
  dims.num_kv_heads = 2;
  dims.mlp_hidden = 12;
  dims.rope.theta = 10000.0;
  dims.moe = Experts(4, 2);
  dims.moe.expert_hidden = 6;
  if (shared) {
    dims.moe.shared_experts = 1;
    dims.moe.shared_hidden = 5;
    dims.moe.shared_gate = gate;
  }
  return dims;
}

LayerSpec SpecOf(LayerKind kind, const ModelDims& dims) {
  for (const LayerSpec& spec : kind == LayerKind::kMlpBlock ? MlpGraph(dims) : GptGraph(dims)) {
    if (spec.kind == kind) return spec;
  }
  BATON_FAIL("no {} in the graph", Name(kind));
}

struct MoeCase {
  CpuFixture fx;
  ModelDims dims;
  std::unique_ptr<Layer> layer;
  MicroBatch batch;
  Tensor x, r;

  MoeCase(LayerKind kind, const ModelDims& d) : dims(d) {
    layer = BuildLayer(SpecOf(kind, dims), dims, *fx.backend, DType::kF32, DType::kF32, 4321);
    Rng rng(11);
    batch = model_test::RandomBatch(fx.allocator(), kBatch, kSeq, dims.vocab_size, rng);
    x = model_test::RandomActivation(fx.allocator(), {kBatch, kSeq, dims.width}, DType::kF32, rng);
    r = model_test::RandomActivation(fx.allocator(), {kBatch, kSeq, dims.width}, DType::kF32, rng);
    Rng params(99);
    model_test::RandomizeParams(*layer, params, 0.3f);
    // sigmoid_bias: a bias off zero, unequal across the experts (rate 0.25: +-0.25 a step).
    layer->UpdateRoutingBias({8, 0, 0, 0});
    layer->UpdateRoutingBias({0, 0, 8, 0});
  }
  std::vector<float> Bias() {
    const Tensor bias = layer->routing_bias().values;
    if (!bias.defined()) return {};
    return {bias.data<float>(), bias.data<float>() + bias.numel()};
  }
  std::map<std::string, const float*> Params() {
    std::map<std::string, const float*> out;
    for (Param* p : layer->params())
      out[p->name.substr(p->name.find('.', 2) + 1)] = p->value.data<float>();
    return out;
  }
};

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

std::vector<ModelDims> Variants() {
  std::vector<ModelDims> out;
  out.push_back(MoeModel());
  ModelDims raw = MoeModel(true, false);
  raw.moe.norm_topk_prob = false;
  out.push_back(raw);
  ModelDims topk_softmax = MoeModel(false);
  topk_softmax.moe.router = MoeDims::Router::kTopkSoftmax;
  out.push_back(topk_softmax);
  ModelDims capacity = MoeModel();
  capacity.moe.capacity_factor = 0.75;  // 3 rows per expert of 8 tokens x 2 choices: drops
  out.push_back(capacity);
  ModelDims top1 = MoeModel(false);
  top1.moe.top_k = 1;
  out.push_back(top1);
  ModelDims sigmoid = MoeModel(true, false);
  sigmoid.moe.router = MoeDims::Router::kSigmoidBias;
  sigmoid.moe.bias_update_rate = 0.25;
  out.push_back(sigmoid);
  return out;
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

// ---- expert parallelism

// Messages between threads, one FIFO per (from, to); a member that fails wakes the others, whose
// waits then fail too (no test hangs on a dead member).
class Mailbox {
 public:
  void Post(int from, int to, std::string bytes) {
    std::lock_guard lock(mutex_);
    queues_[{from, to}].push_back(std::move(bytes));
    ready_.notify_all();
  }
  std::string Take(int from, int to) {
    std::unique_lock lock(mutex_);
    std::deque<std::string>& q = queues_[{from, to}];
    ready_.wait(lock, [&] { return failed_ || !q.empty(); });
    BATON_CHECK(!failed_, "another member failed");
    std::string bytes = std::move(q.front());
    q.pop_front();
    return bytes;
  }
  void Fail() {
    std::lock_guard lock(mutex_);
    failed_ = true;
    ready_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::map<std::pair<int, int>, std::deque<std::string>> queues_;
  bool failed_ = false;
};

// An expert group of threads (host tensors); counts how many all-to-alls it ran.
class ThreadExpertGroup final : public ExpertGroup {
 public:
  ThreadExpertGroup(Mailbox& mailbox, int rank, int size)
      : mailbox_(mailbox), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void AllToAll(const std::vector<Tensor>& to, const std::vector<Tensor>& from) override {
    ++calls;
    for (int j = 0; j < size_; ++j) {
      if (j != rank_) mailbox_.Post(rank_, j, Bits(to[static_cast<size_t>(j)]));
    }
    for (int j = 0; j < size_; ++j) {
      const std::string bytes =
          j == rank_ ? Bits(to[static_cast<size_t>(j)]) : mailbox_.Take(j, rank_);
      const Tensor& into = from[static_cast<size_t>(j)];
      BATON_CHECK(bytes.size() == into.nbytes(), "member {} sent {} bytes for {}", j, bytes.size(),
                  into.ToString());
      if (!bytes.empty()) std::memcpy(into.raw(), bytes.data(), bytes.size());
    }
  }
  int calls = 0;

 private:
  Mailbox& mailbox_;
  int rank_, size_;
};

// One replica's micro-batches: inputs x and output gradients dy, (B, S, C) f32 each.
struct ReplicaData {
  std::vector<std::vector<float>> x, dy;
};

constexpr int kMicroBatches = 2;

std::vector<ReplicaData> MakeReplicaData(const ModelDims& dims, int replicas) {
  Rng rng(23);
  const size_t n = static_cast<size_t>(kBatch * kSeq * dims.width);
  std::vector<ReplicaData> out(static_cast<size_t>(replicas));
  for (ReplicaData& r : out) {
    for (int m = 0; m < kMicroBatches; ++m) {
      for (auto* v : {&r.x, &r.dy}) {
        std::vector<float>& values = v->emplace_back(n);
        for (float& f : values) f = static_cast<float>(rng.NextNormal());
      }
    }
  }
  return out;
}

// How a member runs its micro-batches' backward: whole, or split as zero-bubble schedules do.
enum class BackwardKind { kPlain, kSplit };

// What a member (or a replica holding every expert) computed: each micro-batch's y and dx, then
// every parameter's gradient, as bytes.
struct MemberResult {
  std::vector<std::string> outputs;
  std::map<std::string, std::string> grads;
};

// Runs `data`'s micro-batches through `layer` (every forward, then every backward: GPipe's
// order) and returns what it computed; with `group`, folds the experts' sources first.
MemberResult RunMember(Backend& backend, Layer& layer, const ModelDims& dims,
                       const ReplicaData& data, BackwardKind kind) {
  model_test::ZeroGrads(backend, layer);
  MemberResult result;
  std::vector<Stash> stashes(kMicroBatches);
  std::vector<std::vector<float>> x = data.x, dy = data.dy;
  const Shape shape{kBatch, kSeq, dims.width};
  const MicroBatch batch;
  for (int m = 0; m < kMicroBatches; ++m) {
    const Tensor in = Tensor::Wrap(x[static_cast<size_t>(m)].data(), shape, DType::kF32);
    result.outputs.push_back(Bits(layer.Forward(in, batch, stashes[static_cast<size_t>(m)])));
  }
  const BackwardArgs args{0.5f};
  for (int m = 0; m < kMicroBatches; ++m) {
    const Tensor d = Tensor::Wrap(dy[static_cast<size_t>(m)].data(), shape, DType::kF32);
    Stash& stash = stashes[static_cast<size_t>(m)];
    if (kind == BackwardKind::kSplit) {
      result.outputs.push_back(Bits(layer.BackwardInput(d, batch, stash, args)));
      layer.BackwardWeight(stash);
    } else {
      result.outputs.push_back(Bits(layer.Backward(d, batch, stash, args)));
    }
  }
  FoldExpertGradSources(backend, layer.expert_grad_sources());
  for (Param* p : layer.params()) result.grads[p->name] = Bits(p->grad);
  return result;
}

bool IsExpertParam(const std::string& name) { return name.find(".experts.") != std::string::npos; }

// Rows [first, first + count) along dimension 0 of a stacked (E, a, b) tensor's bytes.
std::string ExpertRows(const std::string& bytes, int64_t experts, int64_t first, int64_t count) {
  const size_t row = bytes.size() / static_cast<size_t>(experts);
  return bytes.substr(static_cast<size_t>(first) * row, static_cast<size_t>(count) * row);
}

// f32 sums of equal-sized byte strings of floats, left to right: the replicas' all-reduce.
std::string SumInReplicaOrder(const std::vector<std::string>& parts) {
  std::vector<float> sum(parts.front().size() / sizeof(float));
  std::memcpy(sum.data(), parts.front().data(), parts.front().size());
  for (size_t r = 1; r < parts.size(); ++r) {
    const auto* add = reinterpret_cast<const float*>(parts[r].data());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += add[i];
  }
  return std::string(reinterpret_cast<const char*>(sum.data()), parts.front().size());
}

// E members, each a replica with its own micro-batches, against E replicas holding every expert:
// each member's outputs and dx, its non-expert gradients (its own replica's), and its experts'
// gradients (the replicas' sum in replica order) bit for bit, and the parameters each holds.
void CheckExpertParallel(const ModelDims& dims, LayerKind kind, int members, bool selective,
                         BackwardKind backward) {
  const std::string what = fmt::format("{} E={} selective={} split={}", ToString(dims), members,
                                       selective, backward == BackwardKind::kSplit);
  const std::vector<ReplicaData> data = MakeReplicaData(dims, members);
  // The replicas, one after another on one layer holding every expert.
  MoeCase whole(kind, dims);
  whole.layer->set_selective_recompute(selective);
  std::vector<MemberResult> replicas;
  for (const ReplicaData& d : data) {
    replicas.push_back(RunMember(*whole.fx.backend, *whole.layer, dims, d, backward));
  }
  std::map<std::string, std::vector<float>> values;
  for (Param* p : whole.layer->params()) {
    values[p->name].assign(p->value.data<float>(), p->value.data<float>() + p->value.numel());
  }
  const std::vector<float> bias = whole.Bias();
  // The members, a thread each.
  const int64_t n = dims.moe.num_experts, local = n / members;
  Mailbox mailbox;
  std::vector<MemberResult> results(static_cast<size_t>(members));
  std::vector<int> calls(static_cast<size_t>(members));
  std::vector<std::string> errors(static_cast<size_t>(members));
  std::vector<std::thread> threads;
  for (int j = 0; j < members; ++j) {
    threads.emplace_back([&, j] {
      try {
        CpuFixture fx;
        ThreadExpertGroup group(mailbox, j, members);
        std::unique_ptr<Layer> layer =
            BuildLayer(SpecOf(kind, dims), dims, *fx.backend, DType::kF32, DType::kF32, 4321,
                       nullptr, nullptr, &group);
        layer->set_selective_recompute(selective);
        for (Param* p : layer->params()) {
          const std::vector<float>& v = values.at(p->name);
          const int64_t first = IsExpertParam(p->name) ? j * p->value.numel() : 0;
          ASSERT_EQ(p->value.numel(), IsExpertParam(p->name)
                                          ? static_cast<int64_t>(v.size()) / members
                                          : static_cast<int64_t>(v.size()))
              << p->name;
          std::memcpy(p->value.data<float>(), v.data() + first, p->value.nbytes());
        }
        if (!bias.empty()) {
          Tensor b = layer->routing_bias().values;
          std::memcpy(b.data<float>(), bias.data(), b.nbytes());
        }
        results[static_cast<size_t>(j)] =
            RunMember(*fx.backend, *layer, dims, data[static_cast<size_t>(j)], backward);
        calls[static_cast<size_t>(j)] = group.calls;
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(j)] = e.what();
        mailbox.Fail();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int j = 0; j < members; ++j) {
    ASSERT_EQ(errors[static_cast<size_t>(j)], "") << what << " member " << j;
    const MemberResult& got = results[static_cast<size_t>(j)];
    const MemberResult& want = replicas[static_cast<size_t>(j)];
    EXPECT_TRUE(got.outputs == want.outputs) << what << " member " << j << ": y and dx differ";
    // Forward and backward each: the counts, then the rows there and their results (gradients)
    // back. Selective recompute moves the rows and results again in the backward.
    EXPECT_EQ(calls[static_cast<size_t>(j)], kMicroBatches * (6 + (selective ? 2 : 0))) << what;
    for (const auto& [name, bytes] : got.grads) {
      if (!IsExpertParam(name)) {
        EXPECT_TRUE(bytes == want.grads.at(name)) << what << " member " << j << " " << name;
        continue;
      }
      std::vector<std::string> per_replica;
      for (const MemberResult& r : replicas) {
        per_replica.push_back(ExpertRows(r.grads.at(name), n, j * local, local));
      }
      EXPECT_TRUE(bytes == SumInReplicaOrder(per_replica))
          << what << " member " << j << " " << name << " is not the replicas' sum";
    }
  }
}

TEST(MoeExpertParallelTest, MembersComputeTheBitsOfReplicasHoldingEveryExpert) {
  for (const ModelDims& dims : Variants()) {
    for (const int members : {2, 4}) {
      CheckExpertParallel(dims, LayerKind::kMlpBlock, members, false, BackwardKind::kPlain);
    }
  }
}

TEST(MoeExpertParallelTest, SelectiveRecomputeAndTheZeroBubbleSplitMoveTheSameRows) {
  ModelDims dims = MoeModel();
  dims.moe.aux_loss_coef = 0.01;
  CheckExpertParallel(dims, LayerKind::kBlock, 2, true, BackwardKind::kPlain);
  CheckExpertParallel(dims, LayerKind::kBlock, 2, false, BackwardKind::kSplit);
  CheckExpertParallel(dims, LayerKind::kBlock, 4, true, BackwardKind::kSplit);
}

TEST(MoeExpertParallelTest, EachMemberHoldsItsExpertsAndFoldsTheSourcesInOrder) {
  const ModelDims dims = MoeModel(false);
  Mailbox mailbox;
  CpuFixture fx;
  ThreadExpertGroup group(mailbox, 1, 2);
  std::unique_ptr<Layer> layer =
      BuildLayer(SpecOf(LayerKind::kMlpBlock, dims), dims, *fx.backend, DType::kF32, DType::kF32,
                 4321, nullptr, nullptr, &group);
  const std::vector<ExpertGradSources> sources = layer->expert_grad_sources();
  ASSERT_EQ(sources.size(), 2u);
  for (const ExpertGradSources& s : sources) {
    EXPECT_TRUE(IsExpertParam(s.param->name)) << s.param->name;
    EXPECT_EQ(s.param->value.size(0), 2) << s.param->name;  // experts 2 and 3 of 4
    EXPECT_EQ(s.param->split.over, SplitOver::kExperts);
    EXPECT_EQ(s.param->split.part, 1);
    EXPECT_EQ(s.others.size(0), 1);  // source 1's accumulator
  }
  // The second half of the whole layer's draws.
  CpuFixture fresh;
  std::unique_ptr<Layer> all = BuildLayer(SpecOf(LayerKind::kMlpBlock, dims), dims, *fresh.backend,
                                          DType::kF32, DType::kF32, 4321);
  for (size_t i = 0; i < all->params().size(); ++i) {
    const Param& mine = *layer->params()[i];
    const std::string bytes = Bits(all->params()[i]->value);
    EXPECT_EQ(Bits(mine.value), IsExpertParam(mine.name) ? ExpertRows(bytes, 4, 2, 2) : bytes)
        << mine.name;
  }
  // The fold: grad + source 1's, left to right in f32; the accumulator zeroed.
  Tensor& grad = sources[0].param->grad;
  Tensor others = sources[0].others;
  for (int64_t i = 0; i < grad.numel(); ++i) {
    grad.data<float>()[i] = 1.0f + static_cast<float>(i) * 1e-8f;
    others.data<float>()[i] = 1e-8f;
  }
  FoldExpertGradSources(*fx.backend, {sources[0]});
  for (int64_t i = 0; i < grad.numel(); ++i) {
    const float want = (1.0f + static_cast<float>(i) * 1e-8f) + 1e-8f;
    ASSERT_EQ(grad.data<float>()[i], want) << i;
    ASSERT_EQ(others.data<float>()[i], 0.0f) << i;
  }
  // Experts that do not split evenly are refused, naming the numbers.
  ThreadExpertGroup three(mailbox, 0, 3);
  try {
    BuildLayer(SpecOf(LayerKind::kMlpBlock, dims), dims, *fx.backend, DType::kF32, DType::kF32,
               4321, nullptr, nullptr, &three);
    FAIL() << "4 experts over 3 members were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4 experts do not split evenly over an expert group of 3"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace baton
