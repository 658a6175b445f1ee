// Helpers the layers share (internal to model/): tensor allocation through the backend's
// allocator, row views, parameter groups, and the weight-gradient sink that splits backward for
// zero-bubble schedules.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/backend.h"
#include "model/layer.h"

namespace baton::model_ops {

// Uninitialised / zeroed tensors from the backend's allocator, booked under `category`.
Tensor NewTensor(Backend& backend, Shape shape, DType dtype, MemCategory category);
Tensor NewZeros(Backend& backend, Shape shape, DType dtype, MemCategory category);

// (..., C) seen as (N, C), N the product of the leading dimensions.
Tensor Rows(const Tensor& t);

// Host round trips of the small tensors the host decides on (a mixture of experts' logits,
// routing and row counts). ToHost: the host's f32 copy of a device tensor, read back in its own
// dtype, then widened here (a GPU's converting copy would stage on the device, which the
// ledger-only backend, returning before any copy, would not book). ToHostI32: its i32 copy. Both
// zeros for a meta tensor. ToDevice: a device tensor of `shape` and `dtype`, booked as workspace,
// holding `host`'s values (f32 or i32).
std::vector<float> ToHost(Backend& backend, const Tensor& t);
std::vector<int32_t> ToHostI32(Backend& backend, const Tensor& t);
Tensor ToDevice(Backend& backend, const std::vector<float>& host, Shape shape, DType dtype);
Tensor ToDevice(Backend& backend, const std::vector<int32_t>& host, Shape shape, DType dtype);

// A norm's parameters: a LayerNorm, out = norm(x) * weight + bias (GPT-2), or an RMSNorm,
// out = x / rms(x) * weight with no bias (Llama; eps its epsilon).
struct Norm {
  Param* weight = nullptr;
  Param* bias = nullptr;  // null for RMSNorm
  bool rms = false;
  float eps = 1e-5f;
};

// out (N,C) = norm(x (N,C)) with its row statistics: mean (N) f32 for a LayerNorm (undefined for
// an RMSNorm, which has none) and rstd (N) f32, both as the backend's norm forward writes them.
void NormRowsForward(Backend& backend, const Norm& norm, const Tensor& x, Tensor& out,
                     const Tensor& mean, Tensor& rstd);
// dx (N,C) += norm'(x)^T dout; the norm's weight (and bias) gradients accumulate.
void NormRowsBackward(Backend& backend, const Norm& norm, const Tensor& dout, const Tensor& x,
                      const Tensor& mean, const Tensor& rstd, Tensor& dx);

// A Hugging Face Conv1D: y = x @ weight + bias, weight (in, out); or, low rank (model.low_rank),
// y = (x @ weight) @ weight_v + bias with weight = U (in, r) and weight_v = V (r, out). Llama's
// linears have no bias (null).
struct Linear {
  Param* weight = nullptr;
  Param* bias = nullptr;
  Param* weight_v = nullptr;  // low rank only
};

// The weight-gradient GEMMs of one backward pass, each `weight.grad += lhs^T @ rhs`: run at once
// (Backward) or kept as stash entries "<param>.lhs"/"<param>.rhs" for BackwardWeight
// (BackwardInput).
class WeightGradSink {
 public:
  WeightGradSink(Backend& backend, bool defer) : backend_(backend), defer_(defer) {}
  WeightGradSink(const WeightGradSink&) = delete;
  WeightGradSink& operator=(const WeightGradSink&) = delete;

  bool deferred() const { return defer_; }
  // Where a tensor that becomes a GEMM operand is booked: activations when deferred (it outlives
  // the call, in the stash), workspace otherwise (freed within the call).
  MemCategory operand_category() const {
    return defer_ ? MemCategory::kActivations : MemCategory::kWorkspace;
  }
  void Add(Param& weight, const Tensor& lhs, const Tensor& rhs);
  // Ends the pass: clears the stash and, when deferred, leaves only the kept operands in it.
  void Finish(Stash& stash);

 private:
  struct Pending {
    Param* weight;
    Tensor lhs;
    Tensor rhs;
  };
  Backend& backend_;
  bool defer_;
  std::vector<Pending> pending_;
};

// BackwardWeight: runs the GEMMs kept in `stash` for `weights`, in that order, then clears it.
// Throws if the stash holds anything else (e.g. BackwardInput did not run).
void RunDeferredWeightGrads(Backend& backend, const std::vector<Param*>& weights, Stash& stash);

}  // namespace baton::model_ops
