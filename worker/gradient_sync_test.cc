// ZeroSync over two replicas run as threads (comm/fake_communicator.h): ZeRO-2 reduces exactly as
// ZeRO-1 does, a layer final at its backward then and the others at the step end, and from
// there to the layer's next backward holds only the gradients its shard overlaps, each whole;
// ZeRO-3 holds its shard of the values and gathers a layer's for each use.
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

// The layout below on one replica: its backend, its group of two and the two layers.
struct Replica {
  MemoryLedger ledger;
  std::unique_ptr<Backend> backend = MakeCpuBackend(ledger, 1);
  std::unique_ptr<Communicator> world;
  std::unique_ptr<Group> replicas;
  std::array<Param, 4> params;
  std::vector<ZeroLayer> layers;
  ReplicaContext context;

  Replica(FakeHub& hub, int r) : world(hub.Make(r)) {
    replicas = std::make_unique<Group>(*world, std::vector<int>{0, 1});
    Allocator& alloc = backend->allocator();
    const std::array<Shape, 3> shapes = {Shape{3, 4}, Shape{7}, Shape{7}};
    for (int k = 0; k < 4; ++k) {
      Param& p = params[static_cast<size_t>(k)];
      const Shape& shape = shapes[static_cast<size_t>(k % 3)];
      p.name = std::string(1, static_cast<char>('a' + k));
      p.value =
          k == 3 ? params[0].value : Tensor::Zeros(alloc, shape, DType::kF32, MemCategory::kParams);
      p.grad = Tensor::Zeros(alloc, shape, DType::kF32, MemCategory::kGrads);
      p.tied = k == 3;
    }
    layers = {{0, {&params[0], &params[1]}, true}, {1, {&params[2], &params[3]}, false}};
    context.backend = backend.get();
    context.replicas = replicas.get();
    context.timeout = std::chrono::seconds(60);
  }
};

