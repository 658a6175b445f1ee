// Shared fixture for the CPU backend tests: a ledger, a backend, and tensor shorthands.
//
// Tensors the tests make are booked as activations, so the backend's own scratch is the only
// workspace in the ledger (ledger_test.cc relies on it).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/random.h"
#include "core/tensor.h"
#include "kernels/backend.h"
#include "kernels/testing/numeric_check.h"

namespace baton::kernels_test {

class CpuBackendTest : public ::testing::Test {
 protected:
  explicit CpuBackendTest(int threads = 2) : backend_(MakeCpuBackend(ledger_, threads)) {}

  Backend& backend() { return *backend_; }

  Tensor Random(const Shape& shape, float stddev = 1.0f, DType dtype = DType::kF32) {
    return numeric_check::RandomNormal(backend_->allocator(), shape, rng_, stddev, dtype);
  }
  Tensor Zeros(const Shape& shape, DType dtype = DType::kF32) {
    return Tensor::Zeros(backend_->allocator(), shape, dtype, MemCategory::kActivations);
  }
  Tensor Values(const Shape& shape, const std::vector<float>& values, DType dtype = DType::kF32) {
    return numeric_check::FromFloats(backend_->allocator(), shape, values, dtype);
  }
  // i32 ids drawn uniformly from [0, bound).
  Tensor Ids(const Shape& shape, int64_t bound) {
    Tensor t = Tensor::Empty(backend_->allocator(), shape, DType::kI32, MemCategory::kActivations);
    for (int64_t i = 0; i < t.numel(); ++i) {
      t.data<int32_t>()[i] = static_cast<int32_t>(rng_.NextBelow(static_cast<uint64_t>(bound)));
    }
    return t;
  }
  Tensor Clone(const Tensor& t) {
    Tensor c =
        Tensor::Empty(backend_->allocator(), t.shape(), t.dtype(), MemCategory::kActivations);
    CopyHost(t, c);
    return c;
  }

  // Checks `analytic` against finite differences of loss() w.r.t. `input`.
  void ExpectGradient(Tensor& input, const std::function<double()>& loss, const Tensor& analytic,
                      double tolerance = 2e-3, double step = 1e-2) {
    numeric_check::GradCheckOptions options;
    options.tolerance = tolerance;
    options.step = step;
    const numeric_check::GradCheckResult result =
        numeric_check::CheckGradient(input, loss, analytic, options);
    EXPECT_TRUE(result.ok) << result.Describe();
  }

  MemoryLedger ledger_;
  std::unique_ptr<Backend> backend_;
  Rng rng_{20240601};
};

inline std::vector<float> Floats(const Tensor& t) { return ToFloatVector(t); }

// c (m x n, leading dimension ldc) = alpha op(a) op(b) + beta c, summed in double; a and b are
// row-major with leading dimensions lda and ldb, op(a) (m,k) and op(b) (k,n).
inline std::vector<float> ReferenceGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                        float alpha, const std::vector<float>& a, int64_t lda,
                                        const std::vector<float>& b, int64_t ldb, float beta,
                                        std::vector<float> c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = trans_a ? a[p * lda + i] : a[i * lda + p];
        const double bv = trans_b ? b[j * ldb + p] : b[p * ldb + j];
        sum += av * bv;
      }
      float& out = c[i * ldc + j];
      out = static_cast<float>(alpha * sum + beta * static_cast<double>(out));
    }
  }
  return c;
}

// Packed documents: segment starts (B,T) for rows whose documents start at `starts` (row b's
// list), as data/packing.h makes them.
inline Tensor SegmentStarts(Allocator& allocator, int64_t seq,
                            const std::vector<std::vector<int32_t>>& starts) {
  Tensor t = Tensor::Empty(allocator, {static_cast<int64_t>(starts.size()), seq}, DType::kI32,
                           MemCategory::kActivations);
  for (size_t b = 0; b < starts.size(); ++b) {
    int32_t current = 0;
    for (int64_t i = 0; i < seq; ++i) {
      if (std::find(starts[b].begin(), starts[b].end(), i) != starts[b].end()) {
        current = static_cast<int32_t>(i);
      }
      t.data<int32_t>()[b * seq + i] = current;
    }
  }
  return t;
}

}  // namespace baton::kernels_test
