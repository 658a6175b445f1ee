// The blocks of 8-bit optimizer state (optimizer.state: int8; kernels/quantize.h): one f32
// absmax per kQuantBlock elements of a tensor's flat elements, and the smallest tensor
// quantised. In core so that the config's checks and the kernels name the same numbers.
#pragma once

#include <cstdint>

namespace baton {

inline constexpr int64_t kQuantBlock = 256;
// Tensors with fewer elements keep f32 state (the per-block absmax would not pay for itself and
// LayerNorm / bias moments are small). A tensor cut over an expert group goes by its whole.
inline constexpr int64_t kMinQuantizedElements = 4096;

}  // namespace baton
