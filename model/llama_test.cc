// Llama layers (model.preset: llama): every backward against finite differences (grouped-query,
// multi-query and multi-head attention, flash and materialized, selective recompute, packed
// documents, tied and untied heads), the zero-bubble split and selective recompute bit for bit,
// cached decoding against the full forward, and the parameter list against the cost model.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/cost.h"
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
constexpr uint64_t kSeed = 4321;

// V=11, T=6, L=2, NH=4 (D=4), KVH=2, hidden 12, untied: every Llama feature, tiny.
ModelDims LlamaDims(int kv_heads = 2, bool tie = false) {
  ModelDims dims{11, 6, 2, 4, 16};
  dims.family = ModelFamily::kLlama;
  dims.num_kv_heads = kv_heads;
  dims.mlp_hidden = 12;
  dims.norm_eps = 1e-5f;
  dims.rope.theta = 500000.0;
  dims.rope.factor = 8.0;  // Llama 3 scaling, so the frequencies the kernels use are the scaled
  dims.rope.original_context = 4;
  dims.tie_embeddings = tie;
  return dims;
}

LayerSpec SpecOf(LayerKind kind, const ModelDims& dims) {
  for (const LayerSpec& spec : GptGraph(dims)) {
    if (spec.kind == kind) return spec;
  }
  BATON_FAIL("no {} in the graph", Name(kind));
}

struct LlamaCase {
  CpuFixture fx;
  ModelDims dims;
  std::unique_ptr<Layer> layer;
  MicroBatch batch;
  Tensor x, r;
  bool is_head;

  LlamaCase(LayerKind kind, const ModelDims& d, DType dtype = DType::kF32, bool packed = false)
      : dims(d), is_head(kind == LayerKind::kHead) {
    layer = BuildLayer(SpecOf(kind, dims), dims, *fx.backend, dtype, dtype, kSeed);
    Rng rng(11);
    batch = model_test::RandomBatch(fx.allocator(), kBatch, kSeq, dims.vocab_size, rng);
    if (packed) {  // row 0: documents [0,2) and [2,5); row 1: one document
      batch.segment_starts =
          Tensor::Empty(fx.allocator(), {kBatch, kSeq}, DType::kI32, MemCategory::kActivations);
      const int32_t starts[] = {0, 0, 2, 2, 2, 0, 0, 0, 0, 0};
      std::copy(starts, starts + kBatch * kSeq, batch.segment_starts.data<int32_t>());
    }
    x = model_test::RandomActivation(fx.allocator(), {kBatch, kSeq, dims.width}, dtype, rng);
    r = model_test::RandomActivation(fx.allocator(), {kBatch, kSeq, dims.width}, dtype, rng);
  }
  double Loss() {
    Stash stash;
    const Tensor y = layer->Forward(x, batch, stash);
    return is_head ? static_cast<double>(y.data<float>()[0]) : ProjectedSum(y, r);
  }
  Tensor Backward(Stash& stash) {
    return layer->Backward(is_head ? Tensor() : r, batch, stash, BackwardArgs{});
  }
};

void ExpectFiniteDifferences(LayerKind kind, const ModelDims& dims, bool selective = false,
                             bool flash = true, bool packed = false) {
  LlamaCase c(kind, dims, DType::kF32, packed);
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
  options.tolerance = 2e-3;
  if (kind != LayerKind::kEmbedding) {
    const auto result = CheckGradient(c.x, loss, dx, options);
    EXPECT_TRUE(result.ok) << Name(kind) << " dx: " << result.Describe();
  }
  for (Param* p : c.layer->params()) {
    const auto result = CheckGradient(p->value, loss, p->grad, options);
    EXPECT_TRUE(result.ok) << p->name << ": " << result.Describe();
  }
}

