// A stage's params and optimizer state as checkpoint/'s named tensors (see stage_tensors.h).
#include "worker/stage_tensors.h"

#include "checkpoint/safetensors_gpt2.h"
#include "core/error.h"

namespace baton {
namespace {

// A param's optimizer slot: the one over the same storage (a tied copy sharing the embedding's
// storage has the embedding's slot).
const Optimizer::Slot& SlotOf(const Optimizer& optimizer, const Param& param) {
  for (const Optimizer::Slot& slot : optimizer.slots()) {
    if (slot.param->value.storage() == param.value.storage()) return slot;
  }
  BATON_FAIL("the optimizer has no state for parameter {}", param.name);
}

}  // namespace

std::vector<ParamTensors> ParamTensorsOf(const std::vector<Param*>& params,
                                         const Optimizer* optimizer) {
  std::vector<ParamTensors> tensors;
  tensors.reserve(params.size());
  for (const Param* p : params) {
    ParamTensors t;
    t.name = p->name;
    t.value = p->value;
    t.scale = p->scale;
    t.mask = p->mask;
    t.tied = p->tied;
    t.split = p->split;
    if (p->tied) t.source_layer = p->source_layer;
    if (optimizer != nullptr) {
      const Optimizer::Slot& slot = SlotOf(*optimizer, *p);
      t.master = slot.master;
      t.adam_m = slot.m;
      t.adam_v = slot.v;
      t.adam_m_absmax = slot.m_absmax;
      t.adam_v_absmax = slot.v_absmax;
    }
    tensors.push_back(std::move(t));
  }
  return tensors;
}

LayerTensors LayerTensorsOf(int index, Layer& layer, const Optimizer* optimizer) {
  LayerTensors tensors{index, layer.name(), ParamTensorsOf(layer.params(), optimizer), {}};
  Layer::RoutingBias bias = layer.routing_bias();
  if (bias.values.defined()) tensors.buffers.push_back({bias.name, bias.values});
  return tensors;
}

std::vector<LayerTensors> CheckpointTensors(StageModel& model, const Optimizer* optimizer) {
  std::vector<LayerTensors> layers;
  for (auto& [index, layer] : model.layers()) {
    layers.push_back(LayerTensorsOf(index, *layer, optimizer));
  }
  return layers;
}

void InitFromSafetensors(const SafetensorsFile& file, const std::vector<Param*>& params,
                         Optimizer* optimizer, Backend& backend) {
  LoadParamsFromSafetensors(file, ParamTensorsOf(params, optimizer), backend);
}

void InitFromHfLlama(HfLlamaFolder& folder, const ModelDims& dims,
                     const std::vector<Param*>& params, Optimizer* optimizer, Backend& backend) {
  LoadLlamaParamsFromHf(folder, dims, ParamTensorsOf(params, optimizer), backend);
}

}  // namespace baton
