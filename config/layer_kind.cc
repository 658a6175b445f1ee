#include "config/layer_kind.h"

#include "core/error.h"

namespace baton {

std::string_view Name(LayerKind kind) {
  switch (kind) {
    case LayerKind::kEmbedding:
      return "embedding";
    case LayerKind::kBlock:
      return "block";
    case LayerKind::kMlpBlock:
      return "mlp_block";
    case LayerKind::kHead:
      return "head";
  }
  BATON_FAIL("unknown layer kind {}", static_cast<int>(kind));
}

LayerKind ParseLayerKind(std::string_view name) {
  for (LayerKind kind :
       {LayerKind::kEmbedding, LayerKind::kBlock, LayerKind::kMlpBlock, LayerKind::kHead}) {
    if (name == Name(kind)) return kind;
  }
  BATON_FAIL("unknown layer kind '{}' (expected embedding, block, mlp_block or head)", name);
}

}  // namespace baton
