// Ordered element-wise sums of host tensors (see host_sum.h).
#include "comm/host_sum.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace baton {
namespace {

float LoadFloat(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(base)[i];
    case DType::kF16:
      return HalfToFloat(static_cast<const uint16_t*>(base)[i]);
    case DType::kBF16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case DType::kI32:
    case DType::kU8:
    case DType::kI8:
      break;
  }
  BATON_FAIL("LoadFloat of {}", Name(dtype));
}

void StoreFloat(void* base, DType dtype, int64_t i, float value) {
  switch (dtype) {
    case DType::kF32:
      static_cast<float*>(base)[i] = value;
      return;
    case DType::kF16:
      static_cast<uint16_t*>(base)[i] = FloatToHalf(value);
      return;
    case DType::kBF16:
      static_cast<uint16_t*>(base)[i] = FloatToBFloat16(value);
      return;
    case DType::kI32:
    case DType::kU8:
    case DType::kI8:
      break;
  }
  BATON_FAIL("StoreFloat of {}", Name(dtype));
}

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
    constexpr int64_t kBlock = 1024;
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
  for (int64_t i = 0; i < n; ++i) {
    float acc = LoadFloat(bases[0], dtype, i);
    for (size_t k = 1; k < bases.size(); ++k) acc += LoadFloat(bases[k], dtype, i);
    for (void* base : bases) StoreFloat(base, dtype, i, acc);
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
  for (int64_t i = 0; i < n; ++i) {
    const float a = LoadFloat(mine, dtype, i);
    const float b = LoadFloat(theirs, dtype, i);
    StoreFloat(mine, dtype, i, mine_first ? a + b : b + a);
  }
}

}  // namespace baton
