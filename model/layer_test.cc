// Layer tests: every backward against finite differences, the zero-bubble split and selective
// recompute against the plain backward bit for bit, flash against materialized attention, bf16
// against f32, and the Stash.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "model/graph.h"
#include "model/test_util.h"

namespace baton {
namespace {

using model_test::Bits;
using model_test::CpuFixture;
using model_test::GradBits;
using numeric_check::CheckGradient;
using numeric_check::ProjectedSum;

constexpr int64_t kBatch = 2;
constexpr int64_t kSeq = 5;
constexpr uint64_t kSeed = 1234;
const LayerKind kAllKinds[] = {LayerKind::kEmbedding, LayerKind::kBlock, LayerKind::kMlpBlock,
                               LayerKind::kHead};

// The spec of the first layer of `kind` in a graph of tiny dims.
LayerSpec SpecOf(LayerKind kind, const ModelDims& dims) {
  const std::vector<LayerSpec> graph =
      kind == LayerKind::kMlpBlock ? MlpGraph(dims) : GptGraph(dims);
  for (const LayerSpec& spec : graph) {
    if (spec.kind == kind) return spec;
  }
  BATON_FAIL("no {} in the graph", Name(kind));
}

// One layer with its inputs: x (B,T,C) (unused by the embedding) and the projection r that
// defines the scalar loss sum(y * r) of a non-head layer.
struct LayerCase {
  CpuFixture fx;
  ModelDims dims = model_test::TinyDims();
  std::unique_ptr<Layer> layer;
  MicroBatch batch;
  Tensor x;
  Tensor r;
  bool is_head = false;

  LayerCase(LayerKind kind, DType param_dtype = DType::kF32, DType act_dtype = DType::kF32,
            uint64_t data_seed = 7) {
    layer = BuildLayer(SpecOf(kind, dims), dims, *fx.backend, param_dtype, act_dtype, kSeed);
    is_head = kind == LayerKind::kHead;
    Rng rng(data_seed);
    batch = model_test::RandomBatch(fx.allocator(), kBatch, kSeq, dims.vocab_size, rng);
    x = model_test::RandomActivation(fx.allocator(), {kBatch, kSeq, dims.width}, act_dtype, rng);
    r = model_test::RandomActivation(fx.allocator(), {kBatch, kSeq, dims.width}, act_dtype, rng);
  }

