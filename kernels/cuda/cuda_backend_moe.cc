// CudaBackend: the mixture-of-experts row moves (Backend::MoeDispatch, MoeCombine and the combine
// weights' gradient). Each validates its arguments as the CPU backend does
// (kernels/cpu/cpu_backend_moe.cc), slots' values aside (device memory: the kernels skip a slot
// out of range), and queues the kernels of moe.cu. None needs workspace; in meta mode each
// validates and queues nothing.
#include "core/error.h"
#include "kernels/cuda/arg_checks.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"

namespace baton::cuda {
namespace {

// slots (tokens, k) i32 and weights (tokens, k) f32 or undefined, on `device`. Returns k.
int64_t CheckRouting(const Tensor& slots, const Tensor& weights, int64_t tokens, Device device) {
  CheckI32(slots, device, "slots");
  BATON_CHECK(slots.dim() == 2 && slots.size(0) == tokens,
              "slots {} must be (N={}, k) for a token's k choices", slots.ToString(), tokens);
  if (weights.defined()) {
    CheckF32(weights, device, "weights");
    CheckShape(weights, slots.shape(), "weights");
  }
  return slots.size(1);
}

const float* WeightsOf(const Tensor& weights) {
  return weights.defined() ? static_cast<const float*>(weights.raw()) : nullptr;
}

}  // namespace

void CudaBackend::MoeDispatch(const Tensor& x, const Tensor& slots, const Tensor& weights,
                              Tensor& out) {
  Activate();
  CheckFloat(x, device(), "x");
  CheckFloat(out, device(), "out");
  const RowsCols xm = AsMatrix(x, "x");
  const RowsCols om = AsMatrix(out, "out");
  BATON_CHECK(om.cols == xm.cols, "out {} and x {} differ in columns", out.ToString(),
              x.ToString());
  const int64_t k = CheckRouting(slots, weights, xm.rows, device());
  Compute([&] {
    LaunchMoeDispatch(x.raw(), x.dtype(), static_cast<const int32_t*>(slots.raw()),
                      WeightsOf(weights), out.raw(), out.dtype(), xm.rows, k, om.rows, xm.cols,
                      stream_);
  });
}

void CudaBackend::MoeCombine(const Tensor& y, const Tensor& slots, const Tensor& weights,
                             Tensor& out) {
  Activate();
  CheckFloat(y, device(), "y");
  CheckFloat(out, device(), "out");
  const RowsCols ym = AsMatrix(y, "y");
  const RowsCols om = AsMatrix(out, "out");
  BATON_CHECK(om.cols == ym.cols, "out {} and y {} differ in columns", out.ToString(),
              y.ToString());
  const int64_t k = CheckRouting(slots, weights, om.rows, device());
  Compute([&] {
    LaunchMoeCombine(y.raw(), y.dtype(), static_cast<const int32_t*>(slots.raw()),
                     WeightsOf(weights), out.raw(), out.dtype(), om.rows, k, ym.rows, om.cols,
                     stream_);
  });
}

void CudaBackend::MoeCombineWeightsBackward(const Tensor& dout, const Tensor& y,
                                            const Tensor& slots, Tensor& dweights) {
  Activate();
  CheckFloat(dout, device(), "dout");
  CheckFloat(y, device(), "y");
  const RowsCols dm = AsMatrix(dout, "dout");
  const RowsCols ym = AsMatrix(y, "y");
  BATON_CHECK(dm.cols == ym.cols, "dout {} and y {} differ in columns", dout.ToString(),
              y.ToString());
  BATON_CHECK(dweights.defined(), "dweights (N, k) f32 is required");
  const int64_t k = CheckRouting(slots, dweights, dm.rows, device());
  Compute([&] {
    LaunchMoeCombineWeightsBackward(
        dout.raw(), dout.dtype(), y.raw(), y.dtype(), static_cast<const int32_t*>(slots.raw()),
        static_cast<float*>(dweights.raw()), dm.rows, k, ym.rows, dm.cols, stream_);
  });
}

}  // namespace baton::cuda
