#include "comm/staging.h"

namespace baton {

Tensor BookGlooAllReduceStaging(Allocator& allocator, const Tensor& tensor) {
  if (tensor.dtype() != DType::kF16 && tensor.dtype() != DType::kBF16) return Tensor();
  return Tensor::Empty(allocator, {tensor.numel()}, DType::kF32, MemCategory::kComm);
}

Tensor BookGlooGroupAllReduceStaging(Allocator& allocator, const Tensor& tensor, size_t members) {
  if (members == 2)
    return Tensor::Empty(allocator, tensor.shape(), tensor.dtype(), MemCategory::kComm);
  const auto n = static_cast<int64_t>(members);
  const int64_t slice = (tensor.numel() + n - 1) / n;
  return Tensor::Empty(allocator, {(n - 1) * slice}, tensor.dtype(), MemCategory::kComm);
}

Tensor BookNcclBarrierScratch(Allocator& allocator) {
  return Tensor::Empty(allocator, {1}, DType::kF32, MemCategory::kComm);
}

}  // namespace baton
