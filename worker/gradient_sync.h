// How a stage's data-parallel replicas make their gradients one (worker/trainer.h, step end 0;
// docs/parallel.md): the strategy a Trainer holds, chosen once from the setup.
//
//   NoSync          one replica: nothing to do.
//   AllReduceSync   every distinct gradient, packed in buckets of one dtype and at most
//                   kGradBucketBytes, summed across the replicas (replica order); every replica
//                   then holds the same bits. Runs before the tied sums.
//   ZeroSync        ZeRO-1: the stage's distinct parameters laid end to end form a flat space cut
//                   into R equal shards; replica r gets the replicas' sum (replica order) of shard
//                   r only and its optimizer steps only that shard; after the step every replica
//                   gathers the others' updated shards. Runs after the tied sums (a replica then
//                   holds only its shard's sums). ZeRO-2 (level 2): the same sums, but a layer
//                   whose gradients are final at its last backward of the step (no tied or
//                   sequence-partial parameter) is reduce-scattered right then, inside the
//                   backward (its last round left in flight behind the next layers' backward
//                   until the next layer's reduction), the others at the step end; every gradient
//                   with no element in this replica's shard is released once reduced and taken
//                   back, zeroed, just before its layer's first backward of the next step. The same
//                   bits as ZeRO-1.
//
// A strategy's buffers are booked as comm in the backend's ledger for as long as it lives. Not
// thread-safe: the Trainer's thread calls it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/layer_tensors.h"
#include "comm/group.h"
#include "kernels/backend.h"
#include "model/layer.h"
#include "worker/engine.h"
#include "worker/optimizer.h"

namespace baton {

// The most bytes one data-parallel gradient all-reduce carries (larger tensors go in pieces).
inline constexpr int64_t kGradBucketBytes = int64_t{4} << 20;

// What every strategy works with: this rank's place among its stage's replicas.
struct ReplicaContext {
  Backend* backend = nullptr;
  Group* replicas = nullptr;  // this stage's replicas, replica order (its rank: this replica)
  int stage = 0;
  std::chrono::milliseconds timeout{0};
  // Told when this rank starts and stops waiting on its replicas ("ALLREDUCE"); may be empty.
  const StatusCallback* on_status = nullptr;
  int replica() const { return replicas->rank(); }
  int num_replicas() const { return replicas->size(); }
};

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  // The step-end pass that makes the gradients one ("all-reduce replicas"), or null for none.
  virtual const char* reduce_pass() const { return nullptr; }
  // The pass after the optimizer step ("all-gather replicas"), or null for none.
  virtual const char* after_update_pass() const { return nullptr; }
  // True when the reduction runs after the tied sums rather than before them.
  virtual bool after_tied_sums() const { return false; }
  // Just before layer `index`'s backward (B or I) of any micro-batch (the trainer zeroes the
  // gradients present at the step's start): ZeRO-2 takes the layer's released gradients back,
  // zeroed, on its first of the step.
  virtual void BeforeLayerBackward(int /*index*/) {}
  // Once layer `index`'s gradients of the step's last micro-batch are done (its last B or W).
  // Returns whether it exchanged with the replicas (ZeRO-2's reduce-scatter of the layer, which
  // reports "ALLREDUCE" while it waits; the caller then reports what it resumes).
  virtual bool LayerGradientsDone(int /*index*/, int64_t /*step*/) { return false; }
  virtual void Reduce(int64_t /*step*/) {}
  virtual void AfterUpdate(int64_t /*step*/) {}
  // The parts of `p`'s gradient that hold this replica's reduced sums, for the norm: all of it,
  // or under ZeRO-1/2 its part in this replica's shard (none when it lies in other shards).
  virtual std::vector<Tensor> ReducedGradient(Param& p) const { return {p.grad}; }
  // Whether replica `replica` adds its layers' sums of squares into the job-wide norm: replica 0
  // alone when every replica holds the whole sums, every replica (its shard's part) under ZeRO.
  virtual bool writes_layer_sums(int replica) const { return replica == 0; }

  // How the optimizer's state lies across the replicas (worker/state_layout.h asks): the flat
  // elements this replica's optimizer holds state for under ZeRO-1/2, nullopt when it holds all.
  virtual std::optional<OptimizerShard> optimizer_shard() const { return std::nullopt; }
  // Checkpoints of sharded state, every replica of the stage calling it for each local layer in
  // the same order: replica 0 gets `layer` with its full optimizer state, gathered from the
  // replicas' shards (`optimizer`'s slots) into temporaries booked as workspace while they live;
  // the others send their shards and get nothing. Unsharded: `layer` as it is.
  virtual std::optional<LayerTensors> GatherLayerState(LayerTensors layer,
                                                       const Optimizer& /*optimizer*/) {
    return layer;
  }
};

class NoSync final : public GradientSync {};

class AllReduceSync final : public GradientSync {
 public:
  // Packs every distinct gradient of `params` (a shared block's aliases once), in order.
  AllReduceSync(ReplicaContext context, const std::vector<Param*>& params);
  const char* reduce_pass() const override { return "all-reduce replicas"; }
  void Reduce(int64_t step) override;

