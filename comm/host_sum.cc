// Ordered element-wise sums of host tensors (see host_sum.h).
#include "comm/host_sum.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace baton {
namespace {

// The elements summed at a time in a local f32 buffer (on the stack: 4 KiB per operand).
constexpr int64_t kBlock = 1024;

}  // namespace

void SumInOrder(const std::vector<Tensor>& tensors) {
  BATON_CHECK(!tensors.empty(), "nothing to sum");
  const DType dtype = tensors[0].dtype();
  const int64_t n = tensors[0].numel();
  std::vector<void*> bases;
  for (const Tensor& t : tensors) {
    BATON_CHECK(t.device().is_cpu() && t.is_contiguous(), "summing needs contiguous host tensors");
    BATON_CHECK(t.dtype() == dtype && t.numel() == n, "cannot sum {} with {}", t.ToString(),
                tensors[0].ToString());
    bases.push_back(t.raw());
  }
  if (dtype == DType::kI32) {
    for (int64_t i = 0; i < n; ++i) {
      int64_t acc = 0;
      for (void* base : bases) acc += static_cast<const int32_t*>(base)[i];
      for (void* base : bases) static_cast<int32_t*>(base)[i] = static_cast<int32_t>(acc);
    }
    return;
  }
  if (dtype == DType::kF32) {
    // Blocks of elements summed in a local buffer, each element's inputs all read before it is
    // written: the same additions in the same order as the loop below, but vectorised (the
    // element loop's per-element dtype switch kept the compiler from it: 0.5 GB/s all-reduce).
    float acc[kBlock];
    for (int64_t begin = 0; begin < n; begin += kBlock) {
      const int64_t count = std::min(kBlock, n - begin);
      const float* first = static_cast<const float*>(bases[0]) + begin;
      for (int64_t j = 0; j < count; ++j) acc[j] = first[j];
      for (size_t k = 1; k < bases.size(); ++k) {
        const float* x = static_cast<const float*>(bases[k]) + begin;
        for (int64_t j = 0; j < count; ++j) acc[j] += x[j];
      }
      for (void* base : bases) {
        std::memcpy(static_cast<float*>(base) + begin, acc,
                    static_cast<size_t>(count) * sizeof(float));
      }
    }
    return;
  }
  // 16-bit: blocks converted to f32 in bulk (bit for bit the scalar conversions: ConvertFloats),
  // summed in f32 in the same order, rounded once.
  float acc[kBlock];
  float x[kBlock];
  const size_t size = SizeOf(dtype);
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t count = std::min(kBlock, n - begin);
    const auto at = [&](void* base) { return static_cast<char*>(base) + begin * size; };
    ConvertFloats(at(bases[0]), dtype, acc, DType::kF32, static_cast<size_t>(count));
    for (size_t k = 1; k < bases.size(); ++k) {
      ConvertFloats(at(bases[k]), dtype, x, DType::kF32, static_cast<size_t>(count));
      for (int64_t j = 0; j < count; ++j) acc[j] += x[j];
    }
    for (void* base : bases) {
      ConvertFloats(acc, DType::kF32, at(base), dtype, static_cast<size_t>(count));
    }
  }
}

void AddInto(void* mine, const void* theirs, DType dtype, int64_t n, bool mine_first) {
  if (dtype == DType::kI32) {
    auto* m = static_cast<int32_t*>(mine);
    const auto* t = static_cast<const int32_t*>(theirs);
    for (int64_t i = 0; i < n; ++i) {
      m[i] = static_cast<int32_t>(int64_t{m[i]} + int64_t{t[i]});  // as SumInOrder: no overflow
    }
    return;
  }
  if (dtype == DType::kF32) {
    auto* m = static_cast<float*>(mine);
    const auto* t = static_cast<const float*>(theirs);
    // Both orders spelled out, as SumInOrder adds them.
    if (mine_first) {
      for (int64_t i = 0; i < n; ++i) m[i] = m[i] + t[i];
    } else {
      for (int64_t i = 0; i < n; ++i) m[i] = t[i] + m[i];
    }
    return;
  }
  float a[kBlock];
  float b[kBlock];
  const size_t size = SizeOf(dtype);
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const auto count = static_cast<size_t>(std::min(kBlock, n - begin));
    char* m = static_cast<char*>(mine) + begin * size;
    ConvertFloats(m, dtype, a, DType::kF32, count);
    ConvertFloats(static_cast<const char*>(theirs) + begin * size, dtype, b, DType::kF32, count);
    if (mine_first) {
      for (size_t j = 0; j < count; ++j) a[j] = a[j] + b[j];
    } else {
      for (size_t j = 0; j < count; ++j) a[j] = b[j] + a[j];
    }
    ConvertFloats(a, DType::kF32, m, dtype, count);
  }
}

}  // namespace baton
