// ZeroSync over two replicas run as threads (comm/fake_communicator.h): ZeRO-2 reduces exactly as
// ZeRO-1 does, a layer final at its backward then and the others at the step end, and from
// there to the layer's next backward holds only the gradients its shard overlaps, each whole.
#include "worker/gradient_sync.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <thread>

#include "comm/fake_communicator.h"
#include "worker/optimizer.h"

namespace baton {
namespace {

// Replica r's gradient element i of parameter k: distinct per replica, so a sum shows.
float GradAt(int r, int k, int64_t i) {
  return 0.25f * static_cast<float>(r + 1) + 0.01f * static_cast<float>(k * 100 + i);
}

struct ReplicaRun {
  int64_t grads_after_setup = 0;
  int64_t grads_after_reduce = 0;
  int64_t grads_at_next_step = 0;
  std::vector<std::vector<float>> reduced;  // ReducedGradient of a, b, c, flattened
  bool tied_grad_released = false;
  bool a_released_at_layer_end = false;  // before the step end's Reduce
  bool back_zeroed = false;  // the tied copy's gradient, after the next BeforeLayerBackward
};

// Parameters a (3 x 4), b (7), c (7): a flat space of 26 elements, shards [0, 13) and [13, 26);
// d is a tied copy of a (the same value storage, a gradient of its own). Layer 0 holds a and b
// and is final at its backward; layer 1 holds c and d, tied, so reduced at the step end.
// `released`: the gradients come released, as StageModel's release_gradients leaves them.
ReplicaRun RunReplica(FakeHub& hub, int r, int level, bool released) {
  MemoryLedger ledger;
  std::unique_ptr<Backend> backend = MakeCpuBackend(ledger, 1);
  std::unique_ptr<Communicator> world = hub.Make(r);
  Group replicas(*world, {0, 1});
  Allocator& alloc = backend->allocator();
  const std::array<Shape, 3> shapes = {Shape{3, 4}, Shape{7}, Shape{7}};
  std::array<Param, 4> params;
  for (int k = 0; k < 4; ++k) {
    Param& p = params[static_cast<size_t>(k)];
    const Shape& shape = shapes[static_cast<size_t>(k % 3)];
    p.value =
        k == 3 ? params[0].value : Tensor::Zeros(alloc, shape, DType::kF32, MemCategory::kParams);
    p.grad = Tensor::Zeros(alloc, shape, DType::kF32, MemCategory::kGrads);
    p.tied = k == 3;
    if (released) p.grad.storage()->Release();
  }
  const std::vector<ZeroLayer> layers = {{0, {&params[0], &params[1]}, true},
                                         {1, {&params[2], &params[3]}, false}};
  ReplicaContext context;
  context.backend = backend.get();
  context.replicas = &replicas;
  context.timeout = std::chrono::seconds(60);
  ZeroSync sync(context, layers, level);
  ReplicaRun run;
  run.grads_after_setup = ledger.current(MemCategory::kGrads);
  sync.BeforeLayerBackward(1);
  sync.BeforeLayerBackward(0);
  for (int k = 0; k < 4; ++k) {
    Tensor& grad = params[static_cast<size_t>(k)].grad;
    for (int64_t i = 0; i < grad.numel(); ++i) grad.data<float>()[i] = GradAt(r, k, i);
  }
  sync.LayerGradientsDone(0, 1);
  run.a_released_at_layer_end = !params[0].grad.storage()->resident();
  sync.LayerGradientsDone(1, 1);
  sync.Reduce(1);
  run.grads_after_reduce = ledger.current(MemCategory::kGrads);
  for (int k = 0; k < 3; ++k) {
    std::vector<float> flat;
    for (const Tensor& part : sync.ReducedGradient(params[static_cast<size_t>(k)])) {
      const std::vector<float> values = ToFloatVector(part);
      flat.insert(flat.end(), values.begin(), values.end());
    }
    run.reduced.push_back(flat);
  }
  run.tied_grad_released = !params[3].grad.storage()->resident();
  sync.BeforeLayerBackward(1);
  sync.BeforeLayerBackward(0);
  run.grads_at_next_step = ledger.current(MemCategory::kGrads);
  const std::vector<float> back = ToFloatVector(params[3].grad);
  run.back_zeroed = std::all_of(back.begin(), back.end(), [](float x) { return x == 0.0f; });
  return run;
}

std::array<ReplicaRun, 2> RunBoth(int level, bool released = false) {
  FakeHub hub(2);
  std::array<ReplicaRun, 2> runs;
  std::thread other([&] { runs[1] = RunReplica(hub, 1, level, released); });
  runs[0] = RunReplica(hub, 0, level, released);
  other.join();
  return runs;
}

TEST(ZeroSyncTest, ZeroTwoReducesLikeZeroOneAndHoldsOnlyItsShardsGradientsBetweenSteps) {
  const std::array<ReplicaRun, 2> one = RunBoth(1), two = RunBoth(2);
  // Given released by the model, the same: ZeroSync takes back those its shard holds, zeroed.
  const std::array<ReplicaRun, 2> given_released = RunBoth(2, /*released=*/true);
  const int64_t all = (12 + 7 + 7 + 12) * 4;  // a, b, c and the tied copy's own gradient
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(two[r].reduced, one[r].reduced);
    EXPECT_EQ(one[r].grads_after_reduce, all);
    EXPECT_EQ(two[r].grads_at_next_step, all);
    EXPECT_TRUE(two[r].tied_grad_released);  // summed into a's before the reduce-scatter
    EXPECT_TRUE(two[r].back_zeroed);
    EXPECT_EQ(two[r].grads_after_setup, two[r].grads_after_reduce);
    EXPECT_EQ(given_released[r].reduced, one[r].reduced);
    EXPECT_EQ(given_released[r].grads_after_setup, two[r].grads_after_setup);
    EXPECT_EQ(given_released[r].grads_after_reduce, two[r].grads_after_reduce);
  }
  // Replica 0's shard [0, 13) overlaps a and b's first element; replica 1's [13, 26) b and c,
  // and replica 1 lets a go as soon as layer 0's backward is done.
  EXPECT_FALSE(two[0].a_released_at_layer_end);
  EXPECT_TRUE(two[1].a_released_at_layer_end);
  EXPECT_FALSE(one[1].a_released_at_layer_end);
  EXPECT_EQ(two[0].grads_after_reduce, (12 + 7) * 4);
  EXPECT_EQ(two[1].grads_after_reduce, (7 + 7) * 4);
  // The sums, replica order: replica 0 holds a's and b's first element, replica 1 the rest.
  ASSERT_EQ(two[0].reduced[0].size(), 12u);
  ASSERT_EQ(two[0].reduced[1].size(), 1u);
  ASSERT_EQ(two[1].reduced[1].size(), 6u);
  ASSERT_EQ(two[1].reduced[2].size(), 7u);
  EXPECT_EQ(two[0].reduced[0][5], GradAt(0, 0, 5) + GradAt(1, 0, 5));
  EXPECT_EQ(two[1].reduced[2][6], GradAt(0, 2, 6) + GradAt(1, 2, 6));
}

}  // namespace
}  // namespace baton
