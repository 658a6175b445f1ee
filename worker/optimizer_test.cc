#include "worker/optimizer.h"

#include <gtest/gtest.h>

#include "worker/loss_scaler.h"

namespace baton {
namespace {

TEST(LearningRateScheduleTest, WarmsUpLinearlyThenDecaysToTheFloor) {
  LearningRateSchedule lr{.lr = 1e-3f, .min_lr = 1e-4f, .warmup_steps = 10, .total_steps = 110};
  EXPECT_FLOAT_EQ(lr.At(1), 1e-4f);
  EXPECT_FLOAT_EQ(lr.At(10), 1e-3f);
  EXPECT_NEAR(lr.At(60), 0.5f * (1e-3f + 1e-4f), 1e-9);
  EXPECT_FLOAT_EQ(lr.At(110), 1e-4f);
  EXPECT_FLOAT_EQ(lr.At(500), 1e-4f);
  lr.cosine = false;
  EXPECT_FLOAT_EQ(lr.At(60), 1e-3f);
}

TEST(LossScalerTest, HalvesAndSkipsOnOverflowDoublesAfterCleanInterval) {
  LossScaler scaler(65536.0, 3);
  EXPECT_TRUE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), 32768.0);
  EXPECT_FALSE(scaler.Update(false));
  EXPECT_FALSE(scaler.Update(false));
  EXPECT_EQ(scaler.scale(), 32768.0);
  EXPECT_FALSE(scaler.Update(false));
  EXPECT_EQ(scaler.scale(), 65536.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
}

TEST(LossScalerTest, DisabledNeverSkips) {
  LossScaler scaler = LossScaler::Disabled();
  EXPECT_FALSE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), 1.0);
}

TEST(OptimizerTest, KeepsF32MasterForBf16ParamsAndStepsTiedStorageOnce) {
  MemoryLedger ledger;
  auto backend = MakeCpuBackend(ledger, 1);
  Allocator& a = backend->allocator();
  Param w;
  w.name = "w";
  w.value = Tensor::Empty(a, {2, 2}, DType::kBF16, MemCategory::kParams);
  w.grad = Tensor::Zeros(a, {2, 2}, DType::kF32, MemCategory::kGrads);
  w.weight_decay = true;
  Param tied = w;  // a second handle on the same storage, like the head's wte
  tied.grad = Tensor::Zeros(a, {2, 2}, DType::kF32, MemCategory::kGrads);
  tied.tied = true;
  for (int i = 0; i < 4; ++i) {
    w.value.data<uint16_t>()[i] = FloatToBFloat16(1.0f);
    w.grad.data<float>()[i] = 0.5f;
  }
  Optimizer optimizer(*backend, {&w, &tied}, AdamWConfig{});
  ASSERT_EQ(optimizer.slots().size(), 1u);
  // master (16 B) + m (16 B) + v (16 B), all f32.
  EXPECT_EQ(ledger.current(MemCategory::kOptimizer), 48);
  optimizer.Step(0.1f, 1, 1.0f);
  // First Adam step moves every weight by lr (sign of the gradient), decay 0.1 * lr * w.
  const float expected = 1.0f * (1.0f - 0.1f * 0.0f) - 0.1f;
  EXPECT_NEAR(BFloat16ToFloat(w.value.data<uint16_t>()[0]), expected, 1e-2);
  EXPECT_NEAR(optimizer.slots()[0].master.data<float>()[0], expected, 1e-6);
}

}  // namespace
}  // namespace baton
