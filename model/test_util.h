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
