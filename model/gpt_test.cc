// Whole-model tests on a tiny GPT (embedding, 2 blocks, tied head): the gradient of the chain
// against finite differences, micro-batch accumulation, and tied vs untied heads.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "model/graph.h"
#include "model/head.h"
#include "model/test_util.h"

namespace baton {
namespace {

using model_test::Bits;
using model_test::CpuFixture;

struct TinyGpt {
  CpuFixture fx;
  ModelDims dims = model_test::TinyDims();
  std::vector<std::unique_ptr<Layer>> layers;

  explicit TinyGpt(bool tie = true, uint64_t seed = 42) {
    for (const LayerSpec& spec : GptGraph(dims)) {
      layers.push_back(BuildLayer(spec, dims, *fx.backend, DType::kF32, DType::kF32, seed));
    }
    if (tie) TieEmbedding(*layers.front(), *layers.back());
  }
  Layer& embedding() { return *layers.front(); }
  Layer& head() { return *layers.back(); }

  // Forward through every layer; returns the loss.
  float Forward(const MicroBatch& batch, std::vector<Stash>& stashes) {
    stashes.resize(layers.size());
    Tensor h;
    for (size_t i = 0; i < layers.size(); ++i) h = layers[i]->Forward(h, batch, stashes[i]);
    return h.data<float>()[0];
  }
  void Backward(const MicroBatch& batch, std::vector<Stash>& stashes, float loss_grad_scale) {
    Tensor dy;
    for (size_t i = layers.size(); i-- > 0;) {
      dy = layers[i]->Backward(dy, batch, stashes[i], BackwardArgs{loss_grad_scale});
    }
  }
  float Loss(const MicroBatch& batch) {
    std::vector<Stash> stashes;
    return Forward(batch, stashes);
  }
  void ZeroGrads() {
    for (auto& layer : layers) model_test::ZeroGrads(*fx.backend, *layer);
  }
};

TEST(TinyGptGradient, WholeChainMatchesFiniteDifferencesForEveryParameter) {
  TinyGpt gpt;
  Rng rng(11);
  for (auto& layer : gpt.layers) model_test::RandomizeParams(*layer, rng, 0.3f);
  const MicroBatch batch = model_test::RandomBatch(gpt.fx.allocator(), 2, 5, 11, rng);
  gpt.ZeroGrads();
  std::vector<Stash> stashes;
  gpt.Forward(batch, stashes);
  gpt.Backward(batch, stashes, 1.0f);

  // The tied wte's gradient is the sum of the embedding's and the head's.
  Param* wte = gpt.embedding().params()[0];
  Param* head_wte = gpt.head().params()[2];
  ASSERT_EQ(wte->name, "wte.weight");
  ASSERT_TRUE(head_wte->tied);
  Tensor wte_grad =
      Tensor::Empty(gpt.fx.allocator(), wte->grad.shape(), DType::kF32, MemCategory::kWorkspace);
  gpt.fx.backend->Add(wte->grad, head_wte->grad, wte_grad);

  const auto loss = [&] { return static_cast<double>(gpt.Loss(batch)); };
  numeric_check::GradCheckOptions options;
  options.step = 3e-3;
  options.tolerance = 2e-3;
  int checked = 0;
  for (auto& layer : gpt.layers) {
    for (Param* p : layer->params()) {
      if (p->tied) continue;  // the same value as the embedding's, checked there
      const Tensor& analytic = p == wte ? wte_grad : p->grad;
      const auto result = numeric_check::CheckGradient(p->value, loss, analytic, options);
      EXPECT_TRUE(result.ok) << layer->name() << " " << p->name << ": " << result.Describe();
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2 + 2 * 12 + 2);
}

TEST(TinyGptGradient, TiedGradientsStaySeparateTensors) {
  TinyGpt gpt;
  Rng rng(5);
  const MicroBatch batch = model_test::RandomBatch(gpt.fx.allocator(), 2, 5, 11, rng);
  std::vector<Stash> stashes;
  gpt.Forward(batch, stashes);
  gpt.Backward(batch, stashes, 1.0f);
  Param* wte = gpt.embedding().params()[0];
  Param* head_wte = gpt.head().params()[2];
  EXPECT_EQ(wte->value.raw(), head_wte->value.raw());
  EXPECT_NE(wte->grad.raw(), head_wte->grad.raw());
  EXPECT_GT(gpt.fx.backend->SumOfSquares(wte->grad), 0.0);
  EXPECT_GT(gpt.fx.backend->SumOfSquares(head_wte->grad), 0.0);
}

TEST(MicroBatching, FourMicroBatchesOfTwoGiveTheGradientOfOneBatchOfEight) {
  TinyGpt gpt;
  Rng rng(17);
  const MicroBatch batch = model_test::RandomBatch(gpt.fx.allocator(), 8, 5, 11, rng);

  gpt.ZeroGrads();
  std::vector<Stash> stashes;
  const float full_loss = gpt.Forward(batch, stashes);
  gpt.Backward(batch, stashes, 1.0f);
  std::vector<std::vector<float>> full;
  for (auto& layer : gpt.layers) {
    for (Param* p : layer->params()) full.push_back(ToFloatVector(p->grad));
  }

  gpt.ZeroGrads();
  constexpr int kMicroBatches = 4;
  double mean_loss = 0.0;
  for (int m = 0; m < kMicroBatches; ++m) {
    MicroBatch micro{batch.tokens.Slice(0, 2 * m, 2 * m + 2),
                     batch.targets.Slice(0, 2 * m, 2 * m + 2)};
    mean_loss += gpt.Forward(micro, stashes) / kMicroBatches;
    gpt.Backward(micro, stashes, 1.0f / kMicroBatches);
  }
  EXPECT_NEAR(mean_loss, full_loss, 1e-5);
  size_t i = 0;
  for (auto& layer : gpt.layers) {
    for (Param* p : layer->params()) {
      EXPECT_LT(numeric_check::NormalisedError(ToFloatVector(p->grad), full[i++]), 1e-5)
          << layer->name() << " " << p->name;
    }
  }
}

TEST(TiedHead, AnUntiedHeadComputesTheSameBitsAsATiedOne) {
  // A pipeline's last stage holds its own copy of wte; before any update it must act the same.
  TinyGpt tied(/*tie=*/true);
  TinyGpt untied(/*tie=*/false);
  Rng rng(23);
  const MicroBatch batch = model_test::RandomBatch(tied.fx.allocator(), 2, 5, 11, rng);
  std::vector<Stash> s1;
  std::vector<Stash> s2;
  const float a = tied.Forward(batch, s1);
  const float b = untied.Forward(batch, s2);
  EXPECT_EQ(a, b);
  tied.Backward(batch, s1, 1.0f);
  untied.Backward(batch, s2, 1.0f);
  for (size_t l = 0; l < tied.layers.size(); ++l) {
    EXPECT_EQ(model_test::GradBits(*tied.layers[l]), model_test::GradBits(*untied.layers[l]));
  }
}

}  // namespace
}  // namespace baton
