#include "worker/state_layout.h"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "core/error.h"
#include "core/units.h"
#include "kernels/quantize.h"
#include "model/init.h"
#include "worker/stage_tensors.h"

namespace baton {
namespace {

// The tensors of a param that a checkpoint stores with it and that are cut where its value is.
std::vector<Tensor ParamTensors::*> CutFields() {
  return {&ParamTensors::value,  &ParamTensors::master,        &ParamTensors::adam_m,
          &ParamTensors::adam_v, &ParamTensors::adam_m_absmax, &ParamTensors::adam_v_absmax};
}

// How `field` of `p` (this rank's `part` of it) is cut: like the value, or for 8-bit moments'
// block maxima (one per kQuantBlock flat elements) into the same parts of the blocks: a member of
// an expert group holds whole blocks of its experts (the config checks), so its blocks are the
// whole's. Tensor ranks do not cut 8-bit state.
TensorSplit FieldSplit(const ParamTensors& p, Tensor ParamTensors::*field, const Tensor& part) {
  if (field != &ParamTensors::adam_m_absmax && field != &ParamTensors::adam_v_absmax) {
    return p.split;
  }
  BATON_CHECK(p.split.over == SplitOver::kExperts,
              "{}: 8-bit optimizer state is not cut across tensor ranks", p.name);
  TensorSplit blocks = p.split;
  blocks.dim = 0;
  blocks.sections = {part.numel() * p.split.parts};
  return blocks;
}

}  // namespace

Tensor StateLayout::GatherWhole(const Tensor& part, const TensorSplit& split) {
  // Every rank's part gathered point to point into its slot (the slots as long as the longest
  // part: a vocabulary need not cut evenly), then put at its place on the host. The slots are
  // freed before the whole is booked, so the peak is the larger of the two.
  const Shape shape = WholeShape(part.shape(), split);
  const size_t element_bytes = SizeOf(part.dtype());
  const auto part_of = [&](int t) {
    TensorSplit theirs = split;
    theirs.part = t;
    return theirs;
  };
  int64_t slot = 0;
  for (int t = 0; t < split.parts; ++t) {
    slot = std::max(slot, NumElements(PartShape(shape, part_of(t))));
  }
  std::vector<std::byte> gathered;
  {
    Tensor slots = Tensor::Empty(backend_.allocator(), {split.parts, slot}, part.dtype(),
                                 MemCategory::kWorkspace);
    Tensor mine = slots.Slice(0, split.part, split.part + 1).Slice(1, 0, part.numel());
    backend_.Copy(part.View({1, part.numel()}), mine);
    if (split.over == SplitOver::kExperts) {
      BATON_CHECK(experts_ != nullptr, "stage {}: a tensor cut over an expert group, and none",
                  stage_);
      // An all-gather as an all-to-all: this member's slot to every member, theirs into theirs;
      // with tensor ranks too, the group's E slots are its tensor rank's fold, gathered next.
      const int members = experts_->size();
      const int base = split.part / members * members;
      std::vector<Tensor> to(static_cast<size_t>(members), mine), from;
      for (int j = base; j < base + members; ++j) from.push_back(slots.Slice(0, j, j + 1));
      experts_->AllToAll(to, from);
      if (split.parts > members) {
        BATON_CHECK(tensor_ != nullptr && tensor_->size() * members == split.parts,
                    "stage {}: {} parts of the experts over an expert group of {} and {} tensor "
                    "ranks",
                    stage_, split.parts, members, TensorSize(tensor_));
        tensor_->AllGather(slots, /*dim=*/0);
      }
    } else {
      tensor_->AllGather(slots, /*dim=*/0);
    }
    if (!IsMeta(backend_)) gathered = HostBytes(backend_, slots);  // the planner moves no bytes
  }
  Tensor whole = Tensor::Empty(backend_.allocator(), shape, part.dtype(), MemCategory::kWorkspace);
  if (!IsMeta(backend_)) {
    std::vector<std::byte> host(static_cast<size_t>(NumElements(shape)) * element_bytes);
    for (int t = 0; t < split.parts; ++t) {
      InsertPart(gathered.data() + static_cast<size_t>(t * slot) * element_bytes, shape,
                 element_bytes, part_of(t), host.data());
    }
    backend_.Copy(Tensor::Wrap(host.data(), shape, part.dtype()), whole);
    backend_.Synchronize();
  }
  return whole;
}

StateLayout::StateLayout(Backend& backend, StageModel& model, Optimizer* optimizer,
                         GradientSync& sync, TensorGroup* tensor, int stage, ExpertGroup* experts)
    : backend_(backend),
      model_(model),
      optimizer_(optimizer),
      sync_(sync),
      tensor_(tensor),
      stage_(stage),
      experts_(experts) {
  BATON_CHECK(!sharded() || optimizer != nullptr,
              "stage {}: ZeRO-1 shards an optimizer's state, and there is none", stage);
}

void StateLayout::SaveTo(CheckpointSnapshot* copy) {
  if (copy != nullptr) copy->Begin();
  Save([&](const std::vector<LayerTensors>& layers) {
    if (copy != nullptr) copy->Add(layers, backend_);
  });
}

void StateLayout::Save(const std::function<void(const std::vector<LayerTensors>&)>& write) {
  if (!sharded() && !cut()) {
    write(CheckpointTensors(model_, optimizer_));
    return;
  }
  // Layer by layer: one layer's full optimizer state (ZeRO-1) or whole tensors (tensor ranks)
  // at a time.
  for (auto& [index, layer] : model_.layers()) {
    sync_.AcquireLayerValues(index, /*gather=*/true);  // ZeRO-3: the layer's whole values
    std::optional<LayerTensors> gathered =
        sharded() ? sync_.GatherLayerState(LayerOf(index, nullptr), *optimizer_)
                  : LayerOf(index, optimizer_);
    // A ZeRO replica other than 0 sent its shards and writes nothing.
    if (gathered) {
      if (cut()) gathered = WholeLayer(*gathered);
      write({*gathered});
    }
    sync_.ReleaseLayerValues(index);
  }
}

void StateLayout::Load(const std::function<void(const std::vector<LayerTensors>&)>& read) {
  if (!sharded() && !cut()) {
    read(CheckpointTensors(model_, optimizer_));
    return;
  }
  // Layer by layer: ZeRO-1 reads each layer's full state into temporaries and keeps this
  // replica's shard; tensor ranks read whole tensors into temporaries and keep their parts.
  for (auto& [index, layer] : model_.layers()) {
    sync_.AcquireLayerValues(index, /*gather=*/false);  // ZeRO-3: room for the whole values
    const LayerTensors loaded = sharded() ? LayerStateToLoad(index) : LayerOf(index, optimizer_);
    if (cut()) {
      const LayerTensors whole = WholeTemporaries(loaded);
      read({whole});
      KeepParts(whole, loaded);
    } else {
      read({loaded});
    }
    if (sharded()) KeepOwnState(loaded);
    sync_.ReleaseLayerValues(index);
  }
}

void StateLayout::InitValues(const std::function<void(const std::vector<LayerTensors>&)>& load) {
  // Under ZeRO-1 the masters are shards: the values load alone, and every master then follows
  // its rounded value.
  const Optimizer* masters = sharded() ? nullptr : optimizer_;
  const auto values_and_masters = [](LayerTensors layer) {
    for (ParamTensors& p : layer.params) {
      p.adam_m = p.adam_v = p.adam_m_absmax = p.adam_v_absmax = Tensor();
    }
    return layer;
  };
  // ZeRO-3 holds every value whole while `load` sets them all.
  for (auto& [index, layer] : model_.layers()) sync_.AcquireLayerValues(index, /*gather=*/false);
  if (!cut()) {
    std::vector<LayerTensors> layers = CheckpointTensors(model_, masters);
    for (LayerTensors& layer : layers) layer = values_and_masters(std::move(layer));
    load(layers);
  } else {
    // Layer by layer into whole temporaries, of which each rank keeps its part (as Load).
    for (auto& [index, layer] : model_.layers()) {
      const LayerTensors own = values_and_masters(LayerOf(index, masters));
      const LayerTensors whole = WholeTemporaries(own);
      load({whole});
      KeepParts(whole, own);
    }
  }
  if (sharded()) ResetMastersFromValues();
  for (auto& [index, layer] : model_.layers()) sync_.ReleaseLayerValues(index);
}

LayerTensors StateLayout::LayerOf(int layer_index, const Optimizer* optimizer) const {
  for (auto& [index, l] : model_.layers()) {
    if (index == layer_index) return LayerTensorsOf(index, *l, optimizer);
  }
  BATON_FAIL("stage {} holds no layer {}", stage_, layer_index);
}

LayerTensors StateLayout::LayerStateToLoad(int layer_index) const {
  LayerTensors layer = LayerOf(layer_index, nullptr);
  for (ParamTensors& t : layer.params) {
    // As the optimizer keeps them: 8-bit codes and block maxima for a large enough parameter.
    AllocateWholeState(t, backend_.allocator(),
                       optimizer_->quantized_state() && QuantizedState(t.value.shape(), t.split));
  }
  return layer;
}

void StateLayout::KeepOwnState(const LayerTensors& loaded) {
  for (const ParamTensors& t : loaded.params) {
    for (Optimizer::Slot& slot : optimizer_->slots()) {
      if (slot.param->value.storage() != t.value.storage()) continue;
      // The slot's state as flat views (a slot covering its whole parameter has its shape).
      Tensor m = slot.m.View({-1}), v = slot.v.View({-1});
      backend_.Copy(FlatSlice(t.adam_m, slot.begin, slot.end), m);
      backend_.Copy(FlatSlice(t.adam_v, slot.begin, slot.end), v);
      if (slot.quantized()) {  // the slot's blocks: it starts at one (ZeroFlatSpace::Boundaries)
        const int64_t first = slot.begin / kQuantBlock, last = QuantBlocks(slot.end);
        backend_.Copy(FlatSlice(t.adam_m_absmax, first, last), slot.m_absmax);
        backend_.Copy(FlatSlice(t.adam_v_absmax, first, last), slot.v_absmax);
      }
      if (slot.master.defined()) {
        Tensor master = slot.master.View({-1});
        backend_.Copy(FlatSlice(t.master, slot.begin, slot.end), master);
      }
    }
  }
}

void StateLayout::ResetMastersFromValues() {
  if (optimizer_ == nullptr) return;
  for (Optimizer::Slot& slot : optimizer_->slots()) {
    if (slot.master.defined()) {
      Tensor master = slot.master.View({-1});
      backend_.Copy(FlatSlice(slot.param->value, slot.begin, slot.end), master);
    }
  }
}

LayerTensors StateLayout::WholeLayer(const LayerTensors& layer) {
  BATON_CHECK(cut(), "stage {}: WholeLayer is for stages whose parameters are cut", stage_);
  LayerTensors whole = layer;
  for (ParamTensors& p : whole.params) {
    if (!p.split.cut()) continue;
    for (Tensor ParamTensors::*field : CutFields()) {
      Tensor& part = p.*field;
      if (!part.defined()) continue;
      part = GatherWhole(part, FieldSplit(p, field, part));
    }
    p.split = TensorSplit();
  }
  return whole;
}

LayerTensors StateLayout::WholeTemporaries(const LayerTensors& layer) const {
  LayerTensors whole = layer;
  for (ParamTensors& p : whole.params) {
    if (!p.split.cut()) continue;
    for (Tensor ParamTensors::*field : CutFields()) {
      Tensor& part = p.*field;
      if (!part.defined()) continue;
      part =
          Tensor::Empty(backend_.allocator(), WholeShape(part.shape(), FieldSplit(p, field, part)),
                        part.dtype(), MemCategory::kWorkspace);
    }
  }
  return whole;
}

void StateLayout::KeepParts(const LayerTensors& whole, const LayerTensors& layer) {
  BATON_CHECK(whole.params.size() == layer.params.size(), "{}: {} whole tensors for {} params",
              layer.name, whole.params.size(), layer.params.size());
  for (size_t i = 0; i < layer.params.size(); ++i) {
    const ParamTensors& from = whole.params[i];
    const ParamTensors& to = layer.params[i];
    if (!to.split.cut()) continue;
    for (Tensor ParamTensors::*field : CutFields()) {
      const Tensor& source = from.*field;
      Tensor target = to.*field;
      if (!target.defined()) continue;
      std::vector<std::byte> part(target.nbytes());
      ExtractPart(HostBytes(backend_, source).data(), source.shape(), SizeOf(source.dtype()),
                  FieldSplit(to, field, target), part.data());
      backend_.Copy(Tensor::Wrap(part.data(), target.shape(), target.dtype()), target);
      backend_.Synchronize();
    }
  }
}

}  // namespace baton
