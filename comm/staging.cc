#include "comm/staging.h"

namespace baton {

Tensor BookGlooAllReduceStaging(Allocator& allocator, const Tensor& tensor) {
  if (tensor.dtype() != DType::kF16 && tensor.dtype() != DType::kBF16) return Tensor();
  return Tensor::Empty(allocator, {tensor.numel()}, DType::kF32, MemCategory::kComm);
}

std::vector<Tensor> BookGlooGroupAllReduceStaging(Allocator& allocator, const Tensor& tensor,
                                                  const std::vector<int>& group, int rank) {
  const size_t copies = group.size() == 2 ? 1 : rank == group.at(0) ? group.size() - 1 : 0;
  std::vector<Tensor> staged;
  for (size_t i = 0; i < copies; ++i) {
    staged.push_back(Tensor::Empty(allocator, tensor.shape(), tensor.dtype(), MemCategory::kComm));
  }
  return staged;
}

Tensor BookNcclBarrierScratch(Allocator& allocator) {
  return Tensor::Empty(allocator, {1}, DType::kF32, MemCategory::kComm);
}

}  // namespace baton
