// CPU backend AdamW: three steps against values worked out by hand (in double, from the formula
// in backend.h), weight decay, grad_scale and 16-bit gradients.
#include "kernels/kernels_test_util.h"

namespace baton::kernels_test {
namespace {

using AdamWTest = CpuBackendTest;

AdamWConfig TestConfig() {
  AdamWConfig config;
  config.lr = 0.1f;
  config.beta1 = 0.9f;
  config.beta2 = 0.95f;
  config.eps = 1e-8f;
  config.weight_decay = 0.1f;
  return config;
}

// Two parameters over three steps, grad_scale 0.5. Expected (param, m, v) after each step,
// from a double-precision evaluation of the formula; element 1 has a zero first gradient.
TEST_F(AdamWTest, ThreeStepsMatchHandComputedValuesWithWeightDecay) {
  Tensor param = Values({2}, {0.5f, -1.0f});
  Tensor m = Zeros({2});
  Tensor v = Zeros({2});
  const float grads[3][2] = {{0.2f, 0.0f}, {-0.1f, 4.0f}, {0.3f, -4.0f}};
  const double expected[3][2][3] = {
      {{0.395000009999999, 0.01, 0.0005}, {-0.99, 0.0, 0.0}},
      {{0.3642130685126681, 0.004, 0.0006}, {-1.0535959997172049, 0.2, 0.2}},
      {{0.2976121161970927, 0.0186, 0.001695}, {-1.0385970464971057, -0.02, 0.39}}};
  AdamWConfig config = TestConfig();
  for (int step = 0; step < 3; ++step) {
    Tensor grad = Values({2}, {grads[step][0], grads[step][1]});
    config.step = step + 1;
    backend().AdamW(param, grad, m, v, config, 0.5f);
    for (int i = 0; i < 2; ++i) {
      SCOPED_TRACE(testing::Message() << "step " << step + 1 << " element " << i);
      EXPECT_NEAR(param.data<float>()[i], expected[step][i][0], 2e-6);
      EXPECT_NEAR(m.data<float>()[i], expected[step][i][1], 5e-7);
      EXPECT_NEAR(v.data<float>()[i], expected[step][i][2], 5e-7);
    }
  }
}

TEST_F(AdamWTest, ZeroGradientOnlyDecaysTheWeight) {
  Tensor param = Values({3}, {2.0f, -4.0f, 0.0f});
  Tensor grad = Zeros({3});
  Tensor m = Zeros({3});
  Tensor v = Zeros({3});
  backend().AdamW(param, grad, m, v, TestConfig(), 1.0f);
  EXPECT_EQ(Floats(param), (std::vector<float>{2.0f * 0.99f, -4.0f * 0.99f, 0.0f}));
}

TEST_F(AdamWTest, SixteenBitGradientMatchesItsF32Value) {
  Tensor grad_bf16 = Random({5000}, 1.0f, DType::kBF16);
  Tensor grad_f32 = Zeros({5000});
  backend().Copy(grad_bf16, grad_f32);
  Tensor param_a = Random({5000}), m_a = Zeros({5000}), v_a = Zeros({5000});
  Tensor param_b = Clone(param_a), m_b = Zeros({5000}), v_b = Zeros({5000});
  backend().AdamW(param_a, grad_bf16, m_a, v_a, TestConfig(), 0.25f);
  backend().AdamW(param_b, grad_f32, m_b, v_b, TestConfig(), 0.25f);
  EXPECT_EQ(Floats(param_a), Floats(param_b));
  EXPECT_EQ(Floats(m_a), Floats(m_b));
  EXPECT_EQ(Floats(v_a), Floats(v_b));
}

TEST_F(AdamWTest, StateMustBeF32AndShapesMustMatch) {
  Tensor param = Random({4});
  Tensor grad = Random({4});
  Tensor m = Zeros({4});
  Tensor v_half = Zeros({4}, DType::kBF16);
  EXPECT_THROW(backend().AdamW(param, grad, m, v_half, TestConfig(), 1.0f), Error);
  Tensor v = Zeros({5});
  EXPECT_THROW(backend().AdamW(param, grad, m, v, TestConfig(), 1.0f), Error);
  AdamWConfig zero_step = TestConfig();
  zero_step.step = 0;
  Tensor v_ok = Zeros({4});
  EXPECT_THROW(backend().AdamW(param, grad, m, v_ok, zero_step, 1.0f), Error);
}

}  // namespace
}  // namespace baton::kernels_test
