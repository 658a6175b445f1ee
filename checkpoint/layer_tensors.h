// What a rank hands checkpoint/ to save, or to fill when loading: its parameters by name, each with
// the optimizer state that belongs to it, grouped by graph layer. checkpoint/ knows files and
// formats, not the model or the optimizer that own these tensors; the worker builds these lists
// from its stage (worker/stage_tensors.h).
//
// Tensors are handles (core/tensor.h): saving reads them, loading copies into their storage, on
// any device. The caller keeps them alive and leaves them alone until the call returns.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/tensor_parallel.h"

namespace baton {

// One parameter and its optimizer state, stored in a layer file as "<name>", "<name>.master",
// "<name>.adam_m" and "<name>.adam_v", and for 8-bit state "<name>.adam_m_absmax" and
// "<name>.adam_v_absmax" (docs/checkpoints.md).
struct ParamTensors {
  std::string name;      // Hugging Face GPT-2 style, as Param::name: "h.3.attn.c_attn.weight"
  Tensor value;          // the parameter, in its own dtype (i8 for INT8 weights)
  Tensor scale;          // INT8 weights: f32 per-column scales, stored as "<name>.scale"
  Tensor mask;           // pruning: u8, 1 = kept; the param is then stored sparsely (sparse.h)
  Tensor master;         // f32 master copy of a 16-bit parameter; undefined when there is none
  Tensor adam_m;         // f32 AdamW moments; undefined when there is no optimizer state (GPT-2
  Tensor adam_v;         // import and export need none; a checkpoint needs both); u8 codes when
  Tensor adam_m_absmax;  // 8-bit: f32 per block of kQuantBlock (kernels/quantize.h); else
  Tensor adam_v_absmax;  // undefined
  // A copy of another layer's parameter of the same name (the head's tied "wte.weight", a
  // shared block's parameter): a checkpoint stores it only in the file of `source_layer` (the
  // graph index of the layer holding the original) and loads it from there.
  bool tied = false;
  int source_layer = 0;
  // Tensor parallelism (model/tensor_parallel.h): the part of the whole parameter that value,
  // master and the moments hold. A checkpoint stores whole tensors only: the worker makes them
  // whole before it writes (and cuts them after it reads).
  TensorSplit split = {};
};

// State a layer keeps beside its parameters that no optimizer steps (PyTorch's persistent
// buffers; Baton's one: the sigmoid_bias router's expert bias, "h.3.mlp.router.expert_bias"),
// stored as "<name>" in its own dtype, in training and weights-only files alike.
struct BufferTensor {
  std::string name;
  Tensor value;
};

// One graph layer's parameters, in the layer's order, and its buffers.
struct LayerTensors {
  int index = 0;     // in the layer graph
  std::string name;  // LayerSpec::name: "embedding", "block.3", "head"
  std::vector<ParamTensors> params;
  std::vector<BufferTensor> buffers;
};

// Every param of `layers`, in order (what the importers of whole files fill).
inline std::vector<ParamTensors> ParamsOf(const std::vector<LayerTensors>& layers) {
  std::vector<ParamTensors> params;
  for (const LayerTensors& layer : layers) {
    params.insert(params.end(), layer.params.begin(), layer.params.end());
  }
  return params;
}

}  // namespace baton
