#include "worker/optimizer.h"

#include <cmath>
#include <numbers>
#include <set>

#include "core/error.h"

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

Optimizer::Optimizer(Backend& backend, std::vector<Param*> params, AdamWConfig hyper)
    : backend_(backend), hyper_(hyper) {
  Allocator& allocator = backend.allocator();
  std::set<const void*> seen;
  for (Param* p : params) {
    if (!seen.insert(p->value.raw()).second) continue;  // a tied copy sharing storage
    Slot slot{p, {}, {}, {}};
    if (p->value.dtype() != DType::kF32) {
      slot.master =
          Tensor::Empty(allocator, p->value.shape(), DType::kF32, MemCategory::kOptimizer);
      backend.Copy(p->value, slot.master);
    }
    slot.m = Tensor::Empty(allocator, p->value.shape(), DType::kF32, MemCategory::kOptimizer);
    slot.v = Tensor::Empty(allocator, p->value.shape(), DType::kF32, MemCategory::kOptimizer);
    backend.Zero(slot.m);
    backend.Zero(slot.v);
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
    backend_.AdamW(target, slot.param->grad, slot.m, slot.v, config, grad_scale);
    if (slot.master.defined()) backend_.Copy(slot.master, slot.param->value);
  }
}

}  // namespace baton
