// AdamW over one stage's parameters, with the learning-rate schedule and fp32 master weights.
//
// Parameters stored in a 16-bit type get an fp32 master copy here (booked as optimizer, with
// the two moment tensors); the optimizer steps the master and casts it back into the model's
// tensor. A parameter that appears twice (a tied weight shared by two layers of this stage) is
// stepped once. Decoupled weight decay applies only to tensors of rank >= 2 (Param::weight_decay).
//
// Not thread-safe; owned by the stage engine.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "model/layer.h"

namespace baton {

// Linear warmup from 0 over `warmup_steps`, then constant or cosine decay to `min_lr` at
// `total_steps`. Steps are 1-based: step 1 of a 20-step warmup runs at lr/20.
struct LearningRateSchedule {
  float lr = 1e-3f;
  float min_lr = 0.0f;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  bool cosine = true;

  float At(int64_t step) const;
};

class Optimizer {
 public:
  Optimizer(Backend& backend, std::vector<Param*> params, AdamWConfig hyper);
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One AdamW step at `lr` (step is 1-based) with gradients multiplied by grad_scale (the
  // clipping coefficient divided by the loss scale).
  void Step(float lr, int64_t step, float grad_scale);

  struct Slot {
    Param* param;
    Tensor master;  // f32 copy for 16-bit params; undefined when the param itself is f32
    Tensor m, v;    // f32 first and second moments
  };
  const std::vector<Slot>& slots() const { return slots_; }
  std::vector<Slot>& slots() { return slots_; }

 private:
  Backend& backend_;
  AdamWConfig hyper_;
  std::vector<Slot> slots_;
};

}  // namespace baton
