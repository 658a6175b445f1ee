// Helpers for the model tests (test-only): a CPU backend with its ledger, tiny dims, random
// inputs, and byte-exact snapshots of tensors.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"
#include "kernels/backend.h"
#include "kernels/testing/numeric_check.h"
#include "model/dims.h"
#include "model/layer.h"

namespace baton::model_test {

// V=11, T=5, C=8, NH=2, L=2: small enough for finite differences over every parameter.
inline ModelDims TinyDims() { return {11, 5, 2, 2, 8}; }

struct CpuFixture {
  MemoryLedger ledger;
  std::unique_ptr<Backend> backend = MakeCpuBackend(ledger, 1);
  Allocator& allocator() { return backend->allocator(); }
};

// A Backend whose kernels run on a CPU backend booking its own allocations (16-bit staging,
// kernel scratch) in `kernel_ledger`, while what the layers allocate through allocator() is
// booked in `layer_ledger`: the cost model's workspace peaks are about the latter.
class SplitLedgerBackend final : public Backend {
 public:
  MemoryLedger layer_ledger;
  MemoryLedger kernel_ledger;

  Device device() const override { return inner_->device(); }
  Allocator& allocator() override { return allocator_; }
  void Synchronize() override { inner_->Synchronize(); }
  void Zero(Tensor& t) override { inner_->Zero(t); }
  void Copy(const Tensor& src, Tensor& dst) override { inner_->Copy(src, dst); }
  void Matmul(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& out, bool acc,
              const Tensor* bias) override {
    inner_->Matmul(a, ta, b, tb, out, acc, bias);
  }
  void BiasBackward(const Tensor& dout, Tensor& dbias) override {
    inner_->BiasBackward(dout, dbias);
  }
  void EmbeddingForward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                        Tensor& out) override {
    inner_->EmbeddingForward(tokens, wte, wpe, out);
  }
  void EmbeddingBackward(const Tensor& tokens, const Tensor& dout, Tensor& dwte,
                         Tensor& dwpe) override {
    inner_->EmbeddingBackward(tokens, dout, dwte, dwpe);
  }
  void LayerNormForward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& out,
                        Tensor& mean, Tensor& rstd) override {
    inner_->LayerNormForward(x, w, b, out, mean, rstd);
  }
  void LayerNormBackward(const Tensor& dout, const Tensor& x, const Tensor& w, const Tensor& mean,
                         const Tensor& rstd, Tensor& dx, Tensor& dw, Tensor& db) override {
    inner_->LayerNormBackward(dout, x, w, mean, rstd, dx, dw, db);
  }
  void GeluForward(const Tensor& x, Tensor& out) override { inner_->GeluForward(x, out); }
  void GeluBackward(const Tensor& x, const Tensor& dout, Tensor& dx) override {
    inner_->GeluBackward(x, dout, dx);
  }
  void AttentionForward(const Tensor& qkv, int heads, Tensor& out, Tensor& probs) override {
    inner_->AttentionForward(qkv, heads, out, probs);
  }
  void AttentionBackward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, int heads,
                         Tensor& dqkv) override {
    inner_->AttentionBackward(dout, qkv, probs, heads, dqkv);
  }
  void CrossEntropyForward(const Tensor& logits, const Tensor& targets, Tensor& loss) override {
    inner_->CrossEntropyForward(logits, targets, loss);
  }
  void CrossEntropyBackward(const Tensor& logits, const Tensor& targets, float scale,
                            Tensor& dlogits) override {
    inner_->CrossEntropyBackward(logits, targets, scale, dlogits);
  }
  void Add(const Tensor& a, const Tensor& b, Tensor& out) override { inner_->Add(a, b, out); }
  void Accumulate(const Tensor& x, Tensor& acc) override { inner_->Accumulate(x, acc); }
  void Scale(Tensor& t, float factor) override { inner_->Scale(t, factor); }
  double SumOfSquares(const Tensor& t) override { return inner_->SumOfSquares(t); }
  bool AllFinite(const Tensor& t) override { return inner_->AllFinite(t); }
  void AdamW(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWConfig& config,
             float grad_scale) override {
    inner_->AdamW(param, grad, m, v, config, grad_scale);
  }

 private:
  std::unique_ptr<Backend> inner_ = MakeCpuBackend(kernel_ledger, 1);
  CpuAllocator allocator_{layer_ledger};
};

// Tokens (B,T) i32 uniform in [0, vocab), booked as activations.
inline Tensor RandomTokens(Allocator& allocator, int64_t b, int64_t t, int vocab, Rng& rng) {
  Tensor tokens = Tensor::Empty(allocator, {b, t}, DType::kI32, MemCategory::kActivations);
  int32_t* data = tokens.data<int32_t>();
  for (int64_t i = 0; i < b * t; ++i) {
    data[i] = static_cast<int32_t>(rng.NextBelow(static_cast<uint64_t>(vocab)));
  }
  return tokens;
}

inline MicroBatch RandomBatch(Allocator& allocator, int64_t b, int64_t t, int vocab, Rng& rng) {
  MicroBatch batch;
  batch.tokens = RandomTokens(allocator, b, t, vocab, rng);
  batch.targets = RandomTokens(allocator, b, t, vocab, rng);
  return batch;
}

inline Tensor RandomActivation(Allocator& allocator, const Shape& shape, DType dtype, Rng& rng,
                               float stddev = 1.0f) {
  return numeric_check::RandomNormal(allocator, shape, rng, stddev, dtype,
                                     MemCategory::kActivations);
}

// The tensor's bytes, for bit-for-bit comparisons.
inline std::string Bits(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return std::string(static_cast<const char*>(t.raw()), t.nbytes());
}

// Every parameter gradient's bytes, in params() order.
inline std::vector<std::string> GradBits(Layer& layer) {
  std::vector<std::string> out;
  for (Param* p : layer.params()) out.push_back(Bits(p->grad));
  return out;
}

inline void ZeroGrads(Backend& backend, Layer& layer) {
  for (Param* p : layer.params()) backend.Zero(p->grad);
}

// Replaces every parameter value (f32 or 16-bit, host) with N(mean, stddev) draws: larger
// weights than the init make finite-difference checks exercise the nonlinearities.
inline void RandomizeParams(Layer& layer, Rng& rng, float stddev) {
  for (Param* p : layer.params()) {
    const bool norm_weight =
        p->name.find("ln_") != std::string::npos && p->name.find(".weight") != std::string::npos;
    numeric_check::FillNormal(p->value, rng, stddev, norm_weight ? 1.0f : 0.0f);
  }
}

}  // namespace baton::model_test
