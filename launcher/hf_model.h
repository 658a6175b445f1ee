// A Hugging Face Llama-family folder as model.init_from (docs/safetensors.md, "Import"): the
// launcher's model is the one its config.json describes.
#pragma once

#include "config/config.h"

namespace baton {

// When model.init_from is a Hugging Face Llama folder (docs/safetensors.md): config with the model
// its config.json describes (the preset, every dim and the experts; the YAML's context when it is
// at most max_position_embeddings), each value taken logged, the folder's tensors checked against
// it. Otherwise config as it is. run, eval and plan all see the same model.
Config WithHfLlamaModel(Config config);

}  // namespace baton
