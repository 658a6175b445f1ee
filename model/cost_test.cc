// The cost model against hand counts, GPT-2 124M, and what the layers actually book: params and
// grads in the ledger, stash bytes, outputs and workspace peaks, exactly.
#include "model/cost.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/block.h"
#include "model/head.h"
#include "model/test_util.h"

namespace baton {
namespace {

using model_test::CpuFixture;

const ModelDims kGpt2Small{/*vocab_size=*/50257, /*context=*/1024, /*num_layers=*/12,
                           /*num_heads=*/12, /*width=*/768};
const LayerKind kAllKinds[] = {LayerKind::kEmbedding, LayerKind::kBlock, LayerKind::kMlpBlock,
                               LayerKind::kHead};

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

TEST(Flops, Gpt2SmallModelFlopsPerTokenIs6NPlus12LTC) {
  const int64_t l = 12, c = 768, v = 50257, t = 1024;
  const int64_t gemm_params = 12 * l * c * c + v * c;
  EXPECT_EQ(ModelFlopsPerToken(GptGraph(kGpt2Small), kGpt2Small, t),
            static_cast<double>(6 * gemm_params + 12 * l * t * c));
}

TEST(CostModel, SequencesLongerThanTheContextAreRejected) {
  const ModelDims d = model_test::TinyDims();
  EXPECT_THROW(StashBytes(SpecOf(LayerKind::kBlock, d), d, {1, 6, DType::kF32, false}), Error);
}

// ---- against the ledger

TEST(LedgerAgreement, ParamsAndGradsBookedEqualTheAnalyticBytesExactly) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (bool mlp : {false, true}) {
      SCOPED_TRACE(fmt::format("{} {}", Name(dtype), mlp ? "mlp" : "gpt"));
      CpuFixture fx;
      const ModelDims dims = model_test::TinyDims();
      const std::vector<LayerSpec> graph = mlp ? MlpGraph(dims) : GptGraph(dims);
      std::vector<std::unique_ptr<Layer>> layers;
      for (const LayerSpec& spec : graph) {
        const int64_t params = fx.ledger.current(MemCategory::kParams);
        const int64_t grads = fx.ledger.current(MemCategory::kGrads);
        layers.push_back(BuildLayer(spec, dims, *fx.backend, dtype, dtype, 1));
        EXPECT_EQ(fx.ledger.current(MemCategory::kParams) - params, ParamBytes(spec, dims, dtype));
        EXPECT_EQ(fx.ledger.current(MemCategory::kGrads) - grads, GradBytes(spec, dims));
      }
      const int last = static_cast<int>(graph.size()) - 1;
      EXPECT_EQ(fx.ledger.current(MemCategory::kParams) - ParamBytes(graph, 0, last, dims, dtype),
                int64_t{11} * 8 * static_cast<int64_t>(SizeOf(dtype)));  // the untied copy
      TieEmbedding(*layers.front(), *layers.back());
      EXPECT_EQ(fx.ledger.current(MemCategory::kParams), ParamBytes(graph, 0, last, dims, dtype));
      EXPECT_EQ(fx.ledger.current(MemCategory::kGrads), GradBytes(graph, 0, last, dims));
      EXPECT_EQ(fx.ledger.current(MemCategory::kWorkspace), 0);
      EXPECT_EQ(fx.ledger.current(MemCategory::kActivations), 0);
    }
  }
}

TEST(LedgerAgreement, AGpt2SmallBlockBooksItsAnalyticBytes) {
  CpuFixture fx;
  BlockLayer block(*fx.backend, kGpt2Small, DType::kF32, DType::kF32, 1, 1, 0);
  const LayerSpec spec = GptGraph(kGpt2Small)[1];
  EXPECT_EQ(fx.ledger.current(MemCategory::kParams), 7'087'872 * 4);
  EXPECT_EQ(fx.ledger.current(MemCategory::kParams), ParamBytes(spec, kGpt2Small, DType::kF32));
  EXPECT_EQ(fx.ledger.current(MemCategory::kGrads), GradBytes(spec, kGpt2Small));
}

// A layer with its micro-batch (B=2, T=3 < context 5, so T and the context are told apart), on
// a backend that books the kernels' own scratch apart from what the layer allocates.
struct Measured {
  model_test::SplitLedgerBackend backend;
  MemoryLedger& ledger = backend.layer_ledger;
  ModelDims dims = model_test::TinyDims();
  MicroBatchShape shape;
  LayerSpec spec;
  std::unique_ptr<Layer> layer;
  MicroBatch batch;
  Tensor x;
  Tensor dy;

