// The layer graph: an ordered list of layers, which a pipeline cuts into contiguous stages, and
// the presets that produce it (gpt, mlp, custom).
//
// A graph is exactly one embedding first, then the blocks, then exactly one head. Blocks are
// numbered in order (block_index) across both kinds, which names their parameters "h.{i}.*".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/layer_kind.h"
#include "core/dtype.h"
#include "kernels/backend.h"
#include "model/dims.h"
#include "model/init.h"
#include "model/layer.h"

namespace baton {

struct LayerSpec {
  LayerKind kind = LayerKind::kBlock;
  int index = 0;         // position in the graph
  int block_index = -1;  // i of "h.{i}" for blocks; -1 for the embedding and the head
  std::string name;      // the layer's name(): "embedding", "block.3", "mlp_block.3", "head"
  bool operator==(const LayerSpec&) const = default;
};

// A contiguous run of the graph's layers: a pipeline stage's chunk, a virtual stage of a cut.
struct LayerRange {
  int first = 0;  // layer indices in the graph, inclusive
  int last = 0;
  int size() const { return last - first + 1; }
  bool operator==(const LayerRange&) const = default;
};

// A parameter of which several layers hold a copy, and those layers (graph indices, ascending).
struct TiedParameter {
  std::string name;
  std::vector<int> layers;
  bool operator==(const TiedParameter&) const = default;
};
// The graph's tied parameters: the head's "wte.weight" copies the embedding's (model/head.h);
// with model.share, every shared parameter of a share group of two or more blocks, held by the
// group's blocks (model/block.h).
std::vector<TiedParameter> TiedParameters(const std::vector<LayerSpec>& graph,
                                          const ModelDims& dims);

// The share groups of the graph's blocks (model.share) with two or more blocks: each the graph
// indices of its blocks, ascending. Empty without sharing.
std::vector<std::vector<int>> ShareGroups(const std::vector<LayerSpec>& graph,
                                          const ModelDims& dims);

// embedding, num_layers x block, head: GPT-2.
std::vector<LayerSpec> GptGraph(const ModelDims& dims);
// embedding, num_layers x mlp_block, head.
std::vector<LayerSpec> MlpGraph(const ModelDims& dims);
// Layers by kind name, validated: one embedding first, one head last, blocks (block or
// mlp_block) in between, as many as dims.num_layers.
std::vector<LayerSpec> CustomGraph(const ModelDims& dims, const std::vector<std::string>& kinds);

// Builds one layer with its parameters initialised (see model/init.h for the rule). The
// result's name() is spec.name. `local` finds the shared originals this process already holds
// (model.share): a block's shared parameters then share their storage (init.h's NewParams).
// `tensor`: the stage's tensor-parallel group (parallel.tensor T > 1), or null: the layer holds
// and computes this rank's part (model/tensor_parallel.h). `experts`: the expert group an MoE
// block's experts split over (model/expert_parallel.h), or null: all experts here.
std::unique_ptr<Layer> BuildLayer(const LayerSpec& spec, const ModelDims& dims, Backend& backend,
                                  DType param_dtype, DType act_dtype, uint64_t seed,
                                  const LocalParams& local = nullptr, TensorGroup* tensor = nullptr,
                                  ExpertGroup* experts = nullptr);

// For tests: while one is alive, BuildLayer passes every layer it builds through `wrap`, which
// returns the layer to use (e.g. one that delegates to it but allocates differently). One at a
// time, process-wide; not thread-safe against BuildLayer calls running while it is made or goes.
class ScopedLayerWrapperForTesting {
 public:
  using Wrap = std::function<std::unique_ptr<Layer>(std::unique_ptr<Layer>, Backend&)>;
  explicit ScopedLayerWrapperForTesting(Wrap wrap);
  ~ScopedLayerWrapperForTesting();
  ScopedLayerWrapperForTesting(const ScopedLayerWrapperForTesting&) = delete;
  ScopedLayerWrapperForTesting& operator=(const ScopedLayerWrapperForTesting&) = delete;
};

}  // namespace baton
