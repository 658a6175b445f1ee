// Helpers the layers share (see ops.h).
#include "model/ops.h"

#include <cstddef>
#include <type_traits>
#include <utility>

#include "core/error.h"

namespace baton::model_ops {

Tensor NewTensor(Backend& backend, Shape shape, DType dtype, MemCategory category) {
  return Tensor::Empty(backend.allocator(), std::move(shape), dtype, category);
}

Tensor NewZeros(Backend& backend, Shape shape, DType dtype, MemCategory category) {
  Tensor t = NewTensor(backend, std::move(shape), dtype, category);
  backend.Zero(t);
  return t;
}

Tensor Rows(const Tensor& t) { return t.View({-1, t.size(-1)}); }

std::vector<float> ToHost(Backend& backend, const Tensor& t) {
  std::vector<float> host(static_cast<size_t>(t.numel()), 0.0f);
  if (t.is_meta()) return host;
  std::vector<std::byte> raw(t.nbytes());
  Tensor view = Tensor::Wrap(raw.data(), t.shape(), t.dtype());
  backend.Copy(t, view);
  backend.Synchronize();
  ConvertFloats(raw.data(), t.dtype(), host.data(), DType::kF32, host.size());
  return host;
}

std::vector<int32_t> ToHostI32(Backend& backend, const Tensor& t) {
  std::vector<int32_t> host(static_cast<size_t>(t.numel()), 0);
  if (t.is_meta()) return host;
  Tensor view = Tensor::Wrap(host.data(), t.shape(), DType::kI32);
  backend.Copy(t, view);
  backend.Synchronize();
  return host;
}

namespace {

template <typename T>
Tensor HostToDevice(Backend& backend, const std::vector<T>& host, Shape shape, DType dtype) {
  Tensor t = NewTensor(backend, shape, dtype, MemCategory::kWorkspace);
  if (t.is_meta()) return t;
  constexpr DType kHostDtype = std::is_same_v<T, int32_t> ? DType::kI32 : DType::kF32;
  backend.Copy(Tensor::Wrap(const_cast<T*>(host.data()), std::move(shape), kHostDtype), t);
  return t;
}

}  // namespace

Tensor ToDevice(Backend& backend, const std::vector<float>& host, Shape shape, DType dtype) {
  return HostToDevice(backend, host, std::move(shape), dtype);
}

Tensor ToDevice(Backend& backend, const std::vector<int32_t>& host, Shape shape, DType dtype) {
  return HostToDevice(backend, host, std::move(shape), dtype);
}

void NormRowsForward(Backend& backend, const Norm& norm, const Tensor& x, Tensor& out,
                     const Tensor& mean, Tensor& rstd) {
  if (norm.rms) {
    backend.RmsNormForward(x, norm.weight->value, norm.eps, out, rstd);
    return;
  }
  Tensor mean_out = mean;
  backend.LayerNormForward(x, norm.weight->value, norm.bias->value, out, mean_out, rstd);
}

void NormRowsBackward(Backend& backend, const Norm& norm, const Tensor& dout, const Tensor& x,
                      const Tensor& mean, const Tensor& rstd, Tensor& dx) {
  if (norm.rms) {
    backend.RmsNormBackward(dout, x, norm.weight->value, rstd, dx, norm.weight->grad);
    return;
  }
  backend.LayerNormBackward(dout, x, norm.weight->value, mean, rstd, dx, norm.weight->grad,
                            norm.bias->grad);
}

void WeightGradSink::Add(Param& weight, const Tensor& lhs, const Tensor& rhs) {
  if (defer_) {
    pending_.push_back({&weight, lhs, rhs});
  } else {
    backend_.Matmul(lhs, /*trans_a=*/true, rhs, /*trans_b=*/false, weight.grad,
                    /*accumulate=*/true);
  }
}

void WeightGradSink::Finish(Stash& stash) {
  stash.Clear();
  for (Pending& p : pending_) {
    stash.Put(p.weight->name + ".lhs", std::move(p.lhs));
    stash.Put(p.weight->name + ".rhs", std::move(p.rhs));
  }
  pending_.clear();
}

void RunDeferredWeightGrads(Backend& backend, const std::vector<Param*>& weights, Stash& stash) {
  int used = 0;
  for (Param* weight : weights) {
    const std::string lhs = weight->name + ".lhs";
    if (!stash.Has(lhs)) continue;
    backend.Matmul(stash.Get(lhs), /*trans_a=*/true, stash.Get(weight->name + ".rhs"),
                   /*trans_b=*/false, weight->grad, /*accumulate=*/true);
    used += 2;
  }
  BATON_CHECK(used == stash.size(),
              "BackwardWeight found {} stash entries it does not know (did BackwardInput run?)",
              stash.size() - used);
  stash.Clear();
}

}  // namespace baton::model_ops
