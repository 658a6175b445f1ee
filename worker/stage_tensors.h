// A rank's stage as the named tensors checkpoint/ saves and fills (checkpoint/layer_tensors.h):
// the adapter between the worker's StageModel and Optimizer and the checkpoint library, which
// knows files and formats but not these types.
//
// The tensors returned are handles sharing the model's and the optimizer's storage: loading into
// them loads the stage. They are valid while the model and the optimizer live. Not thread-safe
// (as StageModel and Optimizer).
#pragma once

#include <vector>

#include "checkpoint/layer_tensors.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_llama.h"
#include "kernels/backend.h"
#include "model/layer.h"
#include "worker/optimizer.h"
#include "worker/stage_model.h"

namespace baton {

// Every param of `params` with, when `optimizer` is given, its optimizer state (its master and
// moments); without one, names and values only (GPT-2 import and export). Throws when `optimizer`
// holds no state for one of them.
std::vector<ParamTensors> ParamTensorsOf(const std::vector<Param*>& params,
                                         const Optimizer* optimizer = nullptr);

// Layer `index` of the graph: its params as ParamTensorsOf gives them and its buffers (a
// sigmoid_bias router's expert bias).
LayerTensors LayerTensorsOf(int index, Layer& layer, const Optimizer* optimizer);

// Every layer `model` holds, graph order, each param with its optimizer state (tied copies
// included, marked tied): what CheckpointWriter::WriteLayers stores and CheckpointReader::
// LoadLayers fills. CheckpointWriter/Reader's model-and-optimizer overloads call this. Without an
// optimizer (an INT8 inference model, `baton compress`), the weights only.
std::vector<LayerTensors> CheckpointTensors(StageModel& model, const Optimizer* optimizer);

// model.init_from after the Optimizer exists: loads the params from a GPT-2 file, then sets each
// fp32 master copy from the file's values (not from the rounded 16-bit param), and leaves the
// moments at zero (LoadParamsFromSafetensors with the params' masters). `optimizer` is null for
// an INT8 inference model (its weights are quantised as they load).
void InitFromSafetensors(const SafetensorsFile& file, const std::vector<Param*>& params,
                         Optimizer* optimizer, Backend& backend);

// model.init_from a Hugging Face Llama folder: the same for LoadLlamaParamsFromHf, which opens
// only the shards holding these params.
void InitFromHfLlama(HfLlamaFolder& folder, const ModelDims& dims,
                     const std::vector<Param*>& params, Optimizer* optimizer, Backend& backend);

}  // namespace baton
