// The model a config describes: its dimensions and its layer graph.
#pragma once

#include <vector>

#include "config/config.h"
#include "model/dims.h"
#include "model/graph.h"

namespace baton {

ModelDims DimsOf(const ModelConfig& model);
std::vector<LayerSpec> GraphOf(const ModelConfig& model);

}  // namespace baton