// The block a family is made of, which the layers build and the cost model counts: the spec's
// choices show in the parameters every layer holds, and in their count.
TEST(BlockSpecTest, EachFamilysChoicesAreTheParametersItsLayersHold) {
  const ModelDims llama = LlamaDims();
  ModelDims gpt = llama;
  gpt.family = ModelFamily::kGpt2;
  ModelDims qwen2 = llama;
  qwen2.family = ModelFamily::kQwen2;
  EXPECT_TRUE(llama.spec().rms_norm() && llama.spec().rotary() && llama.spec().swiglu());
  EXPECT_FALSE(llama.spec().linear_biases || llama.spec().norm_bias() || llama.spec().qkv_bias);
  EXPECT_EQ(gpt.spec(), BlockSpec());
  BlockSpec llama_with_qkv_bias = llama.spec();
  llama_with_qkv_bias.qkv_bias = true;
  EXPECT_EQ(qwen2.spec(), llama_with_qkv_bias);
  EXPECT_TRUE(qwen2.llama());
  ModelDims qwen3 = llama;
  qwen3.family = ModelFamily::kQwen3;
  BlockSpec llama_with_qk_norm = llama.spec();
  llama_with_qk_norm.qk_norm = true;
  EXPECT_EQ(qwen3.spec(), llama_with_qk_norm);
  CpuFixture fx;
  for (const ModelDims& dims : {gpt, llama, qwen2, qwen3}) {
    const BlockSpec spec = dims.spec();
    std::set<std::string> names;
    for (const LayerSpec& layer_spec : GptGraph(dims)) {
      std::unique_ptr<Layer> layer =
          BuildLayer(layer_spec, dims, *fx.backend, DType::kF32, DType::kF32, kSeed);
      int64_t numel = 0;
      for (Param* p : layer->params()) {
        names.insert(p->name);
        numel += p->value.numel();
      }
      EXPECT_EQ(numel, StoredParamCount(layer_spec, dims)) << layer_spec.name;
    }
    EXPECT_EQ(names.count("h.0.ln_1.bias"), spec.norm_bias() ? 1u : 0u) << ToString(dims);
    EXPECT_EQ(names.count("ln_f.bias"), spec.norm_bias() ? 1u : 0u) << ToString(dims);
    EXPECT_EQ(names.count("h.0.attn.c_attn.bias"), spec.attention_in_bias() ? 1u : 0u);
    EXPECT_EQ(names.count("h.0.attn.c_proj.bias"), spec.linear_biases ? 1u : 0u);
    EXPECT_EQ(names.count("h.0.mlp.c_fc.bias"), spec.linear_biases ? 1u : 0u);
    EXPECT_EQ(names.count("wpe.weight"), spec.rotary() ? 0u : 1u) << ToString(dims);
    EXPECT_EQ(names.count("h.1.attn.q_norm.weight"), spec.qk_norm ? 1u : 0u) << ToString(dims);
    EXPECT_EQ(names.count("h.1.attn.k_norm.weight"), spec.qk_norm ? 1u : 0u) << ToString(dims);
  }
}

TEST(LlamaGradient, BlockWithGroupedQueryAttentionMatchesFiniteDifferences) {
  ExpectFiniteDifferences(LayerKind::kBlock, LlamaDims(2));
  ExpectFiniteDifferences(LayerKind::kBlock, LlamaDims(2), /*selective=*/true);
  ExpectFiniteDifferences(LayerKind::kBlock, LlamaDims(2), false, /*flash=*/false);
  ExpectFiniteDifferences(LayerKind::kBlock, LlamaDims(2), true, /*flash=*/false);
}

// Qwen2: Llama's block with c_attn's bias (q, k and v biases); the bias's gradient too (every
// parameter is checked), through flash and materialized attention.
TEST(LlamaGradient, Qwen2BlockWithQkvBiasesMatchesFiniteDifferences) {
  ModelDims qwen2 = LlamaDims(2);
  qwen2.family = ModelFamily::kQwen2;
  ExpectFiniteDifferences(LayerKind::kBlock, qwen2);
  ExpectFiniteDifferences(LayerKind::kBlock, qwen2, /*selective=*/true, /*flash=*/false);
}

// Mistral's sliding window of 2 over 5 positions: each query sees itself and one key before it;
// packed documents narrow it further.
TEST(LlamaGradient, SlidingWindowBlockMatchesFiniteDifferences) {
  ModelDims mistral = LlamaDims(2);
  mistral.family = ModelFamily::kMistral;
  mistral.sliding_window = 2;
  ExpectFiniteDifferences(LayerKind::kBlock, mistral);
  ExpectFiniteDifferences(LayerKind::kBlock, mistral, /*selective=*/true, /*flash=*/false);
  ExpectFiniteDifferences(LayerKind::kBlock, mistral, false, true, /*packed=*/true);
}

TEST(LlamaGradient, MultiQueryAndMultiHeadBlocksMatchFiniteDifferences) {
  ExpectFiniteDifferences(LayerKind::kBlock, LlamaDims(1));
  ExpectFiniteDifferences(LayerKind::kBlock, LlamaDims(4));
}

