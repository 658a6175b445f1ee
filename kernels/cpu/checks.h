// Argument checks shared by the CPU backend's methods: dtype, placement, contiguity, shapes.
//
// Every check throws baton::Error naming the argument, so a caller sees which tensor was wrong.
// Internal to kernels/cpu.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/shape_checks.h"

namespace baton::cpu {

using ::baton::AsMatrix;
using ::baton::CheckNumel;
using ::baton::CheckShape;
using ::baton::RowsCols;

inline void CheckHostContiguous(const Tensor& t, const char* name) {
  BATON_CHECK(t.defined(), "{} is undefined", name);
  BATON_CHECK(t.device().is_cpu(), "{} is on {}, not the host", name, t.device().ToString());
  BATON_CHECK(t.is_contiguous(), "{} {} is not contiguous", name, t.ToString());
}

inline void CheckFloat(const Tensor& t, const char* name) {
  CheckHostContiguous(t, name);
  BATON_CHECK(IsFloating(t.dtype()), "{} must be a float tensor, got {}", name, t.ToString());
}

inline void CheckF32(const Tensor& t, const char* name) {
  CheckHostContiguous(t, name);
  BATON_CHECK(t.dtype() == DType::kF32, "{} must be f32, got {}", name, t.ToString());
}

inline void CheckI32(const Tensor& t, const char* name) {
  CheckHostContiguous(t, name);
  BATON_CHECK(t.dtype() == DType::kI32, "{} must be i32, got {}", name, t.ToString());
}

inline void CheckU8(const Tensor& t, const char* name) {
  CheckHostContiguous(t, name);
  BATON_CHECK(t.dtype() == DType::kU8, "{} must be u8, got {}", name, t.ToString());
}

inline void CheckI8(const Tensor& t, const char* name) {
  CheckHostContiguous(t, name);
  BATON_CHECK(t.dtype() == DType::kI8, "{} must be i8, got {}", name, t.ToString());
}

}  // namespace baton::cpu
