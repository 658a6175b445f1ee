// CpuBackend: the mixture-of-experts row moves (Backend::MoeDispatch, MoeCombine and the combine
// weights' gradient). Each validates its arguments, including every slot, then runs one token per
// task: a token's rows are its own (no two choices share a permuted row), so the tasks never
// write the same memory and the sums run in a fixed order whatever the thread count. 16-bit rows
// go through the running thread's f32 buffers (PieceBuffers), as the other row kernels' do.
#include "core/error.h"
#include "kernels/cpu/checks.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/f32_staging.h"
#include "kernels/cpu/parallel.h"

namespace baton::cpu {
namespace {

// The routing of `tokens` rows to `rows` permuted rows: slots (tokens, k) i32, weights (tokens,
// k) f32 or undefined. Returns k.
int64_t CheckRouting(const Tensor& slots, const Tensor& weights, int64_t tokens) {
  CheckI32(slots, "slots");
  BATON_CHECK(slots.dim() == 2 && slots.size(0) == tokens,
              "slots {} must be (N={}, k) for a token's k choices", slots.ToString(), tokens);
  if (weights.defined()) {
    CheckF32(weights, "weights");
    CheckShape(weights, slots.shape(), "weights");
  }
  return slots.size(1);
}

// Every slot is -1 or a row of `rows` (read only where the backend computes: meta slots hold no
// values).
void CheckSlots(const Tensor& slots, int64_t rows) {
  const int32_t* ps = slots.data<int32_t>();
  for (int64_t i = 0; i < slots.numel(); ++i) {
    BATON_CHECK(ps[i] >= -1 && ps[i] < rows, "slot {} of token {} is {}, outside [-1, {})",
                i % slots.size(1), i / slots.size(1), ps[i], rows);
  }
}

}  // namespace

void CpuBackend::MoeDispatch(const Tensor& x, const Tensor& slots, const Tensor& weights,
                             Tensor& out) {
  CheckFloat(x, "x");
  CheckFloat(out, "out");
  const RowsCols xm = AsMatrix(x, "x");
  const RowsCols om = AsMatrix(out, "out");
  BATON_CHECK(om.cols == xm.cols, "out {} and x {} differ in columns", out.ToString(),
              x.ToString());
  const int64_t k = CheckRouting(slots, weights, xm.rows);
  const int64_t cols = xm.cols;
  Tensor buffers = PieceBuffers({&x, &out}, cols);
  Compute([&] {
    CheckSlots(slots, om.rows);
    const int32_t* ps = slots.data<int32_t>();
    const float* pw = weights.defined() ? weights.data<float>() : nullptr;
    ParallelForWithSlot(xm.rows, &pool_, k * cols, [&](int64_t n, int slot) {
      const float* px = LoadChunk(x, n * cols, cols, PieceBuffer(buffers, slot, 2, 0, cols));
      for (int64_t j = 0; j < k; ++j) {
        const int64_t row = ps[n * k + j];
        if (row < 0) continue;
        const float w = pw != nullptr ? pw[n * k + j] : 1.0f;
        float* po = ChunkTarget(out, row * cols, PieceBuffer(buffers, slot, 2, 1, cols));
        for (int64_t c = 0; c < cols; ++c) po[c] = w * px[c];
        StoreChunk(po, out, row * cols, cols);
      }
    });
  });
}

void CpuBackend::MoeCombine(const Tensor& y, const Tensor& slots, const Tensor& weights,
                            Tensor& out) {
  CheckFloat(y, "y");
  CheckFloat(out, "out");
  const RowsCols ym = AsMatrix(y, "y");
  const RowsCols om = AsMatrix(out, "out");
  BATON_CHECK(om.cols == ym.cols, "out {} and y {} differ in columns", out.ToString(),
              y.ToString());
  const int64_t k = CheckRouting(slots, weights, om.rows);
  const int64_t cols = om.cols;
  Tensor buffers = PieceBuffers({&y, &out}, cols);
  Compute([&] {
    CheckSlots(slots, ym.rows);
    const int32_t* ps = slots.data<int32_t>();
    const float* pw = weights.defined() ? weights.data<float>() : nullptr;
    ParallelForWithSlot(om.rows, &pool_, k * cols, [&](int64_t n, int slot) {
      float* po = LoadChunkInOut(out, n * cols, cols, PieceBuffer(buffers, slot, 2, 0, cols));
      for (int64_t j = 0; j < k; ++j) {
        const int64_t row = ps[n * k + j];
        if (row < 0) continue;
        const float w = pw != nullptr ? pw[n * k + j] : 1.0f;
        const float* py = LoadChunk(y, row * cols, cols, PieceBuffer(buffers, slot, 2, 1, cols));
        for (int64_t c = 0; c < cols; ++c) po[c] += w * py[c];
      }
      StoreChunk(po, out, n * cols, cols);
    });
  });
}

void CpuBackend::MoeCombineWeightsBackward(const Tensor& dout, const Tensor& y, const Tensor& slots,
                                           Tensor& dweights) {
  CheckFloat(dout, "dout");
  CheckFloat(y, "y");
  const RowsCols dm = AsMatrix(dout, "dout");
  const RowsCols ym = AsMatrix(y, "y");
  BATON_CHECK(dm.cols == ym.cols, "dout {} and y {} differ in columns", dout.ToString(),
              y.ToString());
  CheckRouting(slots, dweights, dm.rows);
  BATON_CHECK(dweights.defined(), "dweights (N, k) f32 is required");
  const int64_t k = slots.size(1);
  const int64_t cols = dm.cols;
  Tensor buffers = PieceBuffers({&dout, &y}, cols);
  Compute([&] {
    CheckSlots(slots, ym.rows);
    const int32_t* ps = slots.data<int32_t>();
    float* pdw = dweights.data<float>();
    ParallelForWithSlot(dm.rows, &pool_, k * cols, [&](int64_t n, int slot) {
      const float* pd = LoadChunk(dout, n * cols, cols, PieceBuffer(buffers, slot, 2, 0, cols));
      for (int64_t j = 0; j < k; ++j) {
        const int64_t row = ps[n * k + j];
        if (row < 0) continue;
        const float* py = LoadChunk(y, row * cols, cols, PieceBuffer(buffers, slot, 2, 1, cols));
        float dot = 0.0f;
        for (int64_t c = 0; c < cols; ++c) dot += pd[c] * py[c];
        pdw[n * k + j] += dot;
      }
    });
  });
}

}  // namespace baton::cpu
