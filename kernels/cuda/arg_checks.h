// Argument checks shared by the CUDA backend's methods: placement (this GPU), contiguity, dtype,
// shapes. Each throws baton::Error naming the argument. Internal to kernels/cuda.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/shape_checks.h"

namespace baton::cuda {

using ::baton::AsMatrix;
using ::baton::CheckNumel;
using ::baton::CheckShape;
using ::baton::RowsCols;

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

inline void CheckI8(const Tensor& t, Device device, const char* name) {
  CheckOnDevice(t, device, name);
  BATON_CHECK(t.dtype() == DType::kI8, "{} must be i8, got {}", name, t.ToString());
}

inline void CheckU8(const Tensor& t, Device device, const char* name) {
  CheckOnDevice(t, device, name);
  BATON_CHECK(t.dtype() == DType::kU8, "{} must be u8, got {}", name, t.ToString());
}

}  // namespace baton::cuda
