// The layers one pipeline stage owns: one contiguous range of the layer graph per model chunk.
//
// Rank r of p holds chunks c = 0..v-1, chunk c being virtual stage c*p + r (scheduler/action.h).
// Only those layers are built (their parameters initialised exactly as a single-process run
// would). When the graph's embedding and head both live here, the head's tied "wte.weight"
// shares the embedding's storage; their gradients stay separate until CombineTiedGradients().
// A share group's blocks (model.share) built here hold the first one built's shared parameters,
// value and gradient (model/init.h's LocalParams): a stage holds each group's set once.
//
// Owned by the rank's Trainer (its engine and optimizer hold references); not thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "model/dims.h"
#include "model/graph.h"
#include "model/layer.h"
#include "scheduler/action.h"

namespace baton {

struct Chunk {
  int virtual_stage = 0;
  LayerRange range;
  std::vector<std::unique_ptr<Layer>> layers;  // layers[i] is graph layer range.first + i
};

class StageModel {
 public:
  // chunk_ranges[c] is the layer range of chunk c (virtual stage VirtualStage(stage, c,
  // num_stages, layout): scheduler/action.h). With
  // `int8_weights` every layer is made an INT8 inference layer as soon as it is built
  // (model/int8_weights.h): weight matrices in INT8, no gradients. With `inference` (implied by
  // int8_weights) each layer drops its gradients as soon as it is built. `tensor`: the stage's
  // tensor-parallel group (parallel.tensor T > 1), which every layer keeps; null for T = 1.
  // `experts`: the stage's expert group (parallel.experts E > 1), which the MoE layers keep; null
  // for E = 1.
  // `on_built`, when given, is called with each layer (and its graph index) as soon as it is built,
  // before the next one is: ZeRO-2 and -3 release what the replica's shard does not hold there
  // (core/tensor.h's Storage::Release), so that the stage never holds it all at setup.
  using BuiltHook = std::function<void(int index, Layer& layer)>;
  StageModel(const std::vector<LayerSpec>& graph, const ModelDims& dims,
             const std::vector<LayerRange>& chunk_ranges, int stage, int num_stages,
             ChunkLayout layout, Backend& backend, DType param_dtype, DType act_dtype,
             uint64_t seed, bool int8_weights = false, bool inference = false,
             TensorGroup* tensor = nullptr, ExpertGroup* experts = nullptr,
             const BuiltHook& on_built = {});

  int stage() const { return stage_; }
  int num_stages() const { return num_stages_; }
  ChunkLayout layout() const { return layout_; }
  int num_layers_in_graph() const { return num_graph_layers_; }
  bool int8_weights() const { return int8_weights_; }
  int num_virtual_stages() const { return num_stages_ * static_cast<int>(chunks_.size()); }
  std::vector<Chunk>& chunks() { return chunks_; }
  Chunk& chunk(int c) { return chunks_.at(static_cast<size_t>(c)); }

  // Every parameter of every local layer, graph order (tied copies included).
  std::vector<Param*> params();
  // (graph layer index, layer) for every local layer, graph order.
  std::vector<std::pair<int, Layer*>> layers();

  // The token embedding, where present on this stage: the embedding's "wte.weight" (if this
  // stage holds layer 0) and the head's tied copy (if it holds the last layer and the head is
  // tied; an untied head's "lm_head.weight" is not a copy).
  Param* embedding_wte() { return embedding_wte_; }
  Param* head_wte() { return head_wte_; }
  bool holds_first_layer() const { return holds_first_; }
  bool holds_last_layer() const { return holds_last_; }

 private:
  int stage_;
  int num_stages_;
  ChunkLayout layout_;
  int num_graph_layers_;
  bool int8_weights_;
  std::vector<Chunk> chunks_;
  Param* embedding_wte_ = nullptr;
  Param* head_wte_ = nullptr;
  bool holds_first_ = false;
  bool holds_last_ = false;
};

}  // namespace baton
