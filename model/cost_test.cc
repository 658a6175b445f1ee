// The cost model against hand counts and GPT-2 124M: parameters and FLOPs. (Memory is predicted
// by running the layers on a meta backend: planner/memory_planner_test.cc.)
#include "model/cost.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "model/test_util.h"

namespace baton {
namespace {

const ModelDims kGpt2Small{/*vocab_size=*/50257, /*context=*/1024, /*num_layers=*/12,
                           /*num_heads=*/12, /*width=*/768};

LayerSpec SpecOf(LayerKind kind, const ModelDims& dims) {
  const std::vector<LayerSpec> graph =
      kind == LayerKind::kMlpBlock ? MlpGraph(dims) : GptGraph(dims);
  for (const LayerSpec& spec : graph) {
    if (spec.kind == kind) return spec;
  }
  BATON_FAIL("no {}", Name(kind));
}

TEST(ParamCount, Gpt2SmallHas124439808Parameters) {
  const std::vector<LayerSpec> graph = GptGraph(kGpt2Small);
  EXPECT_EQ(ParamCount(graph, kGpt2Small), 124'439'808);
  EXPECT_EQ(ParamCount(graph.front(), kGpt2Small), 50257 * 768 + 1024 * 768);
  EXPECT_EQ(ParamCount(graph[1], kGpt2Small), 7'087'872);
  // The head's tied wte is the embedding's parameter: only ln_f is the head's own ...
  EXPECT_EQ(ParamCount(graph.back(), kGpt2Small), 2 * 768);
  // ... but a head built on its own stage stores a copy of it.
  EXPECT_EQ(StoredParamCount(graph.back(), kGpt2Small), 2 * 768 + 50257 * 768);
  // One stage holding both stores wte once (the partition table printed 163M for GPT-2 124M)...
  const int last = static_cast<int>(graph.size()) - 1;
  EXPECT_EQ(StoredParamCount(graph, 0, last, kGpt2Small), 124'439'808);
  // ...a stage of the head without the embedding, its own copy.
  EXPECT_EQ(StoredParamCount(graph, last - 1, last, kGpt2Small), 7'087'872 + 2 * 768 + 50257 * 768);
}

TEST(ParamCount, TinyLayersMatchHandCounts) {
  const ModelDims d = model_test::TinyDims();  // V=11 maxT=5 C=8
  EXPECT_EQ(ParamCount(SpecOf(LayerKind::kEmbedding, d), d), 11 * 8 + 5 * 8);
  EXPECT_EQ(ParamCount(SpecOf(LayerKind::kBlock, d), d),
            (8 + 8) + (8 * 24 + 24) + (8 * 8 + 8) + (8 + 8) + (8 * 32 + 32) + (32 * 8 + 8));
  EXPECT_EQ(ParamCount(SpecOf(LayerKind::kMlpBlock, d), d), (8 + 8) + (8 * 32 + 32) + (32 * 8 + 8));
  EXPECT_EQ(ParamCount(SpecOf(LayerKind::kHead, d), d), 16);
}

TEST(Flops, TinyBlockCountsEveryGemmAndTheFullAttentionSquare) {
  const ModelDims d = model_test::TinyDims();  // C=8 NH=2 D=4
  const MicroBatchShape shape{2, 5, DType::kF32, false};
  const int64_t n = 10;
  const int64_t gemms = 2 * n * 8 * 24 + 2 * n * 8 * 8 + 2 * n * 8 * 32 + 2 * n * 32 * 8;
  const int64_t attention = 2 * (2 * 2 * 2 * 5 * 5 * 4);  // QK^T and PV: 2 B NH T T D each
  EXPECT_EQ(ForwardFlops(SpecOf(LayerKind::kBlock, d), d, shape), gemms + attention);
  EXPECT_EQ(BackwardFlops(SpecOf(LayerKind::kBlock, d), d, shape), 2 * (gemms + attention));
  EXPECT_EQ(ForwardFlops(SpecOf(LayerKind::kMlpBlock, d), d, shape),
            2 * n * 8 * 32 + 2 * n * 32 * 8);
  EXPECT_EQ(ForwardFlops(SpecOf(LayerKind::kHead, d), d, shape), 2 * n * 8 * 11);
  EXPECT_EQ(ForwardFlops(SpecOf(LayerKind::kEmbedding, d), d, shape), 0);
}

TEST(Flops, SelectiveRecomputeRedoesAttentionAndCFc) {
  const ModelDims d = model_test::TinyDims();
  MicroBatchShape shape{2, 5, DType::kF32, false};
  EXPECT_EQ(RecomputeFlops(SpecOf(LayerKind::kBlock, d), d, shape), 0);
  shape.selective_recompute = true;
  EXPECT_EQ(RecomputeFlops(SpecOf(LayerKind::kBlock, d), d, shape),
            2 * (2 * 2 * 2 * 5 * 5 * 4) + 2 * 10 * 8 * 32);
  EXPECT_EQ(RecomputeFlops(SpecOf(LayerKind::kMlpBlock, d), d, shape), 2 * 10 * 8 * 32);
  EXPECT_EQ(RecomputeFlops(SpecOf(LayerKind::kHead, d), d, shape), 0);
}

TEST(Flops, FlashAttentionBackwardRedoesQKTransposeSelectiveOrNot) {
  const ModelDims d = model_test::TinyDims();
  MicroBatchShape shape{2, 5, DType::kF32, false, /*flash_attention=*/true};
  const int64_t scores = 2 * 2 * 5 * 5 * 8;  // 2 B T T C
  EXPECT_EQ(RecomputeFlops(SpecOf(LayerKind::kBlock, d), d, shape), scores);
  shape.selective_recompute = true;  // then c_fc as well, but not PV
  EXPECT_EQ(RecomputeFlops(SpecOf(LayerKind::kBlock, d), d, shape), scores + 2 * 10 * 8 * 32);
  EXPECT_EQ(RecomputeFlops(SpecOf(LayerKind::kMlpBlock, d), d, shape), 2 * 10 * 8 * 32);
}

// Mistral's sliding window: each query's keys are W, not T (QK^T and PV 2 B NH T W D each); a
// window as long as the sequence changes nothing.
TEST(Flops, ASlidingWindowCountsWKeysPerQuery) {
  ModelDims llama = model_test::TinyDims();  // C=8 NH=2, T=5 here
  llama.family = ModelFamily::kLlama;
  ModelDims mistral = llama;
  mistral.family = ModelFamily::kMistral;
  mistral.sliding_window = 2;
  MicroBatchShape shape{2, 5, DType::kF32, false, /*flash_attention=*/true};
  const int64_t n = 10, c = 8;
  const auto forward = [&](const ModelDims& d) {
    return ForwardFlops(SpecOf(LayerKind::kBlock, d), d, shape);
  };
  const auto recompute = [&](const ModelDims& d) {
    return RecomputeFlops(SpecOf(LayerKind::kBlock, d), d, shape);
  };
  EXPECT_EQ(forward(llama) - forward(mistral), 4 * n * (5 - 2) * c);
  EXPECT_EQ(recompute(llama) - recompute(mistral), 2 * n * (5 - 2) * c);
  mistral.sliding_window = 5;
  EXPECT_EQ(forward(mistral), forward(llama));
}

TEST(Flops, Gpt2SmallModelFlopsPerTokenIs6NPlus12LTC) {
  const int64_t l = 12, c = 768, v = 50257, t = 1024;
  const int64_t gemm_params = 12 * l * c * c + v * c;
  EXPECT_EQ(ModelFlopsPerToken(GptGraph(kGpt2Small), kGpt2Small, t),
            static_cast<double>(6 * gemm_params + 12 * l * t * c));
}

TEST(CostModel, SequencesLongerThanTheContextAreRejected) {
  const ModelDims d = model_test::TinyDims();
  EXPECT_THROW(ForwardFlops(SpecOf(LayerKind::kBlock, d), d, {1, 6, DType::kF32, false}), Error);
}

TEST(CostModel, RangeSumsAddTheLayers) {
  const ModelDims d = model_test::TinyDims();
  const std::vector<LayerSpec> graph = GptGraph(d);
  const MicroBatchShape shape{2, 5, DType::kBF16, true};
  int64_t flops = 0;
  for (const LayerSpec& spec : graph) flops += ForwardFlops(spec, d, shape);
  EXPECT_EQ(ForwardFlops(graph, 0, 3, d, shape), flops);
  EXPECT_THROW(ForwardFlops(graph, 2, 4, d, shape), Error);
}

}  // namespace
}  // namespace baton
