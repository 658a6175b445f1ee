// CUDA mixture-of-experts row moves against the CPU backend, in f32/bf16/f16: dispatch (with and
// without weights, rows left alone where no choice lands), combine (accumulating, dropped choices
// skipped) and the combine weights' gradient, over widths that are and are not a multiple of the
// block size.
#include <numeric>
#include <tuple>
#include <vector>

#include "kernels/cuda/cuda_test_util.h"

namespace baton::cuda_test {
namespace {

using CudaMoeTest = CudaVsCpuDTypeTest;

TEST_P(CudaMoeTest, DispatchCombineAndTheWeightsGradientMatchCpu) {
  for (auto [tokens, k, cols] :
       {std::tuple{37, 2, 7}, std::tuple{64, 4, 300}, std::tuple{5, 1, 1000}}) {
    const int64_t rows = tokens * k;
    // A permutation of the rows over the choices, every fifth choice dropped (-1).
    std::vector<int32_t> order(static_cast<size_t>(rows));
    std::iota(order.begin(), order.end(), 0);
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[(i * 7919) % i]);
    Tensor slots = Ids({tokens, k}, 1);
    for (int64_t i = 0; i < rows; ++i) {
      slots.data<int32_t>()[i] = i % 5 == 4 ? -1 : order[static_cast<size_t>(i)];
    }
    const Tensor weights = Random({tokens, k}, 1.0f, DType::kF32);
    const Tensor x = Random({tokens, cols}, 1.0f, dtype());
    for (const bool weighted : {false, true}) {
      const Tensor w = weighted ? weights : Tensor();
      const Tensor gw = weighted ? ToGpu(weights) : Tensor();
      Tensor cpu_routed = Random({rows, cols}, 1.0f, dtype());
      Tensor gpu_routed = ToGpu(cpu_routed);
      cpu().MoeDispatch(x, slots, w, cpu_routed);
      gpu().MoeDispatch(ToGpu(x), ToGpu(slots), gw, gpu_routed);
      EXPECT_LT(ErrorVsCpu(gpu_routed, cpu_routed), Tolerance(dtype())) << tokens << "x" << cols;
      Tensor cpu_out = Random({tokens, cols}, 1.0f, dtype());
      Tensor gpu_out = ToGpu(cpu_out);
      cpu().MoeCombine(cpu_routed, slots, w, cpu_out);
      gpu().MoeCombine(ToGpu(cpu_routed), ToGpu(slots), gw, gpu_out);
      EXPECT_LT(ErrorVsCpu(gpu_out, cpu_out), Tolerance(dtype())) << tokens << "x" << cols;
    }
    const Tensor y = Random({rows, cols}, 1.0f, dtype());
    Tensor cpu_dw = Random({tokens, k}, 1.0f, DType::kF32);
    Tensor gpu_dw = ToGpu(cpu_dw);
    cpu().MoeCombineWeightsBackward(x, y, slots, cpu_dw);
    gpu().MoeCombineWeightsBackward(ToGpu(x), ToGpu(y), ToGpu(slots), gpu_dw);
    EXPECT_LT(ErrorVsCpu(gpu_dw, cpu_dw), 1e-4) << tokens << "x" << cols;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaMoeTest, BATON_ALL_FLOAT_DTYPES, DTypeName);

}  // namespace
}  // namespace baton::cuda_test