  // The scalar the gradients are of, recomputed from the current input and parameters.
  double Loss() {
    Stash stash;
    const Tensor y = layer->Forward(x, batch, stash);
    return is_head ? static_cast<double>(y.data<float>()[0]) : ProjectedSum(y, r);
  }
  Tensor Backward(Stash& stash) {
    return layer->Backward(is_head ? Tensor() : r, batch, stash, BackwardArgs{});
  }
  Tensor BackwardSplit(Stash& stash) {
    Tensor dx = layer->BackwardInput(is_head ? Tensor() : r, batch, stash, BackwardArgs{});
    layer->BackwardWeight(stash);
    return dx;
  }
};

void ExpectGradientsMatchFiniteDifferences(LayerKind kind, bool selective, bool flash = true) {
  LayerCase c(kind);
  c.layer->set_selective_recompute(selective);
  c.layer->set_flash_attention(flash);
  Rng rng(99);
  model_test::RandomizeParams(*c.layer, rng, 0.3f);
  model_test::ZeroGrads(*c.fx.backend, *c.layer);
  Stash stash;
  c.layer->Forward(c.x, c.batch, stash);
  const Tensor dx = c.Backward(stash);
  EXPECT_TRUE(stash.empty());
  const auto loss = [&] { return c.Loss(); };
  numeric_check::GradCheckOptions options;
  options.step = 1e-2;
  options.tolerance = 2e-3;  // the observed errors are ~1e-4
  if (kind != LayerKind::kEmbedding) {
    const auto result = CheckGradient(c.x, loss, dx, options);
    EXPECT_TRUE(result.ok) << Name(kind) << " dx: " << result.Describe();
  }
  for (Param* p : c.layer->params()) {
    const auto result = CheckGradient(p->value, loss, p->grad, options);
    EXPECT_TRUE(result.ok) << p->name << ": " << result.Describe();
  }
}

TEST(LayerGradient, EmbeddingBackwardMatchesFiniteDifferences) {
  ExpectGradientsMatchFiniteDifferences(LayerKind::kEmbedding, false);
}

TEST(LayerGradient, BlockBackwardMatchesFiniteDifferences) {
  ExpectGradientsMatchFiniteDifferences(LayerKind::kBlock, false);
}

TEST(LayerGradient, BlockBackwardUnderSelectiveRecomputeMatchesFiniteDifferences) {
  ExpectGradientsMatchFiniteDifferences(LayerKind::kBlock, true);
}

TEST(LayerGradient, BlockWithMaterializedAttentionMatchesFiniteDifferences) {
  ExpectGradientsMatchFiniteDifferences(LayerKind::kBlock, false, /*flash=*/false);
  ExpectGradientsMatchFiniteDifferences(LayerKind::kBlock, true, /*flash=*/false);
}

TEST(LayerGradient, MlpBlockBackwardMatchesFiniteDifferences) {
  ExpectGradientsMatchFiniteDifferences(LayerKind::kMlpBlock, false);
}

TEST(LayerGradient, HeadBackwardMatchesFiniteDifferences) {
  ExpectGradientsMatchFiniteDifferences(LayerKind::kHead, false);
}

TEST(LayerGradient, HeadScalesItsGradientByLossGradScale) {
  LayerCase c(LayerKind::kHead);
  Stash stash;
  c.layer->Forward(c.x, c.batch, stash);
  const Tensor dx1 = c.layer->Backward(Tensor(), c.batch, stash, BackwardArgs{1.0f});
  c.layer->Forward(c.x, c.batch, stash);
  const Tensor dx4 = c.layer->Backward(Tensor(), c.batch, stash, BackwardArgs{0.25f});
  const std::vector<float> a = ToFloatVector(dx1);
  const std::vector<float> b = ToFloatVector(dx4);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(b[i], 0.25f * a[i], 1e-6f * (1 + std::abs(a[i])));
}

// Backward, and BackwardInput then BackwardWeight, from the same Forward: same dx, same grads.
void ExpectSplitBackwardEqualsBackward(LayerKind kind, bool selective, DType dtype, bool flash) {
  LayerCase c(kind, dtype, dtype);
  c.layer->set_selective_recompute(selective);
  c.layer->set_flash_attention(flash);
  Stash stash;
  const std::string y = Bits(c.layer->Forward(c.x, c.batch, stash));
  const std::string dx_full = Bits(c.Backward(stash));
  const std::vector<std::string> grads_full = GradBits(*c.layer);

  model_test::ZeroGrads(*c.fx.backend, *c.layer);
  EXPECT_EQ(Bits(c.layer->Forward(c.x, c.batch, stash)), y);
  const std::string dx_split =
      Bits(c.layer->BackwardInput(c.is_head ? Tensor() : c.r, c.batch, stash, BackwardArgs{}));
  for (const std::string& name : stash.names()) {  // only the weight GEMMs' operands are left
    EXPECT_TRUE(name.ends_with(".weight.lhs") || name.ends_with(".weight.rhs")) << name;
  }
  c.layer->BackwardWeight(stash);
  EXPECT_TRUE(stash.empty());
  EXPECT_EQ(dx_split, dx_full) << Name(kind);
  EXPECT_EQ(GradBits(*c.layer), grads_full) << Name(kind);
}

TEST(ZeroBubbleSplit, BackwardInputThenBackwardWeightEqualsBackwardBitForBit) {
  for (LayerKind kind : kAllKinds) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (bool selective : {false, true}) {
        for (bool flash : {true, false}) {
          SCOPED_TRACE(fmt::format("{} {} selective={} flash={}", Name(kind), Name(dtype),
                                   selective, flash));
          ExpectSplitBackwardEqualsBackward(kind, selective, dtype, flash);
        }
      }
    }
  }
}

TEST(ZeroBubbleSplit, BackwardInputLeavesWeightGradientsUntouched) {
  LayerCase c(LayerKind::kBlock);
  Stash stash;
  c.layer->Forward(c.x, c.batch, stash);
  c.layer->BackwardInput(c.r, c.batch, stash, BackwardArgs{});
  for (Param* p : c.layer->params()) {
    const bool weight_matrix = p->value.dim() == 2;
    const std::vector<float> g = ToFloatVector(p->grad);
    bool all_zero = true;
    for (float v : g) all_zero = all_zero && v == 0.0f;
    EXPECT_EQ(all_zero, weight_matrix) << p->name;
  }
  c.layer->BackwardWeight(stash);
}

