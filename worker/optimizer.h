// AdamW over one stage's parameters, with the learning-rate schedule and fp32 master weights.
//
// Parameters stored in a 16-bit type get an fp32 master copy here (booked as optimizer, with
// the two moment tensors). With 8-bit state (`optimizer.state: int8`) the moments of every tensor
// of >= kMinQuantizedElements elements are u8 codes plus an f32 absmax per block of kQuantBlock
// (kernels/quantize.h), stepped by Backend::AdamW8bit; smaller tensors keep f32 moments. the
// optimizer steps the master and casts it back into the model's tensor. A parameter that appears
// twice (a tied weight shared by two layers of this stage) is stepped once. Decoupled weight decay
// applies only to tensors of rank >= 2 (Param::weight_decay).
//
// Not thread-safe; owned by the stage engine.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "config/config.h"
#include "core/lr_segment.h"
#include "kernels/backend.h"
#include "model/layer.h"

namespace baton {

// Linear warmup from 0 over `warmup_steps`, then (train.lr_schedule, docs/config.md) from `lr`
// to `min_lr` at `total_steps`: constant (no decay), cosine, linear, or wsd (warmup-stable-decay:
// `lr` until the last `decay_steps` steps, which fall linearly). Steps are 1-based: step 1 of a
// 20-step warmup runs at lr/20.
//
// An extended run (`--steps-more`) adds `extensions`, in increasing `from`: after step `from` the
// rate decays afresh, by the same schedule, from the one reached at `from` (continuous there) to
// `min_lr` at `to` (wsd: stable until to - decay_steps); a constant schedule keeps the rate it
// reached. Steps past the last `to` stay at the last rate.
struct LearningRateSchedule {
  float lr = 1e-3f;
  float min_lr = 0.0f;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  LrSchedule schedule = LrSchedule::kCosine;
  int64_t decay_steps = 0;  // wsd only
  std::vector<LrSegment> extensions;

  float At(int64_t step) const;
};

// ZeRO-1 (parallel.zero: 1): the stage's distinct parameters laid end to end (in `params`
// order, a tied copy sharing storage once) form a flat space of elements; this optimizer keeps
// state for, and steps, only the elements [begin, end) of it. Parameters sharded apart (`apart`:
// the experts split over an expert group, sharded over their own expert-data-parallel group,
// worker/expert_zero_sync.h) are left out of that flat space; of each the optimizer keeps and
// steps its flat elements [first, second).
struct OptimizerShard {
  int64_t begin = 0;
  int64_t end = 0;
  std::map<const Param*, std::pair<int64_t, int64_t>> apart;
};

class Optimizer {
 public:
  // Without `shard`, state for every parameter. With one, a slot for each parameter overlapping
  // the shard, holding state for its overlap only (f32 state only: no quantized_state).
  Optimizer(Backend& backend, std::vector<Param*> params, AdamWConfig hyper,
            bool quantized_state = false, std::optional<OptimizerShard> shard = std::nullopt);
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One AdamW step at `lr` (step is 1-based) with gradients multiplied by grad_scale (the
  // clipping coefficient divided by the loss scale).
  void Step(float lr, int64_t step, float grad_scale);

  struct Slot {
    Param* param;
    // The elements of the parameter (flat) this slot steps: all of them unless sharded.
    int64_t begin = 0;
    int64_t end = 0;
    bool whole() const { return begin == 0 && end == param->value.numel(); }
    Tensor master;  // f32 copy for 16-bit params; undefined when the param itself is f32
    // ZeRO-3, for a parameter across the shard's edge: the slot's values as a tensor of their
    // own (its whole value is released between uses: worker/gradient_sync.h); else undefined
    // and the slot steps its elements of the value in place.
    Tensor values;
    Tensor m, v;                // first and second moments: f32, or u8 codes when quantised
    Tensor m_absmax, v_absmax;  // f32 per block of kQuantBlock when quantised; else undefined
    bool quantized() const { return m_absmax.defined(); }
  };
  const std::vector<Slot>& slots() const { return slots_; }
  std::vector<Slot>& slots() { return slots_; }
  bool sharded() const { return sharded_; }
  // 8-bit moments for every parameter of kMinQuantizedElements or more (optimizer.state int8).
  bool quantized_state() const { return quantized_state_; }

 private:
  Backend& backend_;
  AdamWConfig hyper_;
  std::vector<Slot> slots_;
  bool sharded_ = false;
  bool quantized_state_ = false;
};

// Whether optimizer.state int8 keeps the moments of a parameter whose part here has shape `part`
// (cut by `split`) in 8 bits: its whole (every tensor rank's or expert group member's part) has
// kMinQuantizedElements or more.
bool QuantizedState(const Shape& part, const TensorSplit& split);
inline bool QuantizedState(const Param& p) { return QuantizedState(p.value.shape(), p.split); }

// The flat elements [begin, end) of `t` (contiguous), as a 1-D view.
Tensor FlatSlice(const Tensor& t, int64_t begin, int64_t end);

}  // namespace baton
