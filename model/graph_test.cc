// The layer graph: presets, custom graphs and their validation, LayerKind names, BuildLayer.
#include "model/graph.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/test_util.h"

namespace baton {
namespace {

TEST(Graph, GptPresetIsEmbeddingThenLBlocksThenHead) {
  const ModelDims dims = model_test::TinyDims();
  const std::vector<LayerSpec> graph = GptGraph(dims);
  ASSERT_EQ(graph.size(), 4u);
  EXPECT_EQ(graph[0], (LayerSpec{LayerKind::kEmbedding, 0, -1, "embedding"}));
  EXPECT_EQ(graph[1], (LayerSpec{LayerKind::kBlock, 1, 0, "block.0"}));
  EXPECT_EQ(graph[2], (LayerSpec{LayerKind::kBlock, 2, 1, "block.1"}));
  EXPECT_EQ(graph[3], (LayerSpec{LayerKind::kHead, 3, -1, "head"}));
}

TEST(Graph, MlpPresetUsesMlpBlocks) {
  const std::vector<LayerSpec> graph = MlpGraph(model_test::TinyDims());
  ASSERT_EQ(graph.size(), 4u);
  EXPECT_EQ(graph[1], (LayerSpec{LayerKind::kMlpBlock, 1, 0, "mlp_block.0"}));
  EXPECT_EQ(graph[2].name, "mlp_block.1");
}

TEST(Graph, CustomGraphNumbersBlocksOfBothKindsInOrder) {
  ModelDims dims = model_test::TinyDims();
  dims.num_layers = 3;
  const std::vector<LayerSpec> graph =
      CustomGraph(dims, {"embedding", "block", "mlp_block", "block", "head"});
  ASSERT_EQ(graph.size(), 5u);
  EXPECT_EQ(graph[1].name, "block.0");
  EXPECT_EQ(graph[2], (LayerSpec{LayerKind::kMlpBlock, 2, 1, "mlp_block.1"}));
  EXPECT_EQ(graph[3].name, "block.2");
  EXPECT_EQ(graph[4].index, 4);
}

void ExpectGraphError(const std::vector<std::string>& kinds, const std::string& words) {
  try {
    CustomGraph(model_test::TinyDims(), kinds);
    ADD_FAILURE() << "no error for " << kinds.size() << " layers; expected: " << words;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(Graph, CustomGraphErrorsSayWhatIsWrong) {
  ExpectGraphError({}, "needs an embedding and a head");
  ExpectGraphError({"block", "block", "head"}, "the first layer must be the embedding");
  ExpectGraphError({"embedding", "block", "block"}, "the last layer must be the head");
  ExpectGraphError({"embedding", "embedding", "block", "block", "head"}, "layer 1 is an embedding");
  ExpectGraphError({"embedding", "block", "head", "block", "head"}, "layer 2 is a head");
  ExpectGraphError({"embedding", "block", "head"}, "has 1 blocks but the model's num_layers is 2");
  ExpectGraphError({"embedding", "block", "attention", "head"}, "unknown layer kind 'attention'");
}

TEST(Graph, LayerKindNamesRoundTrip) {
  for (LayerKind kind :
       {LayerKind::kEmbedding, LayerKind::kBlock, LayerKind::kMlpBlock, LayerKind::kHead}) {
    EXPECT_EQ(ParseLayerKind(Name(kind)), kind);
  }
  EXPECT_EQ(Name(LayerKind::kMlpBlock), "mlp_block");
  EXPECT_THROW(ParseLayerKind("Block"), Error);
}

TEST(Graph, InvalidDimsAreRejected) {
  ModelDims dims = model_test::TinyDims();
  dims.num_heads = 3;  // 8 is not a multiple of 3
  EXPECT_THROW(GptGraph(dims), Error);
  dims = model_test::TinyDims();
  dims.vocab_size = 0;
  EXPECT_THROW(MlpGraph(dims), Error);
}

TEST(Graph, BuildLayerMakesTheKindTheSpecNames) {
  model_test::CpuFixture fx;
  const ModelDims dims = model_test::TinyDims();
  const size_t expected_params[] = {2, 12, 12, 3};
  const std::vector<LayerSpec> graph = GptGraph(dims);
  for (size_t i = 0; i < graph.size(); ++i) {
    auto layer = BuildLayer(graph[i], dims, *fx.backend, DType::kF32, DType::kBF16, 1);
    EXPECT_EQ(layer->name(), graph[i].name);
    EXPECT_EQ(layer->params().size(), expected_params[i]);
  }
  EXPECT_THROW(BuildLayer(graph[1], dims, *fx.backend, DType::kF32, DType::kI32, 1), Error);
  EXPECT_THROW(BuildLayer(graph[1], dims, *fx.backend, DType::kI32, DType::kF32, 1), Error);
}

}  // namespace
}  // namespace baton
