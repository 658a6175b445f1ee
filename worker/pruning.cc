// Magnitude pruning while training (see pruning.h).
#include "worker/pruning.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/quantize.h"
#include "model/init.h"
#include "model/prune.h"

namespace baton {
namespace {

// Copies host values into `dst` (any device) and waits, so the host buffer may go.
void Upload(Backend& backend, const void* data, DType dtype, Tensor& dst) {
  backend.Copy(Tensor::Wrap(const_cast<void*>(data), dst.shape(), dtype), dst);
  backend.Synchronize();
}

// Zeroes an 8-bit moment where `keep` is 0: decoded on the host, zeroed, requantised (each
// block's absmax from what is left).
void ZeroQuantizedMoment(Backend& backend, Tensor& codes, Tensor& absmax, const QuantMap& map,
                         const std::vector<uint8_t>& keep) {
  const int64_t n = codes.numel();
  std::vector<uint8_t> q(static_cast<size_t>(n));
  std::vector<float> block_max(static_cast<size_t>(absmax.numel()));
  Tensor host_q = Tensor::Wrap(q.data(), codes.shape(), DType::kU8);
  Tensor host_max = Tensor::Wrap(block_max.data(), absmax.shape(), DType::kF32);
  backend.Copy(codes, host_q);
  backend.Copy(absmax, host_max);
  backend.Synchronize();
  std::vector<float> values(static_cast<size_t>(n));
  DequantizeBlocks(q.data(), block_max.data(), n, map, values.data());
  for (size_t i = 0; i < values.size(); ++i) {
    if (keep[i] == 0) values[i] = 0.0f;
  }
  QuantizeBlocks(values.data(), n, map, q.data(), block_max.data());
  Upload(backend, q.data(), DType::kU8, codes);
  Upload(backend, block_max.data(), DType::kF32, absmax);
}

}  // namespace

void MaskGradients(Backend& backend, const std::vector<Param*>& params) {
  for (Param* p : params) {
    // ZeRO-2/3 release the gradients outside the shard once summed.
    if (p->mask.defined() && p->grad.storage()->resident()) backend.ApplyMask(p->grad, p->mask);
  }
}

namespace {

// The slot's elements of `t`, a tensor shaped like its parameter: all of it, or a flat view.
Tensor SlotPart(const Optimizer::Slot& slot, const Tensor& t) {
  return slot.whole() ? t : FlatSlice(t, slot.begin, slot.end);
}

// The values the slot steps: its own part under ZeRO-3 across the shard's edge, else in place.
Tensor SlotValues(const Optimizer::Slot& slot) {
  return slot.values.defined() ? slot.values : SlotPart(slot, slot.param->value);
}

void MaskSlot(Backend& backend, const Optimizer::Slot& slot) {
  const Tensor mask = SlotPart(slot, slot.param->mask);
  Tensor values = SlotValues(slot);
  backend.ApplyMask(values, mask);
  if (slot.master.defined()) {
    Tensor master = slot.whole() ? slot.master : slot.master.View({-1});
    backend.ApplyMask(master, mask);
  }
}

}  // namespace

void MaskWeights(Backend& backend, const Optimizer& optimizer) {
  for (const Optimizer::Slot& slot : optimizer.slots()) {
    if (slot.param->mask.defined()) MaskSlot(backend, slot);
  }
}

PruneCount PruneByMagnitude(Backend& backend, Optimizer& optimizer,
                            const std::vector<Param*>& params, const PruneConfig& prune,
                            const WholeValues& whole) {
  PruneCount count;
  std::vector<const Storage*> seen;
  for (Param* param : params) {
    Param& p = *param;
    if (!p.mask.defined()) continue;
    if (std::find(seen.begin(), seen.end(), p.value.storage()) != seen.end()) continue;
    seen.push_back(p.value.storage());
    Optimizer::Slot* slot = nullptr;
    for (Optimizer::Slot& s : optimizer.slots()) {
      if (s.param->value.storage() == p.value.storage()) slot = &s;
    }
    ++count.matrices;
    count.total += p.value.numel();
    const std::vector<float> w = whole(p, slot);
    if (IsMeta(backend)) continue;  // the planner's run prunes nothing
    const std::vector<uint8_t> keep =
        MagnitudeMask(w.data(), p.value.size(0), p.value.size(1), prune.sparsity, prune.pattern);
    for (uint8_t k : keep) count.pruned += k == 0 ? 1 : 0;
    Upload(backend, keep.data(), DType::kU8, p.mask);
    if (slot == nullptr) continue;  // another replica's: its values come in the all-gather
    MaskSlot(backend, *slot);
    if (slot->quantized()) {  // the slot's elements, whole blocks of them under ZeRO
      const std::vector<uint8_t> own(keep.begin() + slot->begin, keep.begin() + slot->end);
      ZeroQuantizedMoment(backend, slot->m, slot->m_absmax, SignedQuantMap(), own);
      ZeroQuantizedMoment(backend, slot->v, slot->v_absmax, UnsignedQuantMap(), own);
    } else {
      const Tensor mask = SlotPart(*slot, p.mask);
      Tensor m = slot->whole() ? slot->m : slot->m.View({-1});
      Tensor v = slot->whole() ? slot->v : slot->v.View({-1});
      backend.ApplyMask(m, mask);
      backend.ApplyMask(v, mask);
    }
  }
  return count;
}

}  // namespace baton
