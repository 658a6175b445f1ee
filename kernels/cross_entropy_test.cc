// CPU backend cross-entropy: the loss against log-sum-exp in double, stability with huge logits,
// the backward by finite differences, and the in-place backward.
#include <algorithm>
#include <cmath>

#include "kernels/kernels_test_util.h"

namespace baton::kernels_test {
namespace {

using numeric_check::NormalisedError;

double ReferenceLoss(const std::vector<float>& logits, const Tensor& targets, int64_t vocab) {
  const int64_t rows = targets.numel();
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    double max = -INFINITY;
    for (int64_t v = 0; v < vocab; ++v) max = std::max<double>(max, logits[r * vocab + v]);
    double sum = 0.0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(logits[r * vocab + v] - max);
    total += std::log(sum) + max - logits[r * vocab + targets.data<int32_t>()[r]];
  }
  return total / static_cast<double>(rows);
}

using CrossEntropyTest = CpuBackendTest;

TEST_F(CrossEntropyTest, ForwardIsMeanNegativeLogSoftmaxOfTargets) {
  const int64_t batch = 3, seq = 4, vocab = 50;
  Tensor logits = Random({batch, seq, vocab}, 3.0f);
  Tensor targets = Ids({batch, seq}, vocab);
  Tensor loss = Zeros({1});
  backend().CrossEntropyForward(logits, targets, loss);
  EXPECT_NEAR(loss.data<float>()[0], ReferenceLoss(Floats(logits), targets, vocab), 1e-5);
}

TEST_F(CrossEntropyTest, UniformLogitsGiveLogVocab) {
  Tensor logits = Zeros({2, 64});
  Tensor targets = Ids({2}, 64);
  Tensor loss = Zeros({1});
  backend().CrossEntropyForward(logits, targets, loss);
  EXPECT_NEAR(loss.data<float>()[0], std::log(64.0), 1e-6);
}

TEST_F(CrossEntropyTest, HugeLogitsStayFinite) {
  Tensor logits = Values({2, 3}, {1000.0f, 0.0f, -1000.0f, 5000.0f, 5000.0f, -3e4f});
  Tensor ids = Ids({2}, 1);  // both rows target column 0
  Tensor loss = Zeros({1});
  backend().CrossEntropyForward(logits, ids, loss);
  // Row 0: -log softmax = ~0; row 1: two equal maxima, log 2.
  EXPECT_NEAR(loss.data<float>()[0], std::log(2.0) / 2, 1e-6);
  Tensor dlogits = Zeros({2, 3});
  backend().CrossEntropyBackward(logits, ids, 1.0f, dlogits);
  EXPECT_TRUE(backend().AllFinite(dlogits));
  EXPECT_NEAR(Floats(dlogits)[3], (0.5f - 1.0f) / 2, 1e-6);
  EXPECT_NEAR(Floats(dlogits)[4], 0.5f / 2, 1e-6);
}

TEST_F(CrossEntropyTest, BackwardMatchesFiniteDifferencesOfScaledLoss) {
  const int64_t rows = 6, vocab = 11;
  const float grad_scale = 0.75f;
  Tensor logits = Random({rows, vocab}, 2.0f);
  Tensor targets = Ids({rows}, vocab);
  Tensor loss = Zeros({1});
  const auto scaled_loss = [&] {
    backend().CrossEntropyForward(logits, targets, loss);
    return static_cast<double>(grad_scale) * loss.data<float>()[0];
  };
  Tensor dlogits = Random({rows, vocab});  // written, not accumulated
  backend().CrossEntropyBackward(logits, targets, grad_scale, dlogits);
  ExpectGradient(logits, scaled_loss, dlogits, 5e-3, 1e-2);
}

TEST_F(CrossEntropyTest, InPlaceBackwardEqualsOutOfPlace) {
  Tensor logits = Random({37, 300}, 2.0f);
  Tensor targets = Ids({37}, 300);
  Tensor separate = Zeros(logits.shape());
  backend().CrossEntropyBackward(logits, targets, 2.0f, separate);
  Tensor in_place = Clone(logits);
  backend().CrossEntropyBackward(in_place, targets, 2.0f, in_place);
  EXPECT_EQ(Floats(in_place), Floats(separate));
}

TEST_F(CrossEntropyTest, GradientRowsSumToZero) {
  Tensor logits = Random({5, 40});
  Tensor targets = Ids({5}, 40);
  Tensor dlogits = Zeros(logits.shape());
  backend().CrossEntropyBackward(logits, targets, 1.0f, dlogits);
  const std::vector<float> d = Floats(dlogits);
  for (int64_t r = 0; r < 5; ++r) {
    double sum = 0.0;
    for (int64_t v = 0; v < 40; ++v) sum += d[r * 40 + v];
    EXPECT_NEAR(sum, 0.0, 1e-7);
    EXPECT_LT(d[r * 40 + targets.data<int32_t>()[r]], 0.0f);
  }
}

TEST_F(CrossEntropyTest, OutOfRangeTargetIsRejected) {
  Tensor logits = Random({2, 4});
  Tensor targets = Ids({2}, 4);
  targets.data<int32_t>()[1] = -2;  // -1 is kIgnoreTarget, below
  Tensor loss = Zeros({1});
  EXPECT_THROW(backend().CrossEntropyForward(logits, targets, loss), Error);
  Tensor dlogits = Zeros({2, 4});
  EXPECT_THROW(backend().CrossEntropyBackward(logits, targets, 1.0f, dlogits), Error);
  targets.data<int32_t>()[1] = 4;
  EXPECT_THROW(backend().CrossEntropyForward(logits, targets, loss), Error);
}

// Packed documents: rows whose target is kIgnoreTarget are not counted. The loss is the mean over
// the counted rows, and the gradient is theirs divided by the count, 0 on ignored rows.
TEST_F(CrossEntropyTest, IgnoredTargetsAreNotCounted) {
  Tensor logits = Random({5, 7});
  Tensor targets = Ids({5}, 7);
  Tensor counted_logits = Zeros({3, 7});
  Tensor counted_targets = Ids({3}, 7);
  for (int64_t r : {1, 3}) targets.data<int32_t>()[r] = kIgnoreTarget;
  int64_t next = 0;
  for (int64_t r : {0, 2, 4}) {
    std::copy_n(logits.data<float>() + r * 7, 7, counted_logits.data<float>() + next * 7);
    counted_targets.data<int32_t>()[next++] = targets.data<int32_t>()[r];
  }
  Tensor loss = Zeros({1}), counted_loss = Zeros({1});
  backend().CrossEntropyForward(logits, targets, loss);
  backend().CrossEntropyForward(counted_logits, counted_targets, counted_loss);
  EXPECT_EQ(loss.data<float>()[0], counted_loss.data<float>()[0]);
  Tensor dlogits = Random({5, 7}), counted_dlogits = Zeros({3, 7});
  backend().CrossEntropyBackward(logits, targets, 0.5f, dlogits);
  backend().CrossEntropyBackward(counted_logits, counted_targets, 0.5f, counted_dlogits);
  next = 0;
  for (int64_t r = 0; r < 5; ++r) {
    for (int64_t v = 0; v < 7; ++v) {
      const float got = dlogits.data<float>()[r * 7 + v];
      if (r == 1 || r == 3) {
        EXPECT_EQ(got, 0.0f) << r << " " << v;
      } else {
        EXPECT_EQ(got, counted_dlogits.data<float>()[next * 7 + v]) << r << " " << v;
      }
    }
    if (r != 1 && r != 3) ++next;
  }
  // Nothing counted: loss 0, no gradient.
  for (int64_t r = 0; r < 5; ++r) targets.data<int32_t>()[r] = kIgnoreTarget;
  backend().CrossEntropyForward(logits, targets, loss);
  EXPECT_EQ(loss.data<float>()[0], 0.0f);
}

}  // namespace
}  // namespace baton::kernels_test
