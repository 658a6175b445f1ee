// CudaBackend: the Llama layer methods. PLACEHOLDER until the kernels land (being written).
#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"

namespace baton::cuda {

void CudaBackend::RmsNormForward(const Tensor&, const Tensor&, float, Tensor&, Tensor&) {
  BATON_FAIL("RmsNormForward: not yet on CUDA");
}
void CudaBackend::RmsNormBackward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                  Tensor&, Tensor&) {
  BATON_FAIL("RmsNormBackward: not yet on CUDA");
}
void CudaBackend::SwiGluForward(const Tensor&, Tensor&) { BATON_FAIL("SwiGlu: not yet on CUDA"); }
void CudaBackend::SwiGluBackward(const Tensor&, const Tensor&, Tensor&) {
  BATON_FAIL("SwiGlu: not yet on CUDA");
}
void CudaBackend::RotaryEmbedding(Tensor&, const Tensor&, int64_t, const AttentionHeads&,
                                  const RopeConfig&, bool) {
  BATON_FAIL("RotaryEmbedding: not yet on CUDA");
}
void CudaBackend::RepeatKv(const Tensor&, const AttentionHeads&, Tensor&) {
  BATON_FAIL("RepeatKv: not yet on CUDA");
}
void CudaBackend::RepeatKvBackward(const Tensor&, const AttentionHeads&, Tensor&) {
  BATON_FAIL("RepeatKvBackward: not yet on CUDA");
}

}  // namespace baton::cuda
