// Magnitude pruning while training (see pruning.h).
#include "worker/pruning.h"

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
    if (p->mask.defined()) backend.ApplyMask(p->grad, p->mask);
  }
}

void MaskWeights(Backend& backend, const Optimizer& optimizer) {
  for (const Optimizer::Slot& slot : optimizer.slots()) {
    Param& p = *slot.param;
    if (!p.mask.defined()) continue;
    backend.ApplyMask(p.value, p.mask);
    if (slot.master.defined()) {
      Tensor master = slot.master;
      backend.ApplyMask(master, p.mask);
    }
  }
}

PruneCount PruneByMagnitude(Backend& backend, Optimizer& optimizer, const PruneConfig& prune) {
  PruneCount count;
  for (Optimizer::Slot& slot : optimizer.slots()) {
    Param& p = *slot.param;
    if (!p.mask.defined()) continue;
    ++count.matrices;
    count.total += p.value.numel();
    if (IsMeta(backend)) continue;
    const std::vector<float> w = HostValues(backend, slot.master.defined() ? slot.master : p.value);
    const std::vector<uint8_t> keep =
        MagnitudeMask(w.data(), p.value.size(0), p.value.size(1), prune.sparsity, prune.pattern);
    for (uint8_t k : keep) count.pruned += k == 0 ? 1 : 0;
    Upload(backend, keep.data(), DType::kU8, p.mask);
    backend.ApplyMask(p.value, p.mask);
    if (slot.master.defined()) backend.ApplyMask(slot.master, p.mask);
    if (slot.quantized()) {
      ZeroQuantizedMoment(backend, slot.m, slot.m_absmax, SignedQuantMap(), keep);
      ZeroQuantizedMoment(backend, slot.v, slot.v_absmax, UnsignedQuantMap(), keep);
    } else {
      backend.ApplyMask(slot.m, p.mask);
      backend.ApplyMask(slot.v, p.mask);
    }
  }
  return count;
}

}  // namespace baton