TEST(ZeroBubbleSplit, BackwardWeightWithoutBackwardInputIsAnError) {
  LayerCase c(LayerKind::kBlock);
  Stash stash;
  c.layer->Forward(c.x, c.batch, stash);
  EXPECT_THROW(c.layer->BackwardWeight(stash), Error);
}

// Selective recompute on vs off: same output, dx and grads, bit for bit; a smaller stash.
void ExpectSelectiveEqualsFull(LayerKind kind, DType dtype, bool flash = true) {
  LayerCase c(kind, dtype, dtype);
  c.layer->set_flash_attention(flash);
  Stash stash;
  const std::string y_full = Bits(c.layer->Forward(c.x, c.batch, stash));
  const int64_t stash_full = stash.bytes();
  const std::string dx_full = Bits(c.Backward(stash));
  const std::vector<std::string> grads_full = GradBits(*c.layer);

  model_test::ZeroGrads(*c.fx.backend, *c.layer);
  c.layer->set_selective_recompute(true);
  EXPECT_TRUE(c.layer->selective_recompute());
  EXPECT_EQ(Bits(c.layer->Forward(c.x, c.batch, stash)), y_full);
  EXPECT_LT(stash.bytes(), stash_full);
  EXPECT_FALSE(stash.Has("mlp.fc") || stash.Has("mlp.act") || stash.Has("attn.probs"));
  // Flash attention keeps its row log-sum-exps: selective recompute has nothing to redo there.
  EXPECT_EQ(stash.Has("attn.lse"), kind == LayerKind::kBlock && flash);
  EXPECT_EQ(Bits(c.Backward(stash)), dx_full);
  EXPECT_EQ(GradBits(*c.layer), grads_full);
}

TEST(SelectiveRecompute, BlockGivesTheSameBitsAsFullStash) {
  for (bool flash : {true, false}) {
    SCOPED_TRACE(flash ? "flash" : "materialized");
    ExpectSelectiveEqualsFull(LayerKind::kBlock, DType::kF32, flash);
    ExpectSelectiveEqualsFull(LayerKind::kBlock, DType::kBF16, flash);
  }
}

// Flash attention against materialized in a block: the same output, dx and grads up to
// rounding, and a stash that holds lse (B,NH,T) f32 where materialized holds probs (B,NH,T,T).
TEST(FlashAttention, BlockMatchesMaterializedAndStashesOnlyTheLogSumExp) {
  LayerCase flash(LayerKind::kBlock);
  LayerCase materialized(LayerKind::kBlock);    // same seeds: same params and data
  EXPECT_TRUE(flash.layer->flash_attention());  // the default
  materialized.layer->set_flash_attention(false);
  EXPECT_FALSE(materialized.layer->flash_attention());
  Stash fs, ms;
  const Tensor fy = flash.layer->Forward(flash.x, flash.batch, fs);
  const Tensor my = materialized.layer->Forward(materialized.x, materialized.batch, ms);
  EXPECT_LT(numeric_check::NormalisedError(fy, my), 1e-6);
  EXPECT_TRUE(fs.Has("attn.lse") && !fs.Has("attn.probs"));
  EXPECT_TRUE(ms.Has("attn.probs") && !ms.Has("attn.lse"));
  const int64_t heads = flash.dims.num_heads;
  EXPECT_EQ(ms.bytes() - fs.bytes(), 4 * kBatch * heads * (kSeq * kSeq - kSeq));
  EXPECT_LT(numeric_check::NormalisedError(flash.Backward(fs), materialized.Backward(ms)), 1e-5);
  const std::vector<Param*> fp = flash.layer->params();
  const std::vector<Param*> mp = materialized.layer->params();
  for (size_t i = 0; i < fp.size(); ++i) {
    EXPECT_LT(numeric_check::NormalisedError(fp[i]->grad, mp[i]->grad), 1e-5) << fp[i]->name;
  }
}

TEST(SelectiveRecompute, MlpBlockGivesTheSameBitsAsFullStash) {
  ExpectSelectiveEqualsFull(LayerKind::kMlpBlock, DType::kF32);
  ExpectSelectiveEqualsFull(LayerKind::kMlpBlock, DType::kBF16);
}

