// Argument checks shared by the CUDA backend's methods: placement (this GPU), contiguity, dtype,
// shapes. Each throws baton::Error naming the argument. Internal to kernels/cuda.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"

namespace baton::cuda {

struct RowsCols {
  int64_t rows = 0;
  int64_t cols = 0;
};

inline void CheckOnDevice(const Tensor& t, Device device, const char* name) {
  BATON_CHECK(t.defined(), "{} is undefined", name);
  BATON_CHECK(t.device() == device, "{} {} is on {}, not {}", name, t.ToString(),
              t.device().ToString(), device.ToString());
  BATON_CHECK(t.is_contiguous(), "{} {} is not contiguous", name, t.ToString());
}

inline void CheckFloat(const Tensor& t, Device device, const char* name) {
  CheckOnDevice(t, device, name);
  BATON_CHECK(IsFloating(t.dtype()), "{} must be a float tensor, got {}", name, t.ToString());
}

inline void CheckF32(const Tensor& t, Device device, const char* name) {
  CheckOnDevice(t, device, name);
  BATON_CHECK(t.dtype() == DType::kF32, "{} must be f32, got {}", name, t.ToString());
}

inline void CheckI32(const Tensor& t, Device device, const char* name) {
  CheckOnDevice(t, device, name);
  BATON_CHECK(t.dtype() == DType::kI32, "{} must be i32, got {}", name, t.ToString());
}

// The last dimension is the columns, all others the rows.
inline RowsCols AsMatrix(const Tensor& t, const char* name) {
  BATON_CHECK(t.dim() >= 1, "{} must have at least one dimension", name);
  int64_t rows = 1;
  for (int d = 0; d + 1 < t.dim(); ++d) rows *= t.size(d);
  return {rows, t.size(-1)};
}

inline void CheckNumel(const Tensor& t, int64_t numel, const char* name) {
  BATON_CHECK(t.numel() == numel, "{} {} must have {} elements", name, t.ToString(), numel);
}

inline void CheckShape(const Tensor& t, const Shape& shape, const char* name) {
  BATON_CHECK(t.shape() == shape, "{} {} must have shape {}", name, t.ToString(),
              baton::ToString(shape));
}

}  // namespace baton::cuda
