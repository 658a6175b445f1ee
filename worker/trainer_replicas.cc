// The data-parallel parts of a Trainer beside its GradientSync (worker/gradient_sync.h): ZeRO-1's
// layer-by-layer checkpoint state (and the checkpoint's tensors for every layout), the fp32
// masters, and the job-wide all-reduce of host values.
#include <algorithm>
#include <functional>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/units.h"
#include "worker/stage_tensors.h"
#include "worker/trainer.h"

namespace baton {

LayerTensors Trainer::LayerOf(int layer_index, const Optimizer* optimizer) {
  for (auto& [index, l] : model_->layers()) {
    if (index == layer_index) return {index, l->name(), ParamTensorsOf(l->params(), optimizer)};
  }
  BATON_FAIL("stage {} holds no layer {}", setup_.stage, layer_index);
}

LayerTensors Trainer::LayerWithState(int layer_index) {
  return LayerOf(layer_index, optimizer_.get());
}

void Trainer::CheckpointLayers(const std::function<void(const std::vector<LayerTensors>&)>& write) {
  if (!zero() && !tensor_parallel()) {
    write(CheckpointTensors(*model_, optimizer_.get()));
    return;
  }
  // Layer by layer: one layer's full optimizer state (ZeRO-1) or whole tensors (tensor ranks)
  // at a time.
  for (auto& [index, layer] : model_->layers()) {
    std::optional<LayerTensors> gathered = zero() ? GatherLayerState(index) : LayerWithState(index);
    if (!gathered) continue;  // a ZeRO-1 replica other than 0: it sent its shards
    if (tensor_parallel()) gathered = WholeLayer(*gathered);
    write({*gathered});
  }
}

std::optional<LayerTensors> Trainer::GatherLayerState(int layer_index) {
  BATON_CHECK(zero(), "GatherLayerState is for ZeRO-1 trainers");
  return zero1_->GatherLayerState(LayerOf(layer_index), *optimizer_);
}

LayerTensors Trainer::LayerStateToLoad(int layer_index) {
  BATON_CHECK(zero(), "LayerStateToLoad is for ZeRO-1 trainers");
  LayerTensors layer = LayerOf(layer_index);
  Allocator& a = backend_.allocator();
  for (ParamTensors& t : layer.params) {
    t.adam_m = Tensor::Empty(a, t.value.shape(), DType::kF32, MemCategory::kWorkspace);
    t.adam_v = Tensor::Empty(a, t.value.shape(), DType::kF32, MemCategory::kWorkspace);
    if (t.value.dtype() != DType::kF32) {
      t.master = Tensor::Empty(a, t.value.shape(), DType::kF32, MemCategory::kWorkspace);
    }
  }
  return layer;
}

void Trainer::KeepOwnState(const LayerTensors& loaded) {
  for (const ParamTensors& t : loaded.params) {
    for (Optimizer::Slot& slot : optimizer_->slots()) {
      if (slot.param->value.raw() != t.value.raw()) continue;
      // The slot's state as flat views (a slot covering its whole parameter has its shape).
      Tensor m = slot.m.View({-1}), v = slot.v.View({-1});
      backend_.Copy(FlatSlice(t.adam_m, slot.begin, slot.end), m);
      backend_.Copy(FlatSlice(t.adam_v, slot.begin, slot.end), v);
      if (slot.master.defined()) {
        Tensor master = slot.master.View({-1});
        backend_.Copy(FlatSlice(t.master, slot.begin, slot.end), master);
      }
    }
  }
}

void Trainer::ResetMastersFromValues() {
  if (optimizer_ == nullptr) return;
  for (Optimizer::Slot& slot : optimizer_->slots()) {
    if (slot.master.defined()) {
      Tensor master = slot.master.View({-1});
      backend_.Copy(FlatSlice(slot.param->value, slot.begin, slot.end), master);
    }
  }
}

void Trainer::AllReduceOverJob(std::vector<float>& values) {
  Tensor host = Tensor::Wrap(values.data(), {static_cast<int64_t>(values.size())}, DType::kF32);
  if (backend_.device().is_cpu()) {
    setup_.comm->AllReduceSum(host, timeout_);
    return;
  }
  // NCCL reduces device memory.
  Tensor on_device =
      Tensor::Empty(backend_.allocator(), host.shape(), DType::kF32, MemCategory::kComm);
  backend_.Copy(host, on_device);
  setup_.comm->AllReduceSum(on_device, timeout_);
  backend_.Copy(on_device, host);
  backend_.Synchronize();
}

}  // namespace baton
