#include "model/from_config.h"

#include "core/error.h"

namespace baton {

ModelDims DimsOf(const ModelConfig& model) {
  ModelDims dims;
  dims.vocab_size = static_cast<int>(model.vocab_size);
  dims.context = static_cast<int>(model.context);
  dims.num_heads = model.num_heads;
  dims.width = static_cast<int>(model.width);
  dims.num_layers = model.num_layers;
  if (model.preset == ModelPreset::kCustom) {
    int blocks = 0;
    for (LayerKind kind : model.layers)
      blocks += (kind == LayerKind::kBlock || kind == LayerKind::kMlpBlock);
    dims.num_layers = blocks;
  }
  return dims;
}

std::vector<LayerSpec> GraphOf(const ModelConfig& model) {
  const ModelDims dims = DimsOf(model);
  switch (model.preset) {
    case ModelPreset::kGpt:
      return GptGraph(dims);
    case ModelPreset::kMlp:
      return MlpGraph(dims);
    case ModelPreset::kCustom: {
      std::vector<std::string> names;
      for (LayerKind kind : model.layers) names.emplace_back(Name(kind));
      return CustomGraph(dims, names);
    }
  }
  BATON_FAIL("unknown model preset {}", static_cast<int>(model.preset));
}

}  // namespace baton
