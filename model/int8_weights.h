// INT8 weights (`model.weights: int8`, `baton compress --int8`): the weight matrices of the blocks'
// Linear layers held as per-column INT8 codes and f32 scales (kernels/quantize.h), a quarter of
// their f32 bytes. Embeddings, LayerNorms and biases keep their dtype. Each Linear dequantises its
// weight into workspace (Backend::DequantizeInt8) just before the GEMM, so the forward is the dense
// forward with the dequantised weights, bit for bit. Such a model is for inference (baton eval,
// baton generate): it has no gradients, and a backward through an INT8 weight throws.
#pragma once

#include "kernels/backend.h"
#include "model/layer.h"

namespace baton {

// True for the parameters an INT8 model stores in INT8: 2-D and neither embedding (wte, wpe)
// nor an untied LM head (lm_head), which stay dense like the tied one.
bool TakesInt8Weights(const Param& param);

// Replaces `param`'s value by its INT8 codes and scales (quantised from the current value on
// the host; on a meta backend only allocated), and drops its gradient.
void QuantizeParamInt8(Backend& backend, Param& param);

// Makes `layer` an INT8 inference layer: quantises every parameter TakesInt8Weights picks and
// drops every parameter's gradient.
void MakeInt8InferenceLayer(Backend& backend, Layer& layer);

}  // namespace baton
