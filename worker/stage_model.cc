#include "worker/stage_model.h"

#include <algorithm>
#include <map>
#include <string>

#include "core/error.h"
#include "model/int8_weights.h"

namespace baton {
namespace {
Param* FindParam(Layer& layer, const std::string& name) {
  for (Param* p : layer.params()) {
    if (p->name == name) return p;
  }
  return nullptr;
}
}  // namespace

StageModel::StageModel(const std::vector<LayerSpec>& graph, const ModelDims& dims,
                       const std::vector<LayerRange>& chunk_ranges, int stage, int num_stages,
                       ChunkLayout layout, Backend& backend, DType param_dtype, DType act_dtype,
                       uint64_t seed, bool int8_weights, bool inference, TensorGroup* tensor,
                       ExpertGroup* experts, const BuiltHook& on_built)
    : stage_(stage),
      num_stages_(num_stages),
      layout_(layout),
      num_graph_layers_(static_cast<int>(graph.size())),
      int8_weights_(int8_weights) {
  BATON_CHECK(!chunk_ranges.empty(), "stage {} has no model chunks", stage);
  // Shared block parameters (model.share) built here once, by name: later copies hold them.
  std::map<std::string, Param*> built;
  const LocalParams local = [&built](const std::string& name) -> Param* {
    const auto it = built.find(name);
    return it == built.end() ? nullptr : it->second;
  };
  for (size_t c = 0; c < chunk_ranges.size(); ++c) {
    const LayerRange& range = chunk_ranges[c];
    BATON_CHECK(0 <= range.first && range.first <= range.last &&
                    range.last < static_cast<int>(graph.size()),
                "chunk {} of stage {}: bad layer range [{}, {}] for a {}-layer graph", c, stage,
                range.first, range.last, graph.size());
    Chunk chunk;
    chunk.virtual_stage = VirtualStage(stage, static_cast<int>(c), num_stages, layout);
    chunk.range = range;
    for (int i = range.first; i <= range.last; ++i) {
      chunk.layers.push_back(BuildLayer(graph[static_cast<size_t>(i)], dims, backend, param_dtype,
                                        act_dtype, seed, local, tensor, experts));
      if (dims.shares()) {
        for (Param* p : chunk.layers.back()->params()) built.emplace(p->name, p);
      }
      if (int8_weights) {
        MakeInt8InferenceLayer(backend, *chunk.layers.back());
      } else if (inference) {
        for (Param* p : chunk.layers.back()->params()) p->grad = Tensor();
        // Expert parallelism's per-source gradient accumulators too.
        for (const ExpertGradSources& s : chunk.layers.back()->expert_grad_sources()) {
          s.others.storage()->Release();
        }
      }
      if (on_built) on_built(i, *chunk.layers.back());
    }
    chunks_.push_back(std::move(chunk));
  }
  for (auto& [index, layer] : layers()) {
    if (index == 0) {
      holds_first_ = true;
      embedding_wte_ = FindParam(*layer, "wte.weight");
    }
    if (index == num_graph_layers_ - 1) {
      holds_last_ = true;
      head_wte_ = FindParam(*layer, "wte.weight");
    }
  }
  if (embedding_wte_ != nullptr && head_wte_ != nullptr) {
    // One process holds both ends: share the value (stepped once), keep the grads apart.
    head_wte_->value = embedding_wte_->value;
  }
}

std::vector<Param*> StageModel::params() {
  std::vector<Param*> all;
  for (auto& [index, layer] : layers()) {
    for (Param* p : layer->params()) all.push_back(p);
  }
  return all;
}

std::vector<std::pair<int, Layer*>> StageModel::layers() {
  std::vector<std::pair<int, Layer*>> all;
  for (Chunk& chunk : chunks_) {
    for (size_t i = 0; i < chunk.layers.size(); ++i) {
      all.emplace_back(chunk.range.first + static_cast<int>(i), chunk.layers[i].get());
    }
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return all;
}

}  // namespace baton
