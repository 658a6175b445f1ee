// Numeric test helpers shared by the kernel, model and CUDA tests: random tensors, normalised
// error, and a finite-difference gradient checker usable for any backward.
//
// Host tensors only. Gradient checking differentiates a scalar: for a function with a tensor
// output, project it with a random tensor r (ProjectedSum: sum(out * r) in double) and run the
// analytic backward with dout = r. The checker then perturbs the f32 input element by element
// and compares f64 central differences with the analytic gradient by normalised error.
// Stateless functions; safe to call from any thread on tensors nobody else is writing.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/memory.h"
#include "core/random.h"
#include "core/tensor.h"

namespace baton::numeric_check {

// Fills t (host, contiguous, any float dtype) with N(mean, stddev) draws, in element order.
void FillNormal(Tensor& t, Rng& rng, float stddev = 1.0f, float mean = 0.0f);
// A new host tensor of `shape` filled by FillNormal.
Tensor RandomNormal(Allocator& allocator, const Shape& shape, Rng& rng, float stddev = 1.0f,
                    DType dtype = DType::kF32, MemCategory category = MemCategory::kActivations);
// A new host tensor holding `values` (converted to `dtype`).
Tensor FromFloats(Allocator& allocator, const Shape& shape, std::span<const float> values,
                  DType dtype = DType::kF32, MemCategory category = MemCategory::kActivations);

// Columns [col0, col0 + cols) of a host tensor seen as (rows, its last dimension), as a new
// (rows, cols) host tensor in t's dtype (the same bits): one rank's shard of a vocab-parallel
// tensor's columns.
Tensor ColumnsOf(Allocator& allocator, const Tensor& t, int64_t col0, int64_t cols);

// ||a - b|| / max(||b||, 1e-30), b being the reference; 0 when both are zero.
double NormalisedError(std::span<const float> a, std::span<const float> b);
// The same for two float tensors (any dtypes) with the same number of elements.
double NormalisedError(const Tensor& a, const Tensor& b);

// sum(out * projection) in double: the scalar whose gradient, w.r.t. out, is `projection`.
double ProjectedSum(const Tensor& out, const Tensor& projection);

struct GradCheckOptions {
  double step = 1e-2;          // central-difference step, in the input's units
  double tolerance = 1e-2;     // largest normalised error that passes
  int64_t max_elements = 256;  // check a random subset of inputs larger than this (0: all)
  uint64_t seed = 1;           // picks that subset
};

struct GradCheckEntry {
  int64_t index = 0;
  double analytic = 0.0;
  double numeric = 0.0;
};

struct GradCheckResult {
  double error = 0.0;  // normalised error of analytic vs numeric over the checked elements
  double tolerance = 0.0;
  bool ok = false;                      // error <= tolerance
  std::vector<GradCheckEntry> entries;  // every checked element, in index order
  // "normalised error 3e-4 (tolerance 1e-2) over 256 elements; worst: [17] analytic ..."
  std::string Describe() const;
};

// Compares `analytic_grad` (same number of elements as `input`, any float dtype) with central
// differences of loss() w.r.t. `input` (host, contiguous f32). Each checked element is set to
// x +- step in place and restored; the difference quotient uses the perturbed values actually
// stored. loss() must recompute everything from the current input.
GradCheckResult CheckGradient(Tensor& input, const std::function<double()>& loss,
                              const Tensor& analytic_grad, const GradCheckOptions& options = {});

}  // namespace baton::numeric_check
