// The kinds of layer a graph is made of; shared by the config (custom graphs) and model/graph.h.
#pragma once

#include <string_view>

namespace baton {

enum class LayerKind { kEmbedding, kBlock, kMlpBlock, kHead };

std::string_view Name(LayerKind kind);  // "embedding", "block", "mlp_block", "head"
// Throws baton::Error naming the text and the valid names.
LayerKind ParseLayerKind(std::string_view name);

}  // namespace baton
