#include "worker/optimizer.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <set>
#include <tuple>

#include "core/error.h"
#include "kernels/quantize.h"
#include "model/tensor_parallel.h"

namespace baton {

namespace {

// The rate at `step` of a decay from `start` after step `from` to `floor` at step `to` (and
// `floor` after it), by `schedule`; wsd holds `start` until `to - decay_steps`.
double Decay(LrSchedule schedule, int64_t decay_steps, double start, double floor, int64_t from,
             int64_t to, int64_t step) {
  if (schedule == LrSchedule::kConstant) return start;
  if (schedule == LrSchedule::kWsd) {
    from = std::max(from, to - decay_steps);
    if (step <= from) return start;
  }
  const double progress = std::min(
      1.0, static_cast<double>(step - from) / static_cast<double>(std::max<int64_t>(1, to - from)));
  switch (schedule) {
    case LrSchedule::kCosine:
      return floor + 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) * (start - floor);
    case LrSchedule::kLinear:
    case LrSchedule::kWsd:
      return floor + (1.0 - progress) * (start - floor);
    case LrSchedule::kConstant:
      break;
  }
  return start;
}

}  // namespace

float LearningRateSchedule::At(int64_t step) const {
  for (size_t k = extensions.size(); k-- > 0;) {
    const LrSegment& segment = extensions[k];
    if (step <= segment.from) continue;
    LearningRateSchedule before = *this;
    before.extensions.resize(k);
    const float start = before.At(segment.from);
    return static_cast<float>(
        Decay(schedule, decay_steps, start, min_lr, segment.from, segment.to, step));
  }
  if (warmup_steps > 0 && step <= warmup_steps) {
    return lr * static_cast<float>(step) / static_cast<float>(warmup_steps);
  }
  return static_cast<float>(
      Decay(schedule, decay_steps, lr, min_lr, warmup_steps, total_steps, step));
}

bool QuantizedState(const Shape& part, const TensorSplit& split) {
  return NumElements(WholeShape(part, split)) >= kMinQuantizedElements;
}

Tensor FlatSlice(const Tensor& t, int64_t begin, int64_t end) {
  return t.View({-1}).Slice(0, begin, end);
}

Optimizer::Optimizer(Backend& backend, std::vector<Param*> params, AdamWConfig hyper,
                     bool quantized_state, std::optional<OptimizerShard> shard)
    : backend_(backend),
      hyper_(hyper),
      sharded_(shard.has_value()),
      quantized_state_(quantized_state) {
  Allocator& allocator = backend.allocator();
  std::set<const void*> seen;
  int64_t offset = 0;  // of the parameter in the flat space
  for (Param* p : params) {
    if (!seen.insert(p->value.storage()).second) continue;  // a tied copy sharing storage
    const int64_t numel = p->value.numel();
    Slot slot{p, 0, numel, {}, {}, {}, {}, {}, {}};
    if (shard && shard->apart.count(p) == 1) {  // outside the flat space
      std::tie(slot.begin, slot.end) = shard->apart.at(p);
      BATON_CHECK(0 <= slot.begin && slot.begin <= slot.end && slot.end <= numel,
                  "{}: elements [{}, {}) of {} to step", p->name, slot.begin, slot.end, numel);
    } else if (shard) {
      slot.begin = std::clamp(shard->begin - offset, int64_t{0}, numel);
      slot.end = std::clamp(shard->end - offset, int64_t{0}, numel);
      offset += numel;
    }
    if (slot.begin >= slot.end) continue;  // another replica's
    const Shape shape = slot.whole() ? p->value.shape() : Shape{slot.end - slot.begin};
    if (p->value.dtype() != DType::kF32) {
      slot.master = Tensor::Empty(allocator, shape, DType::kF32, MemCategory::kOptimizer);
      backend.Copy(slot.whole() ? p->value : FlatSlice(p->value, slot.begin, slot.end),
                   slot.master);
    }
    // Zero codes with a zero absmax decode to zero moments, as f32 state starts.
    // Whether the parameter's state is 8-bit goes by the whole parameter (all its experts where
    // an expert group splits them); a shard of it starts at one of its blocks
    // (ZeroFlatSpace::Boundaries), and a member's experts are whole blocks (the config checks),
    // so its blocks are the whole one's.
    const bool quantized = quantized_state && QuantizedState(*p);
    BATON_CHECK(!quantized || slot.begin % kQuantBlock == 0,
                "{}: a shard of 8-bit optimizer state must start at a block, not at element {}",
                p->name, slot.begin);
    BATON_CHECK(!quantized || !p->split.cut() || numel % kQuantBlock == 0,
                "{}: a part of 8-bit optimizer state must be whole blocks of {}, not {} elements",
                p->name, kQuantBlock, numel);
    const DType state = quantized ? DType::kU8 : DType::kF32;
    slot.m = Tensor::Empty(allocator, shape, state, MemCategory::kOptimizer);
    slot.v = Tensor::Empty(allocator, shape, state, MemCategory::kOptimizer);
    backend.Zero(slot.m);
    backend.Zero(slot.v);
    if (quantized) {
      const Shape blocks = {QuantBlocks(slot.end - slot.begin)};
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
    if (!slot.whole()) {  // a shard: flat views of its elements
      Tensor value =
          slot.values.defined() ? slot.values : FlatSlice(slot.param->value, slot.begin, slot.end);
      const Tensor grad = FlatSlice(slot.param->grad, slot.begin, slot.end);
      Tensor& target = slot.master.defined() ? slot.master : value;
      if (slot.quantized()) {
        backend_.AdamW8bit(target, grad, slot.m, slot.m_absmax, slot.v, slot.v_absmax, config,
                           grad_scale);
      } else {
        backend_.AdamW(target, grad, slot.m, slot.v, config, grad_scale);
      }
      if (slot.master.defined()) backend_.Copy(slot.master, value);
      continue;
    }
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
