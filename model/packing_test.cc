// Packed documents, the reference check (docs/data.md, "Packed documents"): a packed row's loss,
// summed over its counted targets, equals the sum of its documents' losses computed separately
// (each document alone as a row of its own length, positions from 0), and so do the gradients of
// those sums; for flash and materialized attention, fp32.
#include "data/packing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "model/graph.h"
#include "model/head.h"
#include "model/test_util.h"

namespace baton {
namespace {

using model_test::CpuFixture;

constexpr int kVocab = 11;
constexpr int32_t kSeparator = 10;
// 72 positions: more than one flash query block (64), so the blocking is crossed too.
constexpr int kSeq = 72;

struct TinyGpt {
  CpuFixture fx;
  ModelDims dims{kVocab, 80, 2, 2, 8};
  std::vector<std::unique_ptr<Layer>> layers;

  explicit TinyGpt(bool flash) {
    for (const LayerSpec& spec : GptGraph(dims)) {
      layers.push_back(BuildLayer(spec, dims, *fx.backend, DType::kF32, DType::kF32, 7));
    }
    TieEmbedding(*layers.front(), *layers.back());
    Rng rng(3);
    for (auto& layer : layers) {
      model_test::RandomizeParams(*layer, rng, 0.3f);
      layer->set_flash_attention(flash);
    }
  }

  // Forward and backward of one micro-batch with d(loss)/d(this loss) = scale; returns the loss.
  float Step(const MicroBatch& batch, float scale) {
    std::vector<Stash> stashes(layers.size());
    Tensor h;
    for (size_t i = 0; i < layers.size(); ++i) h = layers[i]->Forward(h, batch, stashes[i]);
    const float loss = h.data<float>()[0];
    Tensor dy;
    for (size_t i = layers.size(); i-- > 0;) {
      dy = layers[i]->Backward(dy, batch, stashes[i], BackwardArgs{scale});
    }
    return loss;
  }

  std::vector<std::vector<float>> Grads() {
    std::vector<std::vector<float>> out;
    for (auto& layer : layers) {
      for (Param* p : layer->params()) {
        const float* g = p->grad.data<float>();
        out.emplace_back(g, g + p->grad.numel());
      }
    }
    return out;
  }
  void ZeroGrads() {
    for (auto& layer : layers) model_test::ZeroGrads(*fx.backend, *layer);
  }
};

Tensor Ids(Allocator& allocator, const std::vector<int32_t>& ids) {
  Tensor t = Tensor::Empty(allocator, {1, static_cast<int64_t>(ids.size())}, DType::kI32,
                           MemCategory::kActivations);
  std::copy(ids.begin(), ids.end(), t.data<int32_t>());
  return t;
}

void ExpectPackedRowEqualsItsDocuments(bool flash) {
  Rng rng(17);
  std::vector<int32_t> tokens(kSeq), targets(kSeq);
  for (int t = 0; t < kSeq; ++t) tokens[t] = static_cast<int32_t>(rng.NextBelow(kSeparator));
  // Documents: [0, 9], [10, 30], [31] (a lone separator), [32, 70], [71] (cut by the window).
  for (int t : {9, 30, 31, 70}) tokens[t] = kSeparator;
  for (int t = 0; t + 1 < kSeq; ++t) targets[t] = tokens[t + 1];
  targets[kSeq - 1] = 4;  // the stream's next token
  std::vector<int32_t> starts(kSeq);
  std::vector<int32_t> packed_targets = targets;
  PackRows(tokens.data(), 1, kSeq, kSeparator, kIgnoreTarget, starts.data(), packed_targets.data());
  const int64_t counted = std::count_if(packed_targets.begin(), packed_targets.end(),
                                        [](int32_t id) { return id != kIgnoreTarget; });
  ASSERT_EQ(counted, kSeq - 4);

  TinyGpt packed_model(flash);
  Allocator& allocator = packed_model.fx.allocator();
  MicroBatch packed;
  packed.tokens = Ids(allocator, tokens);
  packed.targets = Ids(allocator, packed_targets);
  packed.segment_starts = Ids(allocator, starts);
  // Scale by the count: the gradient of the row's summed loss.
  const float packed_mean = packed_model.Step(packed, static_cast<float>(counted));
  const std::vector<std::vector<float>> packed_grads = packed_model.Grads();

  // Each document alone: its positions whose target is counted (all but a final separator's),
  // an unpacked row of that length.
  TinyGpt alone_model(flash);
  double sum = 0.0;
  int documents = 0;
  for (int s = 0; s < kSeq;) {
    int e = s;
    while (e + 1 < kSeq && starts[e + 1] == s) ++e;
    const int n = tokens[e] == kSeparator ? e - s : e - s + 1;
    if (n > 0) {
      MicroBatch doc;
      doc.tokens = Ids(allocator, {tokens.begin() + s, tokens.begin() + s + n});
      doc.targets = Ids(allocator, {targets.begin() + s, targets.begin() + s + n});
      sum += static_cast<double>(alone_model.Step(doc, static_cast<float>(n))) * n;
      ++documents;
    }
    s = e + 1;
  }
  EXPECT_EQ(documents, 4);
  EXPECT_NEAR(packed_mean, sum / static_cast<double>(counted), 1e-6);

  const std::vector<std::vector<float>> alone_grads = alone_model.Grads();
  ASSERT_EQ(packed_grads.size(), alone_grads.size());
  for (size_t p = 0; p < packed_grads.size(); ++p) {
    for (size_t i = 0; i < packed_grads[p].size(); ++i) {
      ASSERT_NEAR(packed_grads[p][i], alone_grads[p][i],
                  1e-5 * (1.0 + std::fabs(alone_grads[p][i])))
          << "parameter " << p << " element " << i;
    }
  }
}

TEST(PackedDocuments, FlashRowLossAndGradientsEqualTheSumOfItsDocumentsAlone) {
  ExpectPackedRowEqualsItsDocuments(/*flash=*/true);
}

TEST(PackedDocuments, MaterializedRowLossAndGradientsEqualTheSumOfItsDocumentsAlone) {
  ExpectPackedRowEqualsItsDocuments(/*flash=*/false);
}

TEST(PackedDocuments, RowWithoutSeparatorIsBitIdenticalToUnpacked) {
  TinyGpt model(true);
  Allocator& allocator = model.fx.allocator();
  Rng rng(5);
  const MicroBatch plain = model_test::RandomBatch(allocator, 2, kSeq, kSeparator, rng);
  MicroBatch packed = plain;
  packed.segment_starts =
      Tensor::Empty(allocator, {2, kSeq}, DType::kI32, MemCategory::kActivations);
  std::fill_n(packed.segment_starts.data<int32_t>(), 2 * kSeq, 0);
  model.ZeroGrads();
  const float plain_loss = model.Step(plain, 1.0f);
  const auto plain_grads = model.Grads();
  model.ZeroGrads();
  const float packed_loss = model.Step(packed, 1.0f);
  EXPECT_EQ(plain_loss, packed_loss);
  EXPECT_EQ(plain_grads, model.Grads());
}

}  // namespace
}  // namespace baton