// bf16 parameters and activations track the f32 layer within bf16 precision.
TEST(HalfPrecision, Bf16LayersAgreeWithF32WithinBf16Tolerance) {
  for (LayerKind kind : kAllKinds) {
    SCOPED_TRACE(std::string(Name(kind)));
    LayerCase full(kind, DType::kF32, DType::kF32);
    LayerCase half(kind, DType::kBF16, DType::kBF16);  // same seeds: same params and data
    Stash s32;
    Stash s16;
    const Tensor y32 = full.layer->Forward(full.x, full.batch, s32);
    const Tensor y16 = half.layer->Forward(half.x, half.batch, s16);
    EXPECT_EQ(y16.dtype(), kind == LayerKind::kHead ? DType::kF32 : DType::kBF16);
    EXPECT_LT(numeric_check::NormalisedError(y16, y32), 2e-2);
    const Tensor dx32 = full.Backward(s32);
    const Tensor dx16 = half.Backward(s16);
    if (kind != LayerKind::kEmbedding) {
      EXPECT_LT(numeric_check::NormalisedError(dx16, dx32), 5e-2);
    }
    const std::vector<Param*> p32 = full.layer->params();
    const std::vector<Param*> p16 = half.layer->params();
    for (size_t i = 0; i < p32.size(); ++i) {
      EXPECT_EQ(p16[i]->value.dtype(), DType::kBF16);
      EXPECT_EQ(p16[i]->grad.dtype(), DType::kF32);
      EXPECT_LT(numeric_check::NormalisedError(p16[i]->grad, p32[i]->grad), 5e-2) << p32[i]->name;
    }
  }
}

TEST(LayerContract, ForwardIntoAStashInUseIsAnError) {
  LayerCase c(LayerKind::kBlock);
  Stash stash;
  c.layer->Forward(c.x, c.batch, stash);
  EXPECT_THROW(c.layer->Forward(c.x, c.batch, stash), Error);
}

TEST(LayerContract, BlockRejectsAnInputOfTheWrongWidthOrDtype) {
  LayerCase c(LayerKind::kBlock);
  Stash stash;
  Rng rng(3);
  const Tensor narrow = model_test::RandomActivation(c.fx.allocator(), {2, 5, 4}, DType::kF32, rng);
  EXPECT_THROW(c.layer->Forward(narrow, c.batch, stash), Error);
  const Tensor half = model_test::RandomActivation(c.fx.allocator(), {2, 5, 8}, DType::kBF16, rng);
  EXPECT_THROW(c.layer->Forward(half, c.batch, stash), Error);
}

TEST(LayerContract, HeadRejectsAnOutputGradient) {
  LayerCase c(LayerKind::kHead);
  Stash stash;
  c.layer->Forward(c.x, c.batch, stash);
  EXPECT_THROW(c.layer->Backward(c.r, c.batch, stash, BackwardArgs{}), Error);
}

TEST(LayerContract, EmbeddingRejectsSequencesLongerThanTheContext) {
  LayerCase c(LayerKind::kEmbedding);
  Rng rng(5);
  MicroBatch too_long = model_test::RandomBatch(c.fx.allocator(), 1, 6, c.dims.vocab_size, rng);
  Stash stash;
  EXPECT_THROW(c.layer->Forward(Tensor(), too_long, stash), Error);
}

TEST(LayerContract, LayerNamesFollowTheGraph) {
  for (LayerKind kind : kAllKinds) {
    LayerCase c(kind);
    EXPECT_EQ(c.layer->name(), SpecOf(kind, c.dims).name);
  }
}

TEST(StashTest, HoldsNamedTensorsAndCountsTheirBytes) {
  CpuFixture fx;
  Stash stash;
  EXPECT_TRUE(stash.empty());
  stash.Put("a", Tensor::Zeros(fx.allocator(), {3, 4}, DType::kF32, MemCategory::kActivations));
  stash.Put("b", Tensor::Zeros(fx.allocator(), {5}, DType::kBF16, MemCategory::kActivations));
  EXPECT_EQ(stash.size(), 2);
  EXPECT_EQ(stash.bytes(), 3 * 4 * 4 + 5 * 2);
  EXPECT_TRUE(stash.Has("a"));
  EXPECT_EQ(stash.Get("b").numel(), 5);
  EXPECT_EQ(stash.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_THROW(stash.Put("a", Tensor()), Error);
  EXPECT_THROW(stash.Get("c"), Error);
  stash.Clear();
  EXPECT_TRUE(stash.empty());
  EXPECT_EQ(fx.ledger.current(MemCategory::kActivations), 0);
}

}  // namespace
}  // namespace baton
