// The mixture-of-experts row moves of the CPU backend (Backend::MoeDispatch, MoeCombine,
// MoeCombineWeightsBackward): their results on a hand-worked routing, 16-bit tensors against f32,
// the same bits whatever the thread count, and slots outside the rows refused naming the token.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/kernels_test_util.h"

namespace baton::kernels_test {
namespace {

class MoeKernelsTest : public CpuBackendTest {
 protected:
  // Three tokens, two choices each, over four rows: token 1's second choice dropped.
  Tensor Slots() {
    Tensor slots = Ids({3, 2}, 1);
    const int32_t values[] = {2, 0, 3, -1, 1, -1};
    std::copy(values, values + 6, slots.data<int32_t>());
    return slots;
  }
};

TEST_F(MoeKernelsTest, DispatchCombineAndTheWeightsGradientOnAHandWorkedRouting) {
  // token n's row is (n + 1) * [1, 2]; slots: token 0 -> rows 2, 0; token 1 -> row 3; token 2 ->
  // row 1.
  const Tensor x = Values({3, 2}, {1, 2, 2, 4, 3, 6});
  const Tensor slots = Slots();
  const Tensor weights = Values({3, 2}, {0.25f, 0.75f, 0.5f, 9.0f, 2.0f, 9.0f});
  Tensor routed = Values({4, 2}, {-1, -1, -1, -1, -1, -1, -1, -1});
  backend().MoeDispatch(x, slots, weights, routed);
  EXPECT_EQ(std::vector<float>(routed.data<float>(), routed.data<float>() + 8),
            (std::vector<float>{0.75f, 1.5f, 6, 12, 0.25f, 0.5f, 1, 2}));
  Tensor out = Values({3, 2}, {10, 10, 10, 10, 10, 10});
  backend().MoeCombine(routed, slots, Tensor(), out);  // unweighted: each token's rows summed
  EXPECT_EQ(std::vector<float>(out.data<float>(), out.data<float>() + 6),
            (std::vector<float>{11, 12, 11, 12, 16, 22}));
  Tensor dweights = Zeros({3, 2});
  backend().MoeCombineWeightsBackward(x, routed, slots, dweights);
  // token 0: dot([1,2], row 2 [0.25, 0.5]) = 1.25, dot([1,2], row 0 [0.75, 1.5]) = 3.75.
  EXPECT_EQ(std::vector<float>(dweights.data<float>(), dweights.data<float>() + 6),
            (std::vector<float>{1.25f, 3.75f, 10, 0, 90, 0}));
}

TEST_F(MoeKernelsTest, SixteenBitRowsAgreeWithF32AndThreadsDoNotChangeTheBits) {
  const int64_t tokens = 50, k = 3, cols = 33, rows = tokens * k;
  Tensor slots = Ids({tokens, k}, 1);
  for (int64_t i = 0; i < rows; ++i) slots.data<int32_t>()[i] = static_cast<int32_t>(rows - 1 - i);
  const Tensor weights = Random({tokens, k});
  const Tensor x = Random({tokens, cols});
  const Tensor y = Random({rows, cols});
  Tensor f32_out = Zeros({tokens, cols});
  backend().MoeCombine(y, slots, weights, f32_out);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    Tensor y16 = Zeros({rows, cols}, dtype);
    backend().Copy(y, y16);
    Tensor out16 = Zeros({tokens, cols}, dtype);
    backend().MoeCombine(y16, slots, weights, out16);
    Tensor back = Zeros({tokens, cols});
    backend().Copy(out16, back);
    EXPECT_LT(numeric_check::NormalisedError(back, f32_out), 1e-2) << Name(dtype);
  }
  MemoryLedger ledger;
  const auto single = MakeCpuBackend(ledger, 1);
  Tensor one = Zeros({tokens, k}), many = Zeros({tokens, k});
  single->MoeCombineWeightsBackward(x, y, slots, one);
  backend().MoeCombineWeightsBackward(x, y, slots, many);
  EXPECT_EQ(std::vector<float>(one.data<float>(), one.data<float>() + tokens * k),
            std::vector<float>(many.data<float>(), many.data<float>() + tokens * k));
}

TEST_F(MoeKernelsTest, ASlotOutsideTheRowsIsRefusedNamingTheToken) {
  const Tensor x = Random({3, 2});
  Tensor slots = Slots();
  slots.data<int32_t>()[2] = 4;  // token 1's first choice, past the 4 rows
  Tensor routed = Zeros({4, 2});
  try {
    backend().MoeDispatch(x, slots, Tensor(), routed);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("slot 0 of token 1 is 4, outside [-1, 4)"),
              std::string::npos)
        << e.what();
  }
  Tensor wrong = Zeros({3, 3}, DType::kI32);
  EXPECT_THROW(backend().MoeDispatch(x, wrong, Random({3, 2}), routed), Error);  // weights' shape
}

}  // namespace
}  // namespace baton::kernels_test
