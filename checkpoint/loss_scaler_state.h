// The dynamic loss scaler's state as a checkpoint stores it (state.json, docs/checkpoints.md): a
// plain value, so that checkpoint/ need not know the scaler. worker/loss_scaler.h's
// LossScaler::State is this type.
#pragma once

#include <cstdint>

namespace baton {

struct LossScalerState {
  double scale;     // the current loss scale
  int64_t clean;    // steps with finite gradients since the last overflow
  int64_t skipped;  // steps skipped for an inf/NaN gradient, in total
};

}  // namespace baton