// A head size set apart from the width (Qwen3's head_dim): 4 query heads of 6 over 2 key/value
// heads, 24 query columns for a width of 16, so c_proj is (24, 16); every parameter's gradient.
ModelDims HeadSizeDims() {
  ModelDims dims = LlamaDims(2);
  dims.head_size = 6;
  return dims;
}

TEST(LlamaGradient, AHeadSizeApartFromTheWidthMatchesFiniteDifferences) {
  ExpectFiniteDifferences(LayerKind::kBlock, HeadSizeDims());
  ExpectFiniteDifferences(LayerKind::kBlock, HeadSizeDims(), /*selective=*/true, /*flash=*/false);
  ExpectFiniteDifferences(LayerKind::kBlock, HeadSizeDims(), false, true, /*packed=*/true);
}

// Qwen3's block: an RMSNorm of each query and key head (their weights off 1, so that they
// matter) before the rotation, with its own head size; every parameter's gradient, the norms'
// weights too, through flash and materialized attention and packed documents.
ModelDims Qwen3Dims() {
  ModelDims dims = HeadSizeDims();
  dims.family = ModelFamily::kQwen3;
  return dims;
}

TEST(LlamaGradient, Qwen3BlockWithQkNormsMatchesFiniteDifferences) {
  ExpectFiniteDifferences(LayerKind::kBlock, Qwen3Dims());
  ExpectFiniteDifferences(LayerKind::kBlock, Qwen3Dims(), /*selective=*/true, /*flash=*/false);
  ExpectFiniteDifferences(LayerKind::kBlock, Qwen3Dims(), false, true, /*packed=*/true);
}

TEST(LlamaGradient, PackedDocumentsRestartRotaryPositionsAndMatchFiniteDifferences) {
  ExpectFiniteDifferences(LayerKind::kBlock, LlamaDims(2), false, true, /*packed=*/true);
  ExpectFiniteDifferences(LayerKind::kBlock, LlamaDims(2), false, false, /*packed=*/true);
}

TEST(LlamaGradient, EmbeddingAndTiedAndUntiedHeadsMatchFiniteDifferences) {
  ExpectFiniteDifferences(LayerKind::kEmbedding, LlamaDims());
  ExpectFiniteDifferences(LayerKind::kHead, LlamaDims(2, /*tie=*/false));
  ExpectFiniteDifferences(LayerKind::kHead, LlamaDims(2, /*tie=*/true));
}

TEST(LlamaLayers, ParametersAreLlamasAndCountAsTheCostModelSays) {
  const ModelDims dims = LlamaDims();
  CpuFixture fx;
  int64_t stored = 0;
  std::vector<std::string> names;
  for (const LayerSpec& spec : GptGraph(dims)) {
    std::unique_ptr<Layer> layer =
        BuildLayer(spec, dims, *fx.backend, DType::kF32, DType::kF32, kSeed);
    int64_t numel = 0;
    for (Param* p : layer->params()) {
      numel += p->value.numel();
      names.push_back(p->name + " " + p->value.ToString());
    }
    EXPECT_EQ(numel, StoredParamCount(spec, dims)) << spec.name;
    stored += numel;
  }
  EXPECT_EQ(stored, ParamCount(GptGraph(dims), dims));  // untied: nothing is held twice
  const std::vector<std::string> block0 = {names.begin() + 1, names.begin() + 6};
  EXPECT_EQ(block0,
            (std::vector<std::string>{
                "h.0.ln_1.weight f32(16) params",
                "h.0.attn.c_attn.weight f32(16, 32) params",  // 16 queries + 2 x 8
                "h.0.attn.c_proj.weight f32(16, 16) params", "h.0.ln_2.weight f32(16) params",
                "h.0.mlp.c_fc.weight f32(16, 24) params",  // gate | up
            }));
  EXPECT_EQ(names.front(), "wte.weight f32(11, 16) params");  // no wpe
  EXPECT_EQ(names.back(), "lm_head.weight f32(11, 16) params");
  EXPECT_TRUE(TiedParameters(GptGraph(dims), dims).empty());
  EXPECT_EQ(TiedParameters(GptGraph(LlamaDims(2, true)), LlamaDims(2, true)).size(), 1u);

  // With its own head size: c_attn (C, NH D + 2 KVH D), c_proj (NH D, C), counted alike.
  const ModelDims apart = HeadSizeDims();
  const LayerSpec block = GptGraph(apart)[1];
  std::unique_ptr<Layer> layer =
      BuildLayer(block, apart, *fx.backend, DType::kF32, DType::kF32, kSeed);
  int64_t numel = 0;
  std::vector<std::string> shapes;
  for (Param* p : layer->params()) {
    numel += p->value.numel();
    shapes.push_back(p->name + " " + ToString(p->value.shape()));
  }
  EXPECT_EQ(numel, StoredParamCount(block, apart));
  EXPECT_EQ(shapes[1], "h.0.attn.c_attn.weight (16, 48)");  // 4 x 6 queries + 2 x 2 x 6
  EXPECT_EQ(shapes[2], "h.0.attn.c_proj.weight (24, 16)");
  EXPECT_EQ(ToString(apart), "V=11 T=6 L=2 NH=4 C=16 llama KVH=2 H=12 theta=500000 D=6 untied");
}

