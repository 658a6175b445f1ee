#include "worker/optimizer.h"

#include <cmath>
#include <numbers>
#include <set>

#include "core/error.h"
#include "kernels/quantize.h"

namespace baton {

float LearningRateSchedule::At(int64_t step) const {
  if (warmup_steps > 0 && step <= warmup_steps) {
    return lr * static_cast<float>(step) / static_cast<float>(warmup_steps);
  }
  if (!cosine) return lr;
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps));
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return static_cast<float>(min_lr + coeff * (lr - min_lr));
}

Optimizer::Optimizer(Backend& backend, std::vector<Param*> params, AdamWConfig hyper,
                     bool quantized_state)
    : backend_(backend), hyper_(hyper) {
  Allocator& allocator = backend.allocator();
  std::set<const void*> seen;
  for (Param* p : params) {
    if (!seen.insert(p->value.raw()).second) continue;  // a tied copy sharing storage
    Slot slot{p, {}, {}, {}, {}, {}};
    if (p->value.dtype() != DType::kF32) {
      slot.master =
          Tensor::Empty(allocator, p->value.shape(), DType::kF32, MemCategory::kOptimizer);
      backend.Copy(p->value, slot.master);
    }
    // Zero codes with a zero absmax decode to zero moments, as f32 state starts.
    const bool quantized = quantized_state && p->value.numel() >= kMinQuantizedElements;
    const DType state = quantized ? DType::kU8 : DType::kF32;
    slot.m = Tensor::Empty(allocator, p->value.shape(), state, MemCategory::kOptimizer);
    slot.v = Tensor::Empty(allocator, p->value.shape(), state, MemCategory::kOptimizer);
    backend.Zero(slot.m);
    backend.Zero(slot.v);
    if (quantized) {
      const Shape blocks = {QuantBlocks(p->value.numel())};
      slot.m_absmax = Tensor::Empty(allocator, blocks, DType::kF32, MemCategory::kOptimizer);
      slot.v_absmax = Tensor::Empty(allocator, blocks, DType::kF32, MemCategory::kOptimizer);
      backend.Zero(slot.m_absmax);
      backend.Zero(slot.v_absmax);
    }
    slots_.push_back(std::move(slot));
  }
}

void Optimizer::Step(float lr, int64_t step, float grad_scale) {
  BATON_CHECK(step >= 1, "optimizer steps are 1-based, got {}", step);
  for (Slot& slot : slots_) {
    AdamWConfig config = hyper_;
    config.lr = lr;
    config.step = step;
    if (!slot.param->weight_decay) config.weight_decay = 0.0f;
    Tensor& target = slot.master.defined() ? slot.master : slot.param->value;
    if (slot.quantized()) {
      backend_.AdamW8bit(target, slot.param->grad, slot.m, slot.m_absmax, slot.v, slot.v_absmax,
                         config, grad_scale);
    } else {
      backend_.AdamW(target, slot.param->grad, slot.m, slot.v, config, grad_scale);
    }
    if (slot.master.defined()) backend_.Copy(slot.master, slot.param->value);
  }
}

}  // namespace baton
