// Dynamic loss scaling for fp16 (and the trivial scale 1 for fp32/bf16).
//
// The loss gradient is multiplied by `scale()` so small fp16 gradients don't flush to zero.
// After a step whose gradients were all finite the count of clean steps grows, and every
// `growth_interval` clean steps the scale doubles, up to `max_scale` (an initial scale above it
// only halves); a step with any inf/NaN gradient (on any
// rank: the flag is reduced first) is skipped and the scale halves.
#pragma once

#include <cstdint>

#include "checkpoint/loss_scaler_state.h"

namespace baton {

class LossScaler {
 public:
  // A disabled scaler always has scale 1 and never skips.
  static LossScaler Disabled() { return LossScaler(1.0, 0, 1.0, false); }
  LossScaler(double initial_scale, int64_t growth_interval, double max_scale = 16777216.0,
             bool enabled = true);

  double scale() const { return scale_; }
  bool enabled() const { return enabled_; }
  // Records the outcome of one step; returns true when the step must be skipped.
  bool Update(bool found_overflow);
  int64_t skipped_steps() const { return skipped_; }
  int64_t clean_steps() const { return clean_; }

  using State = LossScalerState;  // {scale, clean, skipped}: what a checkpoint stores
  State state() const { return {scale_, clean_, skipped_}; }
  void set_state(const State& s) {
    scale_ = s.scale;
    clean_ = s.clean;
    skipped_ = s.skipped;
  }

 private:
  double scale_;
  int64_t growth_interval_;
  double max_scale_;
  bool enabled_;
  int64_t clean_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace baton