TEST(LlamaLayers, SplitBackwardAndSelectiveRecomputeGiveTheSameBits) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (bool flash : {true, false}) {
      for (const ModelDims& dims : {LlamaDims(), Qwen3Dims()}) {
        SCOPED_TRACE(fmt::format("{} flash={} {}", Name(dtype), flash, ToString(dims)));
        LlamaCase c(LayerKind::kBlock, dims, dtype);
        c.layer->set_flash_attention(flash);
        Stash stash;
        const std::string y = Bits(c.layer->Forward(c.x, c.batch, stash));
        const std::string dx = Bits(c.Backward(stash));
        const std::vector<std::string> grads = GradBits(*c.layer);

        model_test::ZeroGrads(*c.fx.backend, *c.layer);  // the zero-bubble split
        EXPECT_EQ(Bits(c.layer->Forward(c.x, c.batch, stash)), y);
        EXPECT_EQ(Bits(c.layer->BackwardInput(c.r, c.batch, stash, BackwardArgs{})), dx);
        c.layer->BackwardWeight(stash);
        EXPECT_EQ(GradBits(*c.layer), grads);

        model_test::ZeroGrads(*c.fx.backend, *c.layer);  // selective recompute
        c.layer->set_selective_recompute(true);
        EXPECT_EQ(Bits(c.layer->Forward(c.x, c.batch, stash)), y);
        EXPECT_FALSE(stash.Has("mlp.fc") || stash.Has("mlp.act") || stash.Has("attn.probs"));
        EXPECT_EQ(Bits(c.Backward(stash)), dx);
        EXPECT_EQ(GradBits(*c.layer), grads);
      }
    }
  }
}

// Positions [start, start + count) of the case's x (B,T,C), as a new (B,count,C) tensor.
Tensor PositionsOf(LlamaCase& c, int64_t start, int64_t count) {
  const int64_t width = c.dims.width;
  Tensor part = Tensor::Empty(c.fx.allocator(), {kBatch, count, width}, DType::kF32,
                              MemCategory::kActivations);
  for (int64_t b = 0; b < kBatch; ++b) {
    std::copy_n(c.x.data<float>() + (b * kSeq + start) * width, count * width,
                part.data<float>() + b * count * width);
  }
  return part;
}

// Decoding with a key-value cache, one position at a time after a prefix, gives what the full
// forward gives: rotary positions continue from the cache's length, and the cache holds every
// query head's keys and values.
TEST(LlamaLayers, CachedDecodingMatchesTheFullForward) {
  for (bool flash : {true, false}) {
    for (const ModelDims& dims : {LlamaDims(2), HeadSizeDims(), Qwen3Dims()}) {
      LlamaCase c(LayerKind::kBlock, dims);
      c.layer->set_flash_attention(flash);
      Stash stash;
      const std::vector<float> full = ToFloatVector(c.layer->Forward(c.x, c.batch, stash));
      stash.Clear();
      KvCache cache;
      std::vector<float> cached(full.size());
      const int64_t width = c.dims.width;
      const auto run = [&](int64_t start, int64_t count) {
        Tensor part = PositionsOf(c, start, count);
        const std::vector<float> y = ToFloatVector(
            c.layer->ForwardCached(part, c.batch, std::vector<int64_t>(kBatch, start), cache));
        for (int64_t b = 0; b < kBatch; ++b) {
          for (int64_t t = 0; t < count; ++t) {
            for (int64_t k = 0; k < width; ++k) {
              cached[(b * kSeq + start + t) * width + k] = y[(b * count + t) * width + k];
            }
          }
        }
      };
      run(0, 3);
      run(3, 1);
      run(4, 1);
      EXPECT_LT(numeric_check::NormalisedError(cached, full), 1e-6)
          << (flash ? "flash " : "mat ") << ToString(dims);
    }
  }
}

}  // namespace
}  // namespace baton