  Measured(LayerKind kind, DType dtype, bool selective) {
    shape = {2, 3, dtype, selective};
    spec = SpecOf(kind, dims);
    layer = BuildLayer(spec, dims, backend, dtype, dtype, 1);
    layer->set_selective_recompute(selective);
    Rng rng(4);
    batch = model_test::RandomBatch(backend.allocator(), 2, 3, dims.vocab_size, rng);
    x = model_test::RandomActivation(backend.allocator(), {2, 3, dims.width}, dtype, rng);
    if (kind != LayerKind::kHead) {
      dy = model_test::RandomActivation(backend.allocator(), {2, 3, dims.width}, dtype, rng);
    }
  }
};

TEST(LedgerAgreement, StashAndOutputBytesArePredictedExactly) {
  for (LayerKind kind : kAllKinds) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (bool selective : {false, true}) {
        SCOPED_TRACE(fmt::format("{} {} selective={}", Name(kind), Name(dtype), selective));
        Measured m(kind, dtype, selective);
        Stash stash;
        const int64_t before = m.ledger.current(MemCategory::kActivations);
        const Tensor y = m.layer->Forward(m.x, m.batch, stash);
        EXPECT_EQ(stash.bytes(), StashBytes(m.spec, m.dims, m.shape));
        EXPECT_EQ(static_cast<int64_t>(y.nbytes()), OutputBytes(m.spec, m.dims, m.shape));
        // The stash is real memory: all of it is newly booked but the input it keeps a handle to.
        const int64_t input = kind == LayerKind::kEmbedding ? 0 : m.x.nbytes();
        EXPECT_EQ(m.ledger.current(MemCategory::kActivations) - before,
                  stash.bytes() - input + static_cast<int64_t>(y.nbytes()));
        m.layer->BackwardInput(m.dy, m.batch, stash, BackwardArgs{});
        EXPECT_EQ(stash.bytes(), WeightStashBytes(m.spec, m.dims, m.shape));
        m.layer->BackwardWeight(stash);
      }
    }
  }
}

TEST(LedgerAgreement, WorkspacePeaksTheLayersBookArePredictedExactly) {
  for (LayerKind kind : kAllKinds) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (bool selective : {false, true}) {
        SCOPED_TRACE(fmt::format("{} {} selective={}", Name(kind), Name(dtype), selective));
        Measured m(kind, dtype, selective);
        const WorkspacePeaks expected = WorkspaceBytes(m.spec, m.dims, m.shape);
        ASSERT_EQ(m.ledger.current(MemCategory::kWorkspace), 0);
        Stash stash;
        m.ledger.ResetPeaks();
        m.layer->Forward(m.x, m.batch, stash);
        EXPECT_EQ(m.ledger.peak(MemCategory::kWorkspace), expected.forward);
        m.ledger.ResetPeaks();
        m.layer->Backward(m.dy, m.batch, stash, BackwardArgs{});
        EXPECT_EQ(m.ledger.peak(MemCategory::kWorkspace), expected.backward);
        m.layer->Forward(m.x, m.batch, stash);
        m.ledger.ResetPeaks();
        m.layer->BackwardInput(m.dy, m.batch, stash, BackwardArgs{});
        EXPECT_EQ(m.ledger.peak(MemCategory::kWorkspace), expected.backward_input);
        m.ledger.ResetPeaks();
        m.layer->BackwardWeight(stash);
        EXPECT_EQ(m.ledger.peak(MemCategory::kWorkspace), expected.backward_weight);
        EXPECT_EQ(m.ledger.current(MemCategory::kWorkspace), 0);
        EXPECT_EQ(m.backend.kernel_ledger.current(MemCategory::kWorkspace), 0);
      }
    }
  }
}

TEST(CostModel, RangeSumsAddTheLayers) {
  const ModelDims d = model_test::TinyDims();
  const std::vector<LayerSpec> graph = GptGraph(d);
  const MicroBatchShape shape{2, 5, DType::kBF16, true};
  int64_t stash = 0;
  int64_t flops = 0;
  for (const LayerSpec& spec : graph) {
    stash += StashBytes(spec, d, shape);
    flops += ForwardFlops(spec, d, shape);
  }
  EXPECT_EQ(StashBytes(graph, 0, 3, d, shape), stash);
  EXPECT_EQ(ForwardFlops(graph, 0, 3, d, shape), flops);
  // Without the embedding in range, the head's copy of wte is booked in full.
  EXPECT_EQ(ParamBytes(graph, 1, 3, d, DType::kF32),
            (2 * ParamCount(graph[1], d) + StoredParamCount(graph[3], d)) * 4);
  EXPECT_THROW(StashBytes(graph, 2, 4, d, shape), Error);
}

}  // namespace
}  // namespace baton