 private:
  // Pieces of gradients packed into one all-reduce.
  struct Bucket {
    struct Piece {
      Tensor grad;     // a flat slice of a gradient
      int64_t at = 0;  // its first element in the bucket
    };
    DType dtype = DType::kF32;
    int64_t numel = 0;
    std::vector<Piece> pieces;
  };

  ReplicaContext context_;
  std::vector<Bucket> buckets_;
  std::map<DType, Tensor> buffers_;  // one per gradient dtype, booked as comm
};

// One local layer as ZeroSync sees it.
struct ZeroLayer {
  int index = 0;               // in the graph
  std::vector<Param*> params;  // Layer::params()
  // Its gradients are final at its last backward of the step: none of its parameters is tied
  // (summed across copies at the step end first) or sequence-partial.
  bool final_at_backward = false;
};

class ZeroSync final : public GradientSync {
 public:
  // Lays out the flat space of the layers' distinct parameter values (by storage, in order: the
  // optimizer's slots, as StageModel::params lists them) and books the collectives' buffers.
  // Needs one parameter dtype and f32 gradients. `level` 2 releases the gradients with no
  // element in this replica's shard until their layer's first backward, and takes back those
  // with one where the model released them (StageModel's release_gradients).
  ZeroSync(ReplicaContext context, const std::vector<ZeroLayer>& layers, int level);
  const char* reduce_pass() const override { return "reduce-scatter replicas"; }
  const char* after_update_pass() const override { return "all-gather replicas"; }
  bool after_tied_sums() const override { return true; }
  void BeforeLayerBackward(int index) override;
  bool LayerGradientsDone(int index, int64_t step) override;
  void Reduce(int64_t step) override;       // the reduce-scatter of the gradients not reduced yet
  void AfterUpdate(int64_t step) override;  // the all-gather of the updated parameters
  std::vector<Tensor> ReducedGradient(Param& p) const override;
  bool writes_layer_sums(int) const override { return true; }

  std::optional<OptimizerShard> optimizer_shard() const override;
  std::optional<LayerTensors> GatherLayerState(LayerTensors layer,
                                               const Optimizer& optimizer) override;

 private:
  struct FlatPiece {
    Param* param;
    int64_t at;  // its first element in the flat space
  };
  struct Span {  // flat elements [begin, end)
    int64_t begin = 0;
    int64_t end = 0;
  };
  // ZeRO-2: a layer's flat elements and its gradients to release (none in this replica's shard).
  struct LayerGrads {
    Span span;
    bool final_at_backward = false;
    std::vector<Tensor> released;
  };
  // Calls fn(param, param_begin, param_end, at) for each parameter's part of the flat elements
  // [begin, end): its flat elements [param_begin, param_end), starting at flat `at`.
  template <typename Fn>
  void ForEachFlatPart(int64_t begin, int64_t end, Fn fn) const;
  // Replica j's part of `span` in round k of its collectives: flat [first, first + count).
  std::pair<int64_t, int64_t> Chunk(int j, int64_t k, Span span) const;
  Span PartOf(int j, Span span) const;  // replica j's shard within `span`
  int64_t Rounds(Span span) const;
  void WaitAll(std::vector<std::unique_ptr<Work>>& works, const std::string& what) const;
  // This replica's shard: [own_begin(), own_end()) of the flat space.
  int64_t own_begin() const;
  int64_t own_end() const;
  // Every replica's sums (replica order) of its part of `span` into its gradients.
  void ReduceScatter(Span span, const std::string& what);
  // One round of a reduce-scatter: posted (its chunks packed, its sends and receives posted),
  // then completed (waited for, summed into the gradients).
  struct Round {
    Span span;
    int64_t k = 0;
    std::string what;  // for a failure
    std::vector<std::unique_ptr<Work>> works;
  };
  Round Post(Span span, int64_t k, const std::string& what);
  void Complete(Round& round);
  // Completes in_flight_, if any (reporting the wait): whether there was one.
  bool FinishInFlight();
  // Round k's chunk of each replica in `buffer` (buffer_, or values_ for the all-gather), and
  // replica i's `count` elements in received_.
  std::vector<Tensor> RoundChunks(const Tensor& buffer, Span span, int64_t k) const;
  Tensor Received(int i, int64_t count) const;
  void Release(std::vector<Tensor>& grads);

  ReplicaContext context_;
  int level_ = 1;
  std::vector<FlatPiece> flat_;
  int64_t flat_numel_ = 0;
  int64_t shard_size_ = 0;  // S = ceil(N / R): replica r owns [r S, min((r + 1) S, N))
  int64_t chunk_ = 0;       // B: each member's elements per round of the collectives
  Tensor buffer_;           // R x B f32 (the gradients), comm
  Tensor received_;         // (R - 1) x B f32: the other replicas' chunks of mine, comm
  Tensor values_;           // R x B in the parameters' dtype when that is not f32, comm
  // ZeRO-2, by graph index. A gradient shared by several layers (a share group's copies) is in
  // each one's `released`; a tied copy beside its original (summed into it first) in its own.
  std::map<int, LayerGrads> layers_;
  std::vector<Span> at_step_end_;  // the flat spans of the layers not final at their backward
  // ZeRO-2: the last round of the last layer reduced in the backward, posted and not yet
  // waited for: completed before the next layer's reduction or at the step end.
  std::optional<Round> in_flight_;
};

}  // namespace baton
