#include "worker/loss_scaler.h"

#include <algorithm>

namespace baton {

LossScaler::LossScaler(double initial_scale, int64_t growth_interval, double max_scale,
                       bool enabled)
    : scale_(enabled ? initial_scale : 1.0),
      growth_interval_(growth_interval),
      max_scale_(max_scale),
      enabled_(enabled) {}

bool LossScaler::Update(bool found_overflow) {
  if (!enabled_) return false;
  if (found_overflow) {
    scale_ = std::max(scale_ * 0.5, 1.0 / 65536.0);
    clean_ = 0;
    ++skipped_;
    return true;
  }
  ++clean_;
  if (growth_interval_ > 0 && clean_ % growth_interval_ == 0 && scale_ * 2.0 <= max_scale_) {
    scale_ *= 2.0;
  }
  return false;
}

}  // namespace baton