// Parameters a (3 x 4), b (7), c (7): a flat space of 26 elements, shards [0, 13) and [13, 26);
// d is a tied copy of a (the same value storage, a gradient of its own). Layer 0 holds a and b
// and is final at its backward; layer 1 holds c and d, tied, so reduced at the step end.
// `released`: the gradients come released, as the Trainer's build leaves them.
ReplicaRun RunReplica(FakeHub& hub, int r, int level, bool released) {
  Replica replica(hub, r);
  MemoryLedger& ledger = replica.ledger;
  std::array<Param, 4>& params = replica.params;
  if (released) {
    for (Param& p : params) p.grad.storage()->Release();
  }
  ZeroSync sync(replica.context, replica.layers, level);
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

// ZeRO-3 on the same layout: a value lives whole where it lies inside the shard; b, across the
// edge at element 13, keeps its part in the shard in the optimizer's slot; the rest is gathered
// for a use. What one replica holds.
struct ZeroThreeRun {
  int64_t params_after_setup = 0;
  int64_t params_in_layer_1 = 0;  // between BeforeLayerUse(1) and AfterLayerUse(1)
  int64_t params_after_use = 0;
  int64_t params_in_layer_0 = 0;
  int64_t params_after_update = 0;
  bool prefetched_use_exchanged = false;  // layer 0's first use: the prefetch completed
  bool second_use_exchanged = false;
  std::vector<float> a, b, c;   // as gathered for layers 1 and 0 after the update
  std::vector<float> loaded_b;  // b gathered after a load put other values in it
};

// The value a step's update gives flat element i (every replica computes it for its shard).
float UpdatedAt(int64_t i) { return 100.0f + static_cast<float>(i); }

// `prefetch`: layer 1's use names layer 0 as the next, whose gather is posted meanwhile.
ZeroThreeRun RunZeroThree(FakeHub& hub, int r, bool keep_for_step, bool prefetch) {
  Replica replica(hub, r);
  MemoryLedger& ledger = replica.ledger;
  std::array<Param, 4>& params = replica.params;
  ZeroSync sync(replica.context, replica.layers, 3, keep_for_step);
  Optimizer optimizer(*replica.backend, {&params[0], &params[1], &params[2], &params[3]},
                      AdamWConfig{}, false, sync.optimizer_shard());
  sync.AttachOptimizer(optimizer);
  ZeroThreeRun run;
  run.params_after_setup = ledger.current(MemCategory::kParams);
  // The update: this replica's shard gets UpdatedAt, through the tensors the optimizer steps.
  for (Optimizer::Slot& slot : optimizer.slots()) {
    const int64_t at = slot.param == &params[0] ? 0 : slot.param == &params[1] ? 12 : 19;
    const int64_t first = at + slot.begin;
    Tensor values =
        slot.values.defined() ? slot.values : FlatSlice(slot.param->value, slot.begin, slot.end);
    for (int64_t i = 0; i < values.numel(); ++i) {
      values.data<float>()[i] = UpdatedAt(first + i);
    }
  }
  sync.AfterUpdate(1);
  sync.BeforeLayerUse(1, prefetch ? 0 : -1, 2);
  run.params_in_layer_1 = ledger.current(MemCategory::kParams);
  run.a = ToFloatVector(params[0].value);
  run.c = ToFloatVector(params[2].value);
  sync.AfterLayerUse(1);
  run.params_after_use = ledger.current(MemCategory::kParams);
  run.prefetched_use_exchanged = sync.BeforeLayerUse(0, -1, 2);
  run.params_in_layer_0 = ledger.current(MemCategory::kParams);
  run.b = ToFloatVector(params[1].value);
  sync.AfterLayerUse(0);
  run.second_use_exchanged = sync.BeforeLayerUse(0, -1, 2);
  sync.AfterLayerUse(0);
  sync.AfterUpdate(2);
  run.params_after_update = ledger.current(MemCategory::kParams);
  // A load fills the whole values and the shard keeps its part of them.
  sync.AcquireLayerValues(0, /*gather=*/false);
  for (int64_t i = 0; i < 7; ++i) params[1].value.data<float>()[i] = -static_cast<float>(i);
  sync.ReleaseLayerValues(0);
  sync.AcquireLayerValues(0, /*gather=*/true);
  run.loaded_b = ToFloatVector(params[1].value);
  sync.ReleaseLayerValues(0);
  return run;
}

TEST(ZeroSyncTest, ZeroThreeHoldsItsShardAndGathersALayerForEachUse) {
  for (const bool keep_for_step : {false, true}) {
    for (const bool prefetch : {false, true}) {
      SCOPED_TRACE(keep_for_step ? "keep step" : "keep microbatch");
      SCOPED_TRACE(prefetch ? "layer 0 prefetched" : "no prefetch");
      FakeHub hub(2);
      std::array<ZeroThreeRun, 2> runs;
      std::thread other([&] { runs[1] = RunZeroThree(hub, 1, keep_for_step, prefetch); });
      runs[0] = RunZeroThree(hub, 0, keep_for_step, prefetch);
      other.join();
      for (int r = 0; r < 2; ++r) {
        SCOPED_TRACE(r);
        const ZeroThreeRun& run = runs[static_cast<size_t>(r)];
        // Between uses exactly the shard: 13 of the 26 elements (replica 0: a and b's first;
        // replica 1: b's other six and c).
        EXPECT_EQ(run.params_after_setup, 13 * 4);
        EXPECT_EQ(run.params_after_update, 13 * 4);
        // In a use, the shard and the layer's values from outside it, whole: layer 1 holds c
        // and the tied a (replica 0 gathers c, replica 1 a); layer 0 a and b (b whole beside
        // its part). A prefetch of layer 0 during layer 1's use brings b (and a) in early.
        const int64_t layer_1 = r == 0 ? 7 : 12, both = r == 0 ? 7 + 7 : 12 + 7;
        EXPECT_EQ(run.params_in_layer_1, (13 + (prefetch ? both : layer_1)) * 4);
        // After layer 1's use: kept for the step, or released but for what layer 0's gather
        // holds (replica 1's a too: the tied copy is layer 0's a).
        const int64_t after = keep_for_step ? (prefetch ? both : layer_1)
                              : prefetch    ? (r == 0 ? 7 : 12 + 7)
                                            : 0;
        EXPECT_EQ(run.params_after_use, (13 + after) * 4);
        // Layer 0 in use: the layers kept (step) or layer 0's alone (microbatch).
        EXPECT_EQ(run.params_in_layer_0, (13 + (keep_for_step ? both : r == 0 ? 7 : 12 + 7)) * 4);
        EXPECT_TRUE(run.prefetched_use_exchanged);  // the prefetch, or the gather, completed
        EXPECT_EQ(run.second_use_exchanged, !keep_for_step);
        // Every value as the replicas' updates left it.
        for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(run.a[static_cast<size_t>(i)], UpdatedAt(i));
        for (int64_t i = 0; i < 7; ++i) {
          EXPECT_EQ(run.b[static_cast<size_t>(i)], UpdatedAt(12 + i));
          EXPECT_EQ(run.c[static_cast<size_t>(i)], UpdatedAt(19 + i));
          EXPECT_EQ(run.loaded_b[static_cast<size_t>(i)], -static_cast<float>(i));
        }
      }
    }
  }
}

}  // namespace
}  // namespace baton
