// Helpers the layers share (see ops.h).
#include "model/ops.h"

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
