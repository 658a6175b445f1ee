// A block is its sublayers (model/sublayer.h): its parameters, FLOPs and collectives are theirs,
// in order.
#include "model/sublayer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/block.h"
#include "model/cost.h"
#include "model/graph.h"
#include "model/test_util.h"

namespace baton {
namespace {

using model_test::CpuFixture;

ModelDims LlamaDims() {
  ModelDims dims{11, 6, 2, 4, 16};
  dims.family = ModelFamily::kLlama;
  dims.num_kv_heads = 2;
  dims.mlp_hidden = 12;
  return dims;
}

// Experts in every block of `dims`: 4 of width 6, two per token, and one shared of width 5.
ModelDims MoeDimsOf(ModelDims dims) {
  dims.moe.num_experts = 4;
  dims.moe.top_k = 2;
  dims.moe.expert_hidden = 6;
  dims.moe.shared_experts = 1;
  dims.moe.shared_hidden = 5;
  dims.moe.shared_gate = true;
  return dims;
}

// GPT-2, Llama, a low-rank GPT-2, one whose blocks share their MLP in pairs, Llama with experts,
// and Llama with a head size apart from the width (4 heads of 6 for a width of 16).
std::vector<ModelDims> Models() {
  const ModelDims gpt = model_test::TinyDims();
  ModelDims low_rank = gpt;
  low_rank.low_rank_attn = 2;
  low_rank.low_rank_mlp = 3;
  ModelDims shared = gpt;
  shared.num_layers = 4;
  shared.share_group = 2;
  shared.share_mlp = true;
  ModelDims head_size = LlamaDims();
  head_size.head_size = 6;
  return {gpt, LlamaDims(), low_rank, shared, MoeDimsOf(LlamaDims()), head_size};
}

std::vector<std::string> Names(LayerKind kind, const ModelDims& dims, int block_index = 0) {
  std::vector<std::string> names;
  for (const auto& sublayer : SublayersOf(kind, dims, block_index)) {
    names.emplace_back(sublayer->name());
  }
  return names;
}

TEST(SublayerTest, ABlockIsAttentionThenTheMlpAndAnMlpBlockTheMlpAlone) {
  const ModelDims dims = model_test::TinyDims();
  EXPECT_EQ(Names(LayerKind::kBlock, dims), (std::vector<std::string>{"attention", "mlp"}));
  EXPECT_EQ(Names(LayerKind::kMlpBlock, dims), (std::vector<std::string>{"mlp"}));
  EXPECT_TRUE(Names(LayerKind::kHead, dims).empty());
  EXPECT_TRUE(Names(LayerKind::kEmbedding, dims).empty());
  // Experts take the MLP's place in the blocks model.moe picks: after one dense block, every
  // second.
  ModelDims moe = MoeDimsOf(LlamaDims());
  moe.moe.first_dense = 1;
  moe.moe.every = 2;
  const std::vector<std::string> dense{"attention", "mlp"}, experts{"attention", "experts"};
  EXPECT_EQ(Names(LayerKind::kBlock, moe, 0), dense);
  EXPECT_EQ(Names(LayerKind::kBlock, moe, 1), experts);
  EXPECT_EQ(Names(LayerKind::kBlock, moe, 2), dense);
  EXPECT_EQ(Names(LayerKind::kBlock, moe, 3), experts);
  EXPECT_EQ(Names(LayerKind::kMlpBlock, moe, 3), (std::vector<std::string>{"experts"}));
}

// Block 1 (graph index 2, so the shared model's block takes block 0's MLP): its parameters are
// its sublayers' definitions, in order, named by their sources; the model's count of them is
// the sublayers' count.
TEST(SublayerTest, ABlocksParametersAreItsSublayersDefinitionsInOrder) {
  CpuFixture fx;
  for (const ModelDims& dims : Models()) {
    for (LayerKind kind : {LayerKind::kBlock, LayerKind::kMlpBlock}) {
      BlockLayer block(kind, *fx.backend, dims, DType::kF32, DType::kF32, 7, 2, 1);
      std::vector<ParamDef> defs;
      int64_t sublayer_count = 0;
      for (const auto& sublayer : SublayersOf(kind, dims, 1)) {
        sublayer->AppendDefs(defs, SourceOf(dims, sublayer->shared(), 2, 1));
        sublayer_count += ParamCount(*sublayer);
      }
      const std::vector<Param*> params = block.params();
      ASSERT_EQ(params.size(), defs.size()) << ToString(dims);
      int64_t held = 0;
      for (size_t i = 0; i < defs.size(); ++i) {
        EXPECT_EQ(params[i]->name, defs[i].name) << ToString(dims);
        EXPECT_EQ(params[i]->value.shape(), defs[i].shape) << defs[i].name;
        EXPECT_EQ(params[i]->tied, defs[i].source_layer >= 0) << defs[i].name;
        held += params[i]->value.numel();
      }
      EXPECT_EQ(held, sublayer_count) << ToString(dims);
      EXPECT_EQ(StoredParamCount(LayerSpec{kind, 2, 1, ""}, dims), sublayer_count);
    }
  }
  EXPECT_EQ(SourceOf(Models()[3], true, 2, 1).prefix, "h.0.");
  EXPECT_EQ(SourceOf(Models()[3], false, 2, 1).prefix, "h.1.");
}

// The cost model's block FLOPs are the sublayers' sum, and for a dense GPT-2 block the closed
// forms of docs/model.md: 2N(3C^2 + C^2 + 4C^2 + 4C^2) + 4BT^2C forward; backward redoes QK^T
// under flash attention, and c_fc plus QK^T and PV under selective recompute of materialized
// attention.
TEST(SublayerTest, ABlocksFlopsAreItsSublayersAndGpt2sClosedForms) {
  const ModelDims dims = model_test::TinyDims();
  const int64_t b = 3, t = 5, n = b * t, c = dims.width;
  MicroBatchShape flash{b, t, DType::kF32, /*selective_recompute=*/false, /*flash=*/true};
  MicroBatchShape selective{b, t, DType::kF32, /*selective_recompute=*/true, /*flash=*/false};
  const LayerSpec block{LayerKind::kBlock, 1, 0, ""};
  EXPECT_EQ(ForwardFlops(block, dims, flash), 2 * n * 12 * c * c + 4 * b * t * t * c);
  EXPECT_EQ(RecomputeFlops(block, dims, flash), 2 * b * t * t * c);
  EXPECT_EQ(RecomputeFlops(block, dims, selective), 2 * n * 4 * c * c + 4 * b * t * t * c);
  for (const ModelDims& model : Models()) {
    for (const MicroBatchShape& shape : {flash, selective}) {
      int64_t forward = 0, recompute = 0;
      for (const auto& sublayer : SublayersOf(LayerKind::kBlock, model, 0)) {
        forward += sublayer->ForwardFlops(shape);
        recompute += sublayer->RecomputeFlops(shape);
      }
      EXPECT_EQ(ForwardFlops(block, model, shape), forward) << ToString(model);
      EXPECT_EQ(RecomputeFlops(block, model, shape), recompute) << ToString(model);
    }
  }
}

// Tensor parallelism: each sublayer says why its own split fails; a graph splits when all do.
TEST(SublayerTest, EachSublayerChecksItsOwnTensorSplit) {
  ModelDims dims = LlamaDims();  // 4 query heads, 2 key/value heads, 12 hidden units
  const auto sublayers = SublayersOf(LayerKind::kBlock, dims, 0);
  EXPECT_EQ(sublayers[0]->TensorSplitProblem(2), "");
  EXPECT_EQ(sublayers[0]->TensorSplitProblem(4),
            "4 query and 2 key/value heads do not split over 4 tensor ranks");
  EXPECT_EQ(sublayers[1]->TensorSplitProblem(4), "");
  EXPECT_EQ(sublayers[1]->TensorSplitProblem(5),
            "the MLP's 12 hidden units do not split over 5 tensor ranks");
  const std::vector<LayerSpec> graph = GptGraph(dims);
  EXPECT_TRUE(BlocksSplitOver(graph, dims, 2));
  EXPECT_FALSE(BlocksSplitOver(graph, dims, 4));
  EXPECT_TRUE(BlocksSplitOver(MlpGraph(dims), dims, 4));  // no attention: the 12 hidden units
  dims.num_kv_heads = 4;
  EXPECT_TRUE(BlocksSplitOver(graph, dims, 4));
}

}  // namespace
}  // namespace baton
