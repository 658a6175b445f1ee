// Shape checks shared by every backend: a tensor seen as a matrix, element counts, exact shapes.
// Each throws baton::Error naming the argument. Placement and dtype checks stay per backend
// (kernels/cpu/checks.h, kernels/cuda/arg_checks.h).
#pragma once

#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"

namespace baton {

// A tensor seen as a matrix: its last dimension is the columns, all others the rows.
struct RowsCols {
  int64_t rows = 0;
  int64_t cols = 0;
};

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

}  // namespace baton
