// Numeric test helpers: random tensors, normalised error, finite-difference gradient checks
// (see numeric_check.h).
#include "kernels/testing/numeric_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "core/error.h"

namespace baton::numeric_check {
namespace {

void CheckHostFloat(const Tensor& t, const char* name) {
  BATON_CHECK(t.defined() && t.device().is_cpu() && t.is_contiguous() && IsFloating(t.dtype()),
              "{} must be a contiguous host float tensor, got {}", name, t.ToString());
}

// The indices to check: all of them, or `max_elements` distinct ones drawn at random, sorted.
std::vector<int64_t> PickIndices(int64_t numel, const GradCheckOptions& options) {
  std::vector<int64_t> indices;
  if (options.max_elements <= 0 || numel <= options.max_elements) {
    for (int64_t i = 0; i < numel; ++i) indices.push_back(i);
    return indices;
  }
  Rng rng(options.seed);
  std::unordered_set<int64_t> seen;
  while (static_cast<int64_t>(indices.size()) < options.max_elements) {
    const auto i = static_cast<int64_t>(rng.NextBelow(static_cast<uint64_t>(numel)));
    if (seen.insert(i).second) indices.push_back(i);
  }
  std::sort(indices.begin(), indices.end());
  return indices;
}

}  // namespace

void FillNormal(Tensor& t, Rng& rng, float stddev, float mean) {
  CheckHostFloat(t, "t");
  std::vector<float> values(static_cast<size_t>(t.numel()));
  for (float& v : values) v = mean + stddev * static_cast<float>(rng.NextNormal());
  Tensor view = Tensor::Wrap(values.data(), t.shape(), DType::kF32);
  CopyHost(view, t);
}

Tensor RandomNormal(Allocator& allocator, const Shape& shape, Rng& rng, float stddev, DType dtype,
                    MemCategory category) {
  Tensor t = Tensor::Empty(allocator, shape, dtype, category);
  FillNormal(t, rng, stddev);
  return t;
}

Tensor FromFloats(Allocator& allocator, const Shape& shape, std::span<const float> values,
                  DType dtype, MemCategory category) {
  BATON_CHECK(NumElements(shape) == static_cast<int64_t>(values.size()), "{} values for shape {}",
              values.size(), ToString(shape));
  Tensor t = Tensor::Empty(allocator, shape, dtype, category);
  Tensor view = Tensor::Wrap(const_cast<float*>(values.data()), shape, DType::kF32);
  CopyHost(view, t);
  return t;
}

Tensor ColumnsOf(Allocator& allocator, const Tensor& t, int64_t col0, int64_t cols) {
  const int64_t width = t.size(-1), rows = t.numel() / width;
  BATON_CHECK(col0 >= 0 && cols >= 0 && col0 + cols <= width, "columns [{}, {}) of {}", col0,
              col0 + cols, t.ToString());
  const std::vector<float> all = ToFloatVector(t);
  std::vector<float> part;
  part.reserve(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    part.insert(part.end(), all.begin() + r * width + col0, all.begin() + r * width + col0 + cols);
  }
  return FromFloats(allocator, {rows, cols}, part, t.dtype());
}

double NormalisedError(std::span<const float> a, std::span<const float> b) {
  BATON_CHECK(a.size() == b.size(), "NormalisedError of {} vs {} elements", a.size(), b.size());
  double diff = 0.0;
  double norm = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    diff += d * d;
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

double NormalisedError(const Tensor& a, const Tensor& b) {
  CheckHostFloat(a, "a");
  CheckHostFloat(b, "b");
  const std::vector<float> va = ToFloatVector(a);
  const std::vector<float> vb = ToFloatVector(b);
  return NormalisedError(va, vb);
}

double ProjectedSum(const Tensor& out, const Tensor& projection) {
  CheckHostFloat(out, "out");
  CheckHostFloat(projection, "projection");
  BATON_CHECK(out.numel() == projection.numel(), "projection {} for output {}",
              projection.ToString(), out.ToString());
  const std::vector<float> vo = ToFloatVector(out);
  const std::vector<float> vp = ToFloatVector(projection);
  double sum = 0.0;
  for (size_t i = 0; i < vo.size(); ++i) sum += static_cast<double>(vo[i]) * vp[i];
  return sum;
}

std::string GradCheckResult::Describe() const {
  std::string text = fmt::format("normalised error {:.3g} (tolerance {:.3g}) over {} elements",
                                 error, tolerance, entries.size());
  std::vector<GradCheckEntry> worst = entries;
  std::sort(worst.begin(), worst.end(), [](const GradCheckEntry& x, const GradCheckEntry& y) {
    return std::abs(x.analytic - x.numeric) > std::abs(y.analytic - y.numeric);
  });
  if (worst.size() > 5) worst.resize(5);
  text += "; worst:";
  for (const GradCheckEntry& e : worst) {
    text += fmt::format(" [{}] analytic {:.6g} numeric {:.6g};", e.index, e.analytic, e.numeric);
  }
  return text;
}

GradCheckResult CheckGradient(Tensor& input, const std::function<double()>& loss,
                              const Tensor& analytic_grad, const GradCheckOptions& options) {
  BATON_CHECK(input.defined() && input.device().is_cpu() && input.is_contiguous() &&
                  input.dtype() == DType::kF32,
              "CheckGradient perturbs a contiguous host f32 input, got {}", input.ToString());
  CheckHostFloat(analytic_grad, "analytic_grad");
  BATON_CHECK(analytic_grad.numel() == input.numel(), "gradient {} for input {}",
              analytic_grad.ToString(), input.ToString());
  BATON_CHECK(options.step > 0.0, "step must be positive");
  const std::vector<float> analytic = ToFloatVector(analytic_grad);
  float* x = input.data<float>();
  GradCheckResult result;
  result.tolerance = options.tolerance;
  std::vector<float> analytic_checked, numeric_checked;
  for (int64_t i : PickIndices(input.numel(), options)) {
    const float original = x[i];
    const float plus = static_cast<float>(original + options.step);
    const float minus = static_cast<float>(original - options.step);
    x[i] = plus;
    const double loss_plus = loss();
    x[i] = minus;
    const double loss_minus = loss();
    x[i] = original;
    const double numeric = (loss_plus - loss_minus) / (static_cast<double>(plus) - minus);
    result.entries.push_back({i, analytic[static_cast<size_t>(i)], numeric});
    analytic_checked.push_back(analytic[static_cast<size_t>(i)]);
    numeric_checked.push_back(static_cast<float>(numeric));
  }
  result.error = NormalisedError(analytic_checked, numeric_checked);
  result.ok = result.error <= options.tolerance;
  return result;
}

}  // namespace baton::numeric_check
