// Layer graphs, presets and layer construction (see graph.h).
#include "model/graph.h"

#include <fmt/format.h>

#include "core/error.h"
#include "model/block.h"
#include "model/embedding.h"
#include "model/head.h"

namespace baton {
namespace {

// Numbers the kinds into specs and checks the graph's shape.
std::vector<LayerSpec> MakeGraph(const ModelDims& dims, const std::vector<LayerKind>& kinds) {
  Validate(dims);
  BATON_CHECK(kinds.size() >= 2, "a layer graph needs an embedding and a head, got {} layers",
              kinds.size());
  std::vector<LayerSpec> graph;
  int blocks = 0;
  for (size_t i = 0; i < kinds.size(); ++i) {
    const LayerKind kind = kinds[i];
    const bool first = i == 0;
    const bool last = i + 1 == kinds.size();
    LayerSpec spec{kind, static_cast<int>(i), -1, std::string(Name(kind))};
    switch (kind) {
      case LayerKind::kEmbedding:
        BATON_CHECK(first, "layer {} is an embedding: the embedding must be the first layer, once",
                    i);
        break;
      case LayerKind::kHead:
        BATON_CHECK(last, "layer {} is a head: the head must be the last layer, once", i);
        break;
      case LayerKind::kBlock:
      case LayerKind::kMlpBlock:
        spec.block_index = blocks++;
        spec.name = fmt::format("{}.{}", Name(kind), spec.block_index);
        break;
    }
    graph.push_back(std::move(spec));
  }
  BATON_CHECK(graph.front().kind == LayerKind::kEmbedding,
              "the first layer must be the embedding, got {}", graph.front().name);
  BATON_CHECK(graph.back().kind == LayerKind::kHead, "the last layer must be the head, got {}",
              graph.back().name);
  BATON_CHECK(blocks == dims.num_layers, "the graph has {} blocks but the model's num_layers is {}",
              blocks, dims.num_layers);
  return graph;
}

std::vector<LayerSpec> Preset(const ModelDims& dims, LayerKind block) {
  Validate(dims);
  std::vector<LayerKind> kinds = {LayerKind::kEmbedding};
  kinds.insert(kinds.end(), static_cast<size_t>(dims.num_layers), block);
  kinds.push_back(LayerKind::kHead);
  return MakeGraph(dims, kinds);
}

}  // namespace

std::vector<LayerSpec> GptGraph(const ModelDims& dims) { return Preset(dims, LayerKind::kBlock); }

std::vector<LayerSpec> MlpGraph(const ModelDims& dims) {
  return Preset(dims, LayerKind::kMlpBlock);
}

std::vector<LayerSpec> CustomGraph(const ModelDims& dims, const std::vector<std::string>& kinds) {
  std::vector<LayerKind> parsed;
  for (const std::string& kind : kinds) parsed.push_back(ParseLayerKind(kind));
  return MakeGraph(dims, parsed);
}

namespace {
ScopedLayerWrapperForTesting::Wrap* layer_wrapper = nullptr;

std::unique_ptr<Layer> BuildUnwrapped(const LayerSpec& spec, const ModelDims& dims,
                                      Backend& backend, DType param_dtype, DType act_dtype,
                                      uint64_t seed, const LocalParams& local, TensorGroup* tensor,
                                      ExpertGroup* experts) {
  BATON_CHECK(IsFloating(act_dtype), "the activation dtype must be f32, bf16 or f16, got {}",
              Name(act_dtype));
  switch (spec.kind) {
    case LayerKind::kEmbedding:
      return std::make_unique<EmbeddingLayer>(backend, dims, param_dtype, act_dtype, seed,
                                              spec.index, tensor);
    case LayerKind::kBlock:
    case LayerKind::kMlpBlock:
      return std::make_unique<BlockLayer>(spec.kind, backend, dims, param_dtype, act_dtype, seed,
                                          spec.index, spec.block_index, local, tensor, experts);
    case LayerKind::kHead:
      return std::make_unique<HeadLayer>(backend, dims, param_dtype, act_dtype, seed, spec.index,
                                         tensor);
  }
  BATON_FAIL("unknown layer kind {}", static_cast<int>(spec.kind));
}

}  // namespace

std::unique_ptr<Layer> BuildLayer(const LayerSpec& spec, const ModelDims& dims, Backend& backend,
                                  DType param_dtype, DType act_dtype, uint64_t seed,
                                  const LocalParams& local, TensorGroup* tensor,
                                  ExpertGroup* experts) {
  std::unique_ptr<Layer> layer =
      BuildUnwrapped(spec, dims, backend, param_dtype, act_dtype, seed, local, tensor, experts);
  if (layer_wrapper != nullptr) layer = (*layer_wrapper)(std::move(layer), backend);
  return layer;
}

ScopedLayerWrapperForTesting::ScopedLayerWrapperForTesting(Wrap wrap) {
  BATON_CHECK(layer_wrapper == nullptr, "a layer wrapper is already installed");
  layer_wrapper = new Wrap(std::move(wrap));
}

ScopedLayerWrapperForTesting::~ScopedLayerWrapperForTesting() {
  delete layer_wrapper;
  layer_wrapper = nullptr;
}

std::vector<std::vector<int>> ShareGroups(const std::vector<LayerSpec>& graph,
                                          const ModelDims& dims) {
  std::vector<std::vector<int>> groups;
  if (!dims.shares()) return groups;
  int leader = -1;
  for (const LayerSpec& spec : graph) {
    if (spec.block_index < 0) continue;
    const int l = dims.share_leader(spec.block_index);
    if (l != leader) {
      groups.emplace_back();
      leader = l;
    }
    groups.back().push_back(spec.index);
  }
  std::erase_if(groups, [](const std::vector<int>& g) { return g.size() < 2; });
  return groups;
}

std::vector<TiedParameter> TiedParameters(const std::vector<LayerSpec>& graph,
                                          const ModelDims& dims) {
  std::vector<TiedParameter> tied;
  TiedParameter wte{"wte.weight", {}};
  for (const LayerSpec& spec : graph) {
    if (spec.kind == LayerKind::kEmbedding || spec.kind == LayerKind::kHead) {
      wte.layers.push_back(spec.index);
    }
  }
  if (dims.tie_embeddings && wte.layers.size() >= 2) tied.push_back(std::move(wte));
  for (const std::vector<int>& group : ShareGroups(graph, dims)) {
    // The leader's parameters that its group's copies take.
    const LayerSpec& copy = graph[static_cast<size_t>(group[1])];
    for (const std::string& name : SharedParamNames(copy.kind, dims, copy.index, copy.block_index))
      tied.push_back({name, group});
  }
  return tied;
}

}  // namespace baton
