// Initialisation: GPT-2 statistics, determinism per (seed, layer, param), the head's tied copy,
// and TieEmbedding.
#include "model/init.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/block.h"
#include "model/embedding.h"
#include "model/graph.h"
#include "model/head.h"
#include "model/test_util.h"

namespace baton {
namespace {

using model_test::Bits;
using model_test::CpuFixture;

std::vector<std::unique_ptr<Layer>> BuildAll(const std::vector<LayerSpec>& graph,
                                             const ModelDims& dims, Backend& backend, DType dtype,
                                             uint64_t seed) {
  std::vector<std::unique_ptr<Layer>> layers;
  for (const LayerSpec& spec : graph) {
    layers.push_back(BuildLayer(spec, dims, backend, dtype, dtype, seed));
  }
  return layers;
}

struct Moments {
  double mean = 0;
  double std = 0;
};

Moments MomentsOf(const Tensor& t) {
  const std::vector<float> v = ToFloatVector(t);
  double sum = 0;
  double sq = 0;
  for (float x : v) {
    sum += x;
    sq += static_cast<double>(x) * x;
  }
  const double n = static_cast<double>(v.size());
  return {sum / n, std::sqrt(sq / n - (sum / n) * (sum / n))};
}

bool AllEqual(const Tensor& t, float value) {
  for (float x : ToFloatVector(t)) {
    if (x != value) return false;
  }
  return true;
}

bool EndsWith(const std::string& s, const std::string& suffix) { return s.ends_with(suffix); }

TEST(Init, FollowsGpt2StatisticsForEveryParameter) {
  CpuFixture fx;
  const ModelDims dims{/*vocab_size=*/256, /*context=*/64, /*num_layers=*/4, /*num_heads=*/4,
                       /*width=*/64};
  const double projection_std = 0.02 / std::sqrt(2.0 * dims.num_layers);
  EXPECT_DOUBLE_EQ(OutputProjectionStd(dims.num_layers), projection_std);
  int checked = 0;
  for (auto& layer : BuildAll(GptGraph(dims), dims, *fx.backend, DType::kF32, 3)) {
    for (Param* p : layer->params()) {
      SCOPED_TRACE(p->name);
      EXPECT_TRUE(AllEqual(p->grad, 0.0f));
      EXPECT_EQ(p->weight_decay, p->value.dim() >= 2);
      if (EndsWith(p->name, ".bias")) {
        EXPECT_TRUE(AllEqual(p->value, 0.0f));
      } else if (p->name.find("ln_") != std::string::npos) {
        EXPECT_TRUE(AllEqual(p->value, 1.0f));
      } else {
        const bool projection = EndsWith(p->name, "c_proj.weight");
        const double expected = projection ? projection_std : 0.02;
        const Moments m = MomentsOf(p->value);
        const double n = static_cast<double>(p->value.numel());
        EXPECT_NEAR(m.std, expected, 0.05 * expected);
        EXPECT_NEAR(m.mean, 0.0, 4.0 * expected / std::sqrt(n));
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2 + 4 * 12 + 3);
}

TEST(Init, SameSeedAndLayerIndexGiveIdenticalBitsInAnyBuildOrder) {
  const ModelDims dims = model_test::TinyDims();
  const std::vector<LayerSpec> graph = GptGraph(dims);
  CpuFixture a;
  CpuFixture b;
  auto forward = BuildAll(graph, dims, *a.backend, DType::kF32, 9);
  std::vector<std::unique_ptr<Layer>> reverse(graph.size());
  for (size_t i = graph.size(); i-- > 0;) {
    reverse[i] = BuildLayer(graph[i], dims, *b.backend, DType::kF32, DType::kF32, 9);
  }
  for (size_t l = 0; l < graph.size(); ++l) {
    const std::vector<Param*> pa = forward[l]->params();
    const std::vector<Param*> pb = reverse[l]->params();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_EQ(pa[i]->name, pb[i]->name);
      EXPECT_EQ(Bits(pa[i]->value), Bits(pb[i]->value)) << pa[i]->name;
    }
  }
}

TEST(Init, OtherSeedsOrLayerIndicesGiveOtherWeights) {
  CpuFixture fx;
  const ModelDims dims = model_test::TinyDims();
  BlockLayer base(LayerKind::kBlock, *fx.backend, dims, DType::kF32, DType::kF32, 9, 1, 0);
  BlockLayer other_seed(LayerKind::kBlock, *fx.backend, dims, DType::kF32, DType::kF32, 10, 1, 0);
  BlockLayer other_index(LayerKind::kBlock, *fx.backend, dims, DType::kF32, DType::kF32, 9, 2, 0);
  const int c_attn = 2;
  EXPECT_NE(Bits(base.params()[c_attn]->value), Bits(other_seed.params()[c_attn]->value));
  EXPECT_NE(Bits(base.params()[c_attn]->value), Bits(other_index.params()[c_attn]->value));
}

TEST(Init, Bf16ParametersAreTheF32DrawsRoundedToNearestEven) {
  CpuFixture fx;
  const ModelDims dims = model_test::TinyDims();
  BlockLayer f32(LayerKind::kBlock, *fx.backend, dims, DType::kF32, DType::kF32, 5, 1, 0);
  BlockLayer bf16(LayerKind::kBlock, *fx.backend, dims, DType::kBF16, DType::kBF16, 5, 1, 0);
  for (size_t i = 0; i < f32.params().size(); ++i) {
    const Tensor& full = f32.params()[i]->value;
    const Tensor& half = bf16.params()[i]->value;
    ASSERT_EQ(half.dtype(), DType::kBF16);
    for (int64_t k = 0; k < full.numel(); ++k) {
      ASSERT_EQ(half.data<uint16_t>()[k], FloatToBFloat16(full.data<float>()[k]));
    }
  }
}

TEST(TiedEmbedding, TheHeadsCopyOfWteEqualsTheEmbeddingsBitForBit) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    CpuFixture fx;
    const ModelDims dims = model_test::TinyDims();
    EmbeddingLayer embedding(*fx.backend, dims, dtype, dtype, 77, 0);
    HeadLayer head(*fx.backend, dims, dtype, dtype, 77, 3);  // built apart: another stage
    EXPECT_TRUE(head.wte().tied);
    EXPECT_FALSE(embedding.wte().tied);
    EXPECT_EQ(head.wte().name, "wte.weight");
    EXPECT_NE(head.wte().value.raw(), embedding.wte().value.raw());
    EXPECT_EQ(Bits(head.wte().value), Bits(embedding.wte().value)) << Name(dtype);
  }
}

TEST(TiedEmbedding, TieSharesTheValueFreesTheCopyAndKeepsGradsSeparate) {
  CpuFixture fx;
  const ModelDims dims = model_test::TinyDims();
  EmbeddingLayer embedding(*fx.backend, dims, DType::kBF16, DType::kBF16, 77, 0);
  HeadLayer head(*fx.backend, dims, DType::kBF16, DType::kBF16, 77, 3);
  const int64_t params_before = fx.ledger.current(MemCategory::kParams);
  const int64_t grads_before = fx.ledger.current(MemCategory::kGrads);
  TieEmbedding(embedding, head);
  EXPECT_EQ(head.wte().value.raw(), embedding.wte().value.raw());
  EXPECT_NE(head.wte().grad.raw(), embedding.wte().grad.raw());
  EXPECT_EQ(fx.ledger.current(MemCategory::kParams),
            params_before - int64_t{dims.vocab_size} * dims.width * 2);
  EXPECT_EQ(fx.ledger.current(MemCategory::kGrads), grads_before);
  TieEmbedding(embedding, head);  // tying twice changes nothing
  EXPECT_EQ(head.wte().value.raw(), embedding.wte().value.raw());
}

TEST(TiedEmbedding, TyingLayersBuiltWithDifferentSeedsIsAnError) {
  CpuFixture fx;
  const ModelDims dims = model_test::TinyDims();
  EmbeddingLayer embedding(*fx.backend, dims, DType::kF32, DType::kF32, 1, 0);
  HeadLayer head(*fx.backend, dims, DType::kF32, DType::kF32, 2, 3);
  EXPECT_THROW(TieEmbedding(embedding, head), Error);
}

TEST(TiedEmbedding, TyingAnythingButAnEmbeddingAndAHeadIsAnError) {
  CpuFixture fx;
  const ModelDims dims = model_test::TinyDims();
  EmbeddingLayer embedding(*fx.backend, dims, DType::kF32, DType::kF32, 1, 0);
  BlockLayer block(LayerKind::kBlock, *fx.backend, dims, DType::kF32, DType::kF32, 1, 1, 0);
  EXPECT_THROW(TieEmbedding(static_cast<Layer&>(embedding), static_cast<Layer&>(block)), Error);
}

TEST(Init, TheEmbeddingMustBeLayerZero) {
  CpuFixture fx;
  EXPECT_THROW(EmbeddingLayer(*fx.backend, model_test::TinyDims(), DType::kF32, DType::kF32, 1, 1),
               Error);
}

TEST(ParamNames, BlockParametersFollowHuggingFaceGpt2) {
  CpuFixture fx;
  const ModelDims dims = model_test::TinyDims();
  BlockLayer block(LayerKind::kBlock, *fx.backend, dims, DType::kF32, DType::kF32, 1, 4, 3);
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  for (Param* p : block.params()) {
    names.push_back(p->name);
    shapes.push_back(p->value.shape());
  }
  const std::vector<std::string> expected = {
      "h.3.ln_1.weight",      "h.3.ln_1.bias",          "h.3.attn.c_attn.weight",
      "h.3.attn.c_attn.bias", "h.3.attn.c_proj.weight", "h.3.attn.c_proj.bias",
      "h.3.ln_2.weight",      "h.3.ln_2.bias",          "h.3.mlp.c_fc.weight",
      "h.3.mlp.c_fc.bias",    "h.3.mlp.c_proj.weight",  "h.3.mlp.c_proj.bias"};
  EXPECT_EQ(names, expected);
  const std::vector<Shape> expected_shapes = {{8}, {8}, {8, 24}, {24}, {8, 8},  {8},
                                              {8}, {8}, {8, 32}, {32}, {32, 8}, {8}};
  EXPECT_EQ(shapes, expected_shapes);
  EXPECT_EQ(block.name(), "block.3");
}

TEST(ParamNames, MlpBlockAndHeadParameters) {
  CpuFixture fx;
  const ModelDims dims = model_test::TinyDims();
  BlockLayer mlp(LayerKind::kMlpBlock, *fx.backend, dims, DType::kF32, DType::kF32, 1, 1, 0);
  std::vector<std::string> names;
  for (Param* p : mlp.params()) names.push_back(p->name);
  EXPECT_EQ(names, (std::vector<std::string>{"h.0.ln_2.weight", "h.0.ln_2.bias",
                                             "h.0.mlp.c_fc.weight", "h.0.mlp.c_fc.bias",
                                             "h.0.mlp.c_proj.weight", "h.0.mlp.c_proj.bias"}));
  HeadLayer head(*fx.backend, dims, DType::kF32, DType::kF32, 1, 3);
  names.clear();
  for (Param* p : head.params()) names.push_back(p->name);
  EXPECT_EQ(names, (std::vector<std::string>{"ln_f.weight", "ln_f.bias", "wte.weight"}));
}

}  // namespace
}  // namespace baton
