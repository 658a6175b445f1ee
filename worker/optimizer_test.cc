#include "worker/optimizer.h"

#include <gtest/gtest.h>

#include "worker/loss_scaler.h"

namespace baton {
namespace {

TEST(LearningRateScheduleTest, WarmsUpLinearlyThenDecaysToTheFloor) {
  LearningRateSchedule lr{.lr = 1e-3f,
                          .min_lr = 1e-4f,
                          .warmup_steps = 10,
                          .total_steps = 110,
                          .schedule = LrSchedule::kCosine,
                          .extensions = {}};
  EXPECT_FLOAT_EQ(lr.At(1), 1e-4f);
  EXPECT_FLOAT_EQ(lr.At(10), 1e-3f);
  EXPECT_NEAR(lr.At(60), 0.5f * (1e-3f + 1e-4f), 1e-9);
  EXPECT_FLOAT_EQ(lr.At(110), 1e-4f);
  EXPECT_FLOAT_EQ(lr.At(500), 1e-4f);
  lr.schedule = LrSchedule::kConstant;
  EXPECT_FLOAT_EQ(lr.At(60), 1e-3f);
}

// --steps-more: the extended schedule equals the original up to the extension's step, then
// decays from the rate reached there (continuous: no jump, as raising train.steps gives) to the
// floor at the new end.
TEST(LearningRateScheduleTest, AnExtensionContinuesFromTheRateReachedAndDecaysToTheNewEnd) {
  const LearningRateSchedule original{.lr = 1e-3f,
                                      .min_lr = 1e-4f,
                                      .warmup_steps = 10,
                                      .total_steps = 110,
                                      .schedule = LrSchedule::kCosine,
                                      .extensions = {}};
  LearningRateSchedule extended = original;
  extended.extensions = {{.from = 60, .to = 160}};
  for (int64_t step = 1; step <= 60; ++step) EXPECT_EQ(extended.At(step), original.At(step));
  const float at_60 = original.At(60);
  EXPECT_LT(extended.At(61), at_60);
  EXPECT_GT(extended.At(61), original.At(61));  // slower: 100 steps left instead of 50
  EXPECT_NEAR(extended.At(61), at_60, 1e-3 * at_60);
  EXPECT_NEAR(extended.At(110), 0.5f * (at_60 + 1e-4f), 1e-9);
  EXPECT_FLOAT_EQ(extended.At(160), 1e-4f);
  EXPECT_FLOAT_EQ(extended.At(999), 1e-4f);
  for (int64_t step = 61; step <= 160; ++step) EXPECT_LE(extended.At(step), extended.At(step - 1));

  // A finished run extended holds the floor it reached; a second extension of an extended run
  // starts from the first extension's rate at its step.
  LearningRateSchedule finished = original;
  finished.extensions = {{.from = 110, .to = 150}};
  EXPECT_FLOAT_EQ(finished.At(130), 1e-4f);
  extended.extensions.push_back({.from = 100, .to = 120});
  const float at_100 = LearningRateSchedule{
      extended.lr,          extended.min_lr,     extended.warmup_steps,
      extended.total_steps, LrSchedule::kCosine, 0,
      {{60, 160}}}.At(100);
  EXPECT_EQ(extended.At(100), at_100);
  EXPECT_NEAR(extended.At(110), 0.5f * (at_100 + 1e-4f), 1e-9);
  EXPECT_FLOAT_EQ(extended.At(120), 1e-4f);

  // A constant schedule keeps its rate.
  LearningRateSchedule constant = original;
  constant.schedule = LrSchedule::kConstant;
  constant.extensions = {{.from = 60, .to = 160}};
  EXPECT_EQ(constant.At(100), 1e-3f);
}

// Linear: a straight line from lr after the warmup to min_lr at the end. WSD: lr until the last
// decay_steps steps, then a straight line to min_lr.
TEST(LearningRateScheduleTest, LinearAndWarmupStableDecayFallInStraightLines) {
  LearningRateSchedule linear{.lr = 1e-3f,
                              .min_lr = 1e-4f,
                              .warmup_steps = 10,
                              .total_steps = 110,
                              .schedule = LrSchedule::kLinear,
                              .decay_steps = 0,
                              .extensions = {}};
  EXPECT_FLOAT_EQ(linear.At(5), 5e-4f);  // the warmup is every schedule's
  EXPECT_FLOAT_EQ(linear.At(10), 1e-3f);
  EXPECT_FLOAT_EQ(linear.At(35), 1e-4f + 0.75f * 9e-4f);
  EXPECT_FLOAT_EQ(linear.At(60), 1e-4f + 0.5f * 9e-4f);
  EXPECT_FLOAT_EQ(linear.At(110), 1e-4f);
  EXPECT_FLOAT_EQ(linear.At(200), 1e-4f);

  LearningRateSchedule wsd = linear;
  wsd.schedule = LrSchedule::kWsd;
  wsd.decay_steps = 20;
  EXPECT_FLOAT_EQ(wsd.At(5), 5e-4f);
  for (int64_t step = 10; step <= 90; ++step) EXPECT_EQ(wsd.At(step), 1e-3f) << step;
  EXPECT_FLOAT_EQ(wsd.At(95), 1e-4f + 0.75f * 9e-4f);
  EXPECT_FLOAT_EQ(wsd.At(100), 1e-4f + 0.5f * 9e-4f);
  EXPECT_FLOAT_EQ(wsd.At(110), 1e-4f);
  for (int64_t step = 91; step <= 110; ++step) EXPECT_LT(wsd.At(step), wsd.At(step - 1));
}

// --steps-more under WSD: a run resumed from a step of its stable phase stays stable until the
// new end's decay; a linear schedule falls from the rate reached to the floor at the new end.
TEST(LearningRateScheduleTest, AnExtendedWsdRunDecaysBeforeItsNewEnd) {
  LearningRateSchedule wsd{.lr = 1e-3f,
                           .min_lr = 0.0f,
                           .warmup_steps = 10,
                           .total_steps = 110,
                           .schedule = LrSchedule::kWsd,
                           .decay_steps = 20,
                           .extensions = {}};
  LearningRateSchedule extended = wsd;
  extended.extensions = {{.from = 50, .to = 210}};
  for (int64_t step = 1; step <= 50; ++step) EXPECT_EQ(extended.At(step), wsd.At(step)) << step;
  for (int64_t step = 51; step <= 190; ++step) EXPECT_EQ(extended.At(step), 1e-3f) << step;
  EXPECT_FLOAT_EQ(extended.At(200), 5e-4f);
  EXPECT_FLOAT_EQ(extended.At(210), 0.0f);

  LearningRateSchedule linear = wsd;
  linear.schedule = LrSchedule::kLinear;
  linear.extensions = {{.from = 60, .to = 160}};
  const float at_60 =
      LearningRateSchedule{linear.lr, linear.min_lr, 10, 110, LrSchedule::kLinear, 0, {}}.At(60);
  EXPECT_FLOAT_EQ(linear.At(60), at_60);
  EXPECT_FLOAT_EQ(linear.At(110), 0.5f * at_60);
  EXPECT_FLOAT_EQ(linear.At(160), 0.0f);
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

TEST(LossScalerTest, GrowthStopsAtTheCapAndAScaleAboveItOnlyHalves) {
  LossScaler scaler(4.0, 1, /*max_scale=*/16.0);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(scaler.Update(false));
  EXPECT_EQ(scaler.scale(), 16.0);  // 4, 8, 16, then no further
  LossScaler above(64.0, 1, /*max_scale=*/16.0);
  EXPECT_FALSE(above.Update(false));
  EXPECT_EQ(above.scale(), 64.0);
  EXPECT_TRUE(above.Update(true));
  EXPECT_EQ(above.scale(), 32.0);
  // The default cap: 2^24.
  LossScaler defaults(65536.0, 1);
  for (int i = 0; i < 1000; ++i) defaults.Update(false);
  EXPECT_EQ(defaults.scale(), 16777216.0);
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

// ZeRO-1: optimizers over complementary shards of the flat space step exactly the elements one
// unsharded optimizer steps, each holding state for its own elements only; so do shards of a
// flat space that leaves a parameter apart, with that parameter's own runs.
TEST(OptimizerTest, ShardsOfTheFlatSpaceTogetherStepLikeOneOptimizer) {
  MemoryLedger ledger;
  auto backend = MakeCpuBackend(ledger, 1);
  Allocator& a = backend->allocator();
  const auto make = [&](const std::string& name, const Shape& shape, DType dtype) {
    Param p;
    p.name = name;
    p.value = Tensor::Empty(a, shape, dtype, MemCategory::kParams);
    p.grad = Tensor::Zeros(a, shape, DType::kF32, MemCategory::kGrads);
    p.weight_decay = shape.size() >= 2;
    std::vector<float> values(static_cast<size_t>(p.value.numel()));
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = 0.01f * static_cast<float>(i % 17) - 0.05f;
      p.grad.data<float>()[i] = 0.003f * static_cast<float>(i % 7) - 0.01f;
    }
    ConvertFloats(values.data(), DType::kF32, p.value.raw(), dtype, values.size());
    return p;
  };
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    // Flat space: a (3 x 5) then b (7): 22 elements; shards [0, 11) and [11, 22) split a.
    Param a1 = make("a", {3, 5}, dtype), b1 = make("b", {7}, dtype);
    Param a2 = make("a", {3, 5}, dtype), b2 = make("b", {7}, dtype);
    Optimizer whole(*backend, {&a1, &b1}, AdamWConfig{});
    const int64_t before = ledger.current(MemCategory::kOptimizer);
    Optimizer first(*backend, {&a2, &b2}, AdamWConfig{}, false, OptimizerShard{0, 11, {}});
    Optimizer second(*backend, {&a2, &b2}, AdamWConfig{}, false, OptimizerShard{11, 22, {}});
    const int64_t per_element = dtype == DType::kF32 ? 8 : 12;
    EXPECT_EQ(ledger.current(MemCategory::kOptimizer) - before, 22 * per_element);
    ASSERT_EQ(first.slots().size(), 1u);   // a's first 11 elements
    ASSERT_EQ(second.slots().size(), 2u);  // a's last 4, and b
    EXPECT_EQ(second.slots()[0].begin, 11);
    EXPECT_EQ(second.slots()[0].m.numel(), 4);
    EXPECT_TRUE(second.slots()[1].whole());
    for (int step = 1; step <= 3; ++step) {
      whole.Step(1e-2f, step, 0.5f);
      first.Step(1e-2f, step, 0.5f);
      second.Step(1e-2f, step, 0.5f);
    }
    EXPECT_EQ(ToFloatVector(a2.value), ToFloatVector(a1.value)) << Name(dtype);
    EXPECT_EQ(ToFloatVector(b2.value), ToFloatVector(b1.value)) << Name(dtype);

    // A parameter sharded apart (split experts under ZeRO-1): b out of the flat space, which is
    // a alone ([0, 8) and [8, 15)), and b's elements [0, 4) and [4, 7) stepped by each.
    Param a3 = make("a", {3, 5}, dtype), b3 = make("b", {7}, dtype);
    Optimizer third(*backend, {&a3, &b3}, AdamWConfig{}, false,
                    OptimizerShard{0, 8, {{&b3, {0, 4}}}});
    Optimizer fourth(*backend, {&a3, &b3}, AdamWConfig{}, false,
                     OptimizerShard{8, 15, {{&b3, {4, 7}}}});
    ASSERT_EQ(fourth.slots().size(), 2u);
    EXPECT_EQ(fourth.slots()[0].begin, 8);
    EXPECT_EQ(fourth.slots()[0].end, 15);  // b takes no place in the flat space
    EXPECT_EQ(fourth.slots()[1].begin, 4);
    EXPECT_EQ(fourth.slots()[1].m.numel(), 3);
    for (int step = 1; step <= 3; ++step) {
      third.Step(1e-2f, step, 0.5f);
      fourth.Step(1e-2f, step, 0.5f);
    }
    EXPECT_EQ(ToFloatVector(a3.value), ToFloatVector(a1.value)) << Name(dtype);
    EXPECT_EQ(ToFloatVector(b3.value), ToFloatVector(b1.value)) << Name(dtype);
  }
}

}  // namespace
}  // namespace baton
