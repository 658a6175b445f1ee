// The model a config describes: its dimensions and its layer graph.
#pragma once

#include <vector>

#include "config/config.h"
#include "model/dims.h"
#include "model/graph.h"

namespace baton {

// model.intermediate_size, or when 0 Meta's default: 8C/3 rounded up to a multiple of 256.
int64_t LlamaIntermediateSize(const ModelConfig& model);
ModelDims DimsOf(const ModelConfig& model);
std::vector<LayerSpec> GraphOf(const ModelConfig& model);

}  // namespace baton
