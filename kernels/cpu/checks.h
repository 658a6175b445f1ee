// Argument checks shared by the CPU backend's methods: dtype, placement, contiguity, shapes.
//
// Every check throws baton::Error naming the argument, so a caller sees which tensor was wrong.
// Internal to kernels/cpu.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"

namespace baton::cpu {

// A tensor seen as a matrix: its last dimension is the columns, all others the rows.
struct RowsCols {
  int64_t rows = 0;
  int64_t cols = 0;
};

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

}  // namespace baton::cpu
