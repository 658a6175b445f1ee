// The structural cures (model.share, model.low_rank; docs/model.md, "Sharing and low rank"):
// low-rank linears against finite differences and their parameter counts; shared blocks holding
// one parameter set in one process, initialised alike wherever built, their summed gradient
// against finite differences through two blocks.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "model/block.h"
#include "model/cost.h"
#include "model/graph.h"
#include "model/test_util.h"

namespace baton {
namespace {

using model_test::Bits;
using model_test::CpuFixture;
using numeric_check::CheckGradient;
using numeric_check::ProjectedSum;

constexpr int64_t kBatch = 2;
constexpr int64_t kSeq = 5;
constexpr uint64_t kSeed = 1234;

ModelDims LowRankDims() {
  ModelDims dims = model_test::TinyDims();  // C = 8
  dims.low_rank_attn = 2;
  dims.low_rank_mlp = 3;
  return dims;
}

LayerSpec FirstOf(LayerKind kind, const ModelDims& dims) {
  for (const LayerSpec& spec : kind == LayerKind::kMlpBlock ? MlpGraph(dims) : GptGraph(dims)) {
    if (spec.kind == kind) return spec;
  }
  return {};
}

int64_t Numel(Layer& layer) {
  int64_t n = 0;
  for (Param* p : layer.params()) n += p->value.numel();
  return n;
}

// Forward, backward and finite differences of sum(y * r) over x and every parameter; and the
// zero-bubble split gives the same bits.
void ExpectLowRankGradientsMatchFiniteDifferences(LayerKind kind, bool selective) {
  CpuFixture fx;
  const ModelDims dims = LowRankDims();
  std::unique_ptr<Layer> layer =
      BuildLayer(FirstOf(kind, dims), dims, *fx.backend, DType::kF32, DType::kF32, kSeed);
  layer->set_selective_recompute(selective);
  Rng rng(7);
  const MicroBatch batch =
      model_test::RandomBatch(fx.allocator(), kBatch, kSeq, dims.vocab_size, rng);
  Tensor x =
      model_test::RandomActivation(fx.allocator(), {kBatch, kSeq, dims.width}, DType::kF32, rng);
  const Tensor r =
      model_test::RandomActivation(fx.allocator(), {kBatch, kSeq, dims.width}, DType::kF32, rng);
  Rng params_rng(99);
  model_test::RandomizeParams(*layer, params_rng, 0.3f);
  model_test::ZeroGrads(*fx.backend, *layer);
  Stash stash;
  layer->Forward(x, batch, stash);
  const Tensor dx = layer->Backward(r, batch, stash, BackwardArgs{});
  const std::vector<std::string> grads = model_test::GradBits(*layer);
  const auto loss = [&] {
    Stash s;
    return ProjectedSum(layer->Forward(x, batch, s), r);
  };
  numeric_check::GradCheckOptions options;
  options.step = 1e-2;
  options.tolerance = 2e-3;
  EXPECT_TRUE(CheckGradient(x, loss, dx, options).ok) << "dx";
  for (Param* p : layer->params()) {
    const auto result = CheckGradient(p->value, loss, p->grad, options);
    EXPECT_TRUE(result.ok) << p->name << ": " << result.Describe();
  }
  // BackwardInput + BackwardWeight: the same gradients, bit for bit.
  model_test::ZeroGrads(*fx.backend, *layer);
  layer->Forward(x, batch, stash);
  const Tensor dx_split = layer->BackwardInput(r, batch, stash, BackwardArgs{});
  layer->BackwardWeight(stash);
  EXPECT_TRUE(stash.empty());
  EXPECT_EQ(Bits(dx_split), Bits(dx));
  EXPECT_EQ(model_test::GradBits(*layer), grads);
}

TEST(LowRankTest, BlockGradientsMatchFiniteDifferences) {
  ExpectLowRankGradientsMatchFiniteDifferences(LayerKind::kBlock, false);
  ExpectLowRankGradientsMatchFiniteDifferences(LayerKind::kBlock, true);
}

TEST(LowRankTest, MlpBlockGradientsMatchFiniteDifferences) {
  ExpectLowRankGradientsMatchFiniteDifferences(LayerKind::kMlpBlock, false);
}

TEST(LowRankTest, FactorsReplaceEachWeightWithTheirShapes) {
  CpuFixture fx;
  const ModelDims dims = LowRankDims();
  std::unique_ptr<Layer> block = BuildLayer(FirstOf(LayerKind::kBlock, dims), dims, *fx.backend,
                                            DType::kF32, DType::kF32, kSeed);
  std::set<std::string> names;
  for (Param* p : block->params()) names.insert(p->name + " " + ToString(p->value.shape()));
  const int64_t c = dims.width;
  for (const std::string& expected : {fmt::format("h.0.attn.c_attn.weight_u ({}, 2)", c),
                                      fmt::format("h.0.attn.c_attn.weight_v (2, {})", 3 * c),
                                      fmt::format("h.0.attn.c_proj.weight_u ({}, 2)", c),
                                      fmt::format("h.0.attn.c_proj.weight_v (2, {})", c),
                                      fmt::format("h.0.mlp.c_fc.weight_u ({}, 3)", c),
                                      fmt::format("h.0.mlp.c_fc.weight_v (3, {})", 4 * c),
                                      fmt::format("h.0.mlp.c_proj.weight_u ({}, 3)", 4 * c),
                                      fmt::format("h.0.mlp.c_proj.weight_v (3, {})", c)}) {
    EXPECT_EQ(names.count(expected), 1u) << expected;
  }
  EXPECT_EQ(names.count(fmt::format("h.0.mlp.c_fc.weight ({}, {})", c, 4 * c)), 0u);
}

// low_rank.mlp = C/4: the MLP's two matrices hold 2 * 5 C r = 2.5 C^2 weights instead of 8 C^2,
// exactly; ParamCount says what the built layer holds.
TEST(LowRankTest, QuarterRankCutsTheMlpMatricesExactly) {
  CpuFixture fx;
  ModelDims dense = model_test::TinyDims();
  dense.width = 16;
  dense.num_heads = 2;
  ModelDims low = dense;
  low.low_rank_mlp = dense.width / 4;
  for (LayerKind kind : {LayerKind::kBlock, LayerKind::kMlpBlock}) {
    std::unique_ptr<Layer> a =
        BuildLayer(FirstOf(kind, dense), dense, *fx.backend, DType::kF32, DType::kF32, kSeed);
    std::unique_ptr<Layer> b =
        BuildLayer(FirstOf(kind, low), low, *fx.backend, DType::kF32, DType::kF32, kSeed);
    const int64_t c = dense.width;
    EXPECT_EQ(Numel(*a) - Numel(*b), 8 * c * c - 10 * c * (c / 4)) << Name(kind);
    EXPECT_EQ(Numel(*b), ParamCount(FirstOf(kind, low), low)) << Name(kind);
    int64_t mlp_weights = 0;
    for (Param* p : b->params()) {
      if (p->name.find(".mlp.") != std::string::npos && p->value.dim() == 2)
        mlp_weights += p->value.numel();
    }
    EXPECT_EQ(mlp_weights * 16, 8 * c * c * 5) << Name(kind);  // 2.5 C^2 = 5/16 of 8 C^2
  }
}

ModelDims SharedDims(bool attention, bool mlp) {
  ModelDims dims = model_test::TinyDims();
  dims.num_layers = 4;
  dims.share_group = 2;
  dims.share_attention = attention;
  dims.share_mlp = mlp;
  return dims;
}

// Builds blocks [first, last] of the GPT graph in one process, sharing as StageModel does.
std::vector<std::unique_ptr<Layer>> BuildBlocks(const ModelDims& dims, Backend& backend, int first,
                                                int last) {
  const std::vector<LayerSpec> graph = GptGraph(dims);
  std::map<std::string, Param*> built;
  const LocalParams local = [&](const std::string& name) -> Param* {
    const auto it = built.find(name);
    return it == built.end() ? nullptr : it->second;
  };
  std::vector<std::unique_ptr<Layer>> layers;
  for (int i = first; i <= last; ++i) {
    layers.push_back(BuildLayer(graph[static_cast<size_t>(i)], dims, backend, DType::kF32,
                                DType::kF32, kSeed, local));
    for (Param* p : layers.back()->params()) built.emplace(p->name, p);
  }
  return layers;
}

TEST(ShareTest, AGroupHoldsOneParameterSetInOneProcess) {
  for (auto [attention, mlp] : {std::pair{true, true}, {true, false}, {false, true}}) {
    const ModelDims dims = SharedDims(attention, mlp);
    CpuFixture shared_fx, dense_fx;
    const auto blocks = BuildBlocks(dims, *shared_fx.backend, 1, 4);
    ModelDims unshared = dims;
    unshared.share_group = 1;
    const auto dense = BuildBlocks(unshared, *dense_fx.backend, 1, 4);
    const int64_t c = dims.width;
    const int64_t attn = 4 * c * c + 6 * c, mlp_params = 8 * c * c + 7 * c;
    const int64_t saved = 2 * ((attention ? attn : 0) + (mlp ? mlp_params : 0));  // 2 groups
    const int64_t f32 = 4;
    EXPECT_EQ(dense_fx.ledger.current(MemCategory::kParams) -
                  shared_fx.ledger.current(MemCategory::kParams),
              saved * f32);
    EXPECT_EQ(dense_fx.ledger.current(MemCategory::kGrads) -
                  shared_fx.ledger.current(MemCategory::kGrads),
              saved * f32);
    // Block 1 (h.1) holds h.0's shared tensors: same names, same storage; its own otherwise.
    const std::vector<Param*> leader = blocks[0]->params(), copy = blocks[1]->params();
    ASSERT_EQ(leader.size(), copy.size());
    for (size_t k = 0; k < leader.size(); ++k) {
      const bool is_attention = copy[k]->name.find("ln_1") != std::string::npos ||
                                copy[k]->name.find("attn.") != std::string::npos;
      const bool shared = is_attention ? attention : mlp;
      EXPECT_EQ(copy[k]->tied, shared) << copy[k]->name;
      EXPECT_EQ(copy[k]->name.starts_with("h.0."), shared) << copy[k]->name;
      EXPECT_EQ(copy[k]->value.raw() == leader[k]->value.raw(), shared) << copy[k]->name;
      EXPECT_EQ(copy[k]->grad.raw() == leader[k]->grad.raw(), shared) << copy[k]->name;
      if (shared) {
        EXPECT_EQ(copy[k]->source_layer, 1) << copy[k]->name;
      }
      EXPECT_FALSE(leader[k]->tied) << leader[k]->name;
    }
    // The graph's parameter count counts the shared ones once.
    int64_t distinct = 0;
    for (const auto& b : dense) distinct += Numel(*b);
    const std::vector<LayerSpec> graph = GptGraph(dims);
    int64_t counted = 0;
    for (int i = 1; i <= 4; ++i) counted += ParamCount(graph[static_cast<size_t>(i)], dims);
    EXPECT_EQ(counted, distinct - saved);
    EXPECT_EQ(StoredParamCount(graph, 1, 4, dims), distinct - saved);
    EXPECT_EQ(StoredParamCount(graph, 2, 3, dims), distinct / 2);  // one block of each group
    EXPECT_EQ(StoredParamCount(graph, 3, 4, dims), distinct / 2 - saved / 2);  // one group
  }
}

// A copy built apart from its original (another stage) draws the same values.
TEST(ShareTest, ACopyBuiltApartEqualsItsOriginal) {
  const ModelDims dims = SharedDims(true, true);
  CpuFixture a, b;
  const auto together = BuildBlocks(dims, *a.backend, 1, 2);
  const auto apart = BuildBlocks(dims, *b.backend, 2, 2);
  const std::vector<Param*> original = together[0]->params(), copy = apart[0]->params();
  for (size_t k = 0; k < copy.size(); ++k) {
    EXPECT_TRUE(copy[k]->tied);
    EXPECT_EQ(copy[k]->name, original[k]->name);
    EXPECT_NE(copy[k]->value.raw(), original[k]->value.raw());
    EXPECT_EQ(Bits(copy[k]->value), Bits(original[k]->value)) << copy[k]->name;
  }
}

// Two blocks of one group in sequence: the shared gradient is d(loss)/d(shared value), which
// moves both blocks at once.
TEST(ShareTest, TheSharedGradientMatchesFiniteDifferencesThroughBothBlocks) {
  CpuFixture fx;
  const ModelDims dims = SharedDims(true, true);
  auto blocks = BuildBlocks(dims, *fx.backend, 1, 2);
  Rng rng(5);
  model_test::RandomizeParams(*blocks[0], rng, 0.3f);
  for (Layer* l : {blocks[0].get(), blocks[1].get()}) model_test::ZeroGrads(*fx.backend, *l);
  const MicroBatch batch =
      model_test::RandomBatch(fx.allocator(), kBatch, kSeq, dims.vocab_size, rng);
  Tensor x =
      model_test::RandomActivation(fx.allocator(), {kBatch, kSeq, dims.width}, DType::kF32, rng);
  const Tensor r =
      model_test::RandomActivation(fx.allocator(), {kBatch, kSeq, dims.width}, DType::kF32, rng);
  Stash s0, s1;
  const Tensor h = blocks[0]->Forward(x, batch, s0);
  blocks[1]->Forward(h, batch, s1);
  const Tensor dh = blocks[1]->Backward(r, batch, s1, BackwardArgs{});
  blocks[0]->Backward(dh, batch, s0, BackwardArgs{});
  const auto loss = [&] {
    Stash a, b;
    return ProjectedSum(blocks[1]->Forward(blocks[0]->Forward(x, batch, a), batch, b), r);
  };
  numeric_check::GradCheckOptions options;
  options.step = 1e-2;
  options.tolerance = 2e-3;
  for (Param* p : blocks[0]->params()) {
    const auto result = CheckGradient(p->value, loss, p->grad, options);
    EXPECT_TRUE(result.ok) << p->name << ": " << result.Describe();
  }
}

TEST(ShareTest, TiedParametersListEveryGroupsSharedNames) {
  const ModelDims dims = SharedDims(false, true);
  const std::vector<TiedParameter> tied = TiedParameters(GptGraph(dims), dims);
  ASSERT_EQ(tied.size(), 1u + 2u * 6u);  // wte, then 6 MLP tensors per group of 2
  EXPECT_EQ(tied[0].name, "wte.weight");
  EXPECT_EQ(tied[1].name, "h.0.ln_2.weight");
  EXPECT_EQ(tied[1].layers, (std::vector<int>{1, 2}));
  EXPECT_EQ(tied[7].name, "h.2.ln_2.weight");
  EXPECT_EQ(tied[7].layers, (std::vector<int>{3, 4}));
  EXPECT_EQ(ShareGroups(GptGraph(dims), dims), (std::vector<std::vector<int>>{{1, 2}, {3, 4}}));
}

}  // namespace
}  // namespace baton
