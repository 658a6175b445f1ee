// Shape checks shared by every backend: a tensor seen as a matrix, element counts, exact shapes.
// Each throws baton::Error naming the argument. Placement and dtype checks stay per backend
// (kernels/cpu/checks.h, kernels/cuda/arg_checks.h).
#pragma once

#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/quantize.h"

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

// CopyColumns' operands: the same rows and dtype, the columns within both.
struct ColumnCopy {
  int64_t rows = 0, src_cols = 0, dst_cols = 0;
};
inline ColumnCopy CheckColumnCopy(const Tensor& src, int64_t src_col, const Tensor& dst,
                                  int64_t dst_col, int64_t cols) {
  const RowsCols s = AsMatrix(src, "src"), d = AsMatrix(dst, "dst");
  BATON_CHECK(s.rows == d.rows && src.dtype() == dst.dtype(),
              "src {} and dst {} must have the same rows and dtype", src.ToString(),
              dst.ToString());
  BATON_CHECK(cols >= 0 && src_col >= 0 && dst_col >= 0 && src_col + cols <= s.cols &&
                  dst_col + cols <= d.cols,
              "columns [{}, {}) of src {} into [{}, {}) of dst {} are out of range", src_col,
              src_col + cols, src.ToString(), dst_col, dst_col + cols, dst.ToString());
  return {s.rows, s.cols, d.cols};
}

// DequantizeInt8's operands: q (K,N), one scale per column, out (K,N).
inline void CheckInt8WeightShapes(const Tensor& q, const Tensor& scale, const Tensor& out) {
  BATON_CHECK(q.dim() == 2, "q {} must be a matrix", q.ToString());
  CheckShape(scale, {q.size(1)}, "scale");
  CheckShape(out, q.shape(), "out");
}

// AdamW8bit's block maxima: one per block of kQuantBlock elements of `param`.
inline void CheckQuantBlocks(const Tensor& param, const Tensor& m_absmax, const Tensor& v_absmax) {
  const int64_t blocks = QuantBlocks(param.numel());
  BATON_CHECK(m_absmax.numel() == blocks && v_absmax.numel() == blocks,
              "absmax {} and {} must hold {} blocks of {} elements of {}", m_absmax.ToString(),
              v_absmax.ToString(), blocks, kQuantBlock, param.ToString());
}

}  // namespace baton
