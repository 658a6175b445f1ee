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
//                   bits as ZeRO-1. ZeRO-3 (level 3): ZeRO-2, and every parameter value with no
//                   element in this replica's shard is released too (from the model's build on):
//                   a layer's values are all-gathered just before each use (forward, recompute,
//                   backward, W) and released after it (keep "microbatch") or at the step end
//                   (keep "step": gathered once a step), instead of the step end's all-gather.
//                   The same bits as ZeRO-1 again.
//   ExpertZeroSync  ZeRO with the experts split over expert groups (worker/expert_zero_sync.h):
//                   a ZeroSync of every other parameter, the experts' optimizer state sharded
//                   over the replicas holding the same experts.
//
// A strategy's buffers are booked as comm in the backend's ledger for as long as it lives. Not
// thread-safe: the Trainer's thread calls it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
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
  // Tells on_status that this rank waits on its replicas (`peer`: one of them; `bytes`: what
  // it exchanges with them), or no longer does (peer -1).
  void Report(const char* action, int peer, int64_t bytes = 0) const;
  int another_replica() const;  // a replica of this stage other than this one, its world rank
  // Waits for `works` (then cleared); where one fails or times out, fails naming `what`, the
  // stage and `peers` (who this rank exchanged with), as a replica dead or hung.
  void Wait(std::vector<std::unique_ptr<Work>>& works, const std::string& what,
            const char* peers = "its other replicas") const;
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
  // ZeRO-3, just before a use of layer `index`'s parameters in a step (the engine's
  // before_layer_use): the layer's values all-gathered whole, unless kept from an earlier use
  // this step. Returns whether it exchanged with the replicas ("ALLGATHER" while it waits; the
  // caller then reports what it resumes). After the use, AfterLayerUse releases them again
  // (keep "microbatch"). Every replica makes the same calls in the same order.
  // `next`: the layer the same action uses next (-1 after its last), whose gather ZeRO-3 posts
  // before this layer computes and completes at its use.
  virtual bool BeforeLayerUse(int /*index*/, int /*next*/, int64_t /*step*/) { return false; }
  virtual void AfterLayerUse(int /*index*/) {}
  // ZeRO-3 outside the step (checkpoints, digests, loading): layer `index`'s values made
  // resident, all-gathered when `gather` (collective: every replica calls it) or left
  // uninitialised for a load to fill; ReleaseLayerValues gives back those outside the shard.
  virtual void AcquireLayerValues(int /*index*/, bool /*gather*/) {}
  virtual void ReleaseLayerValues(int /*index*/) {}
  // Pruning (worker/pruning.h WholeValues): `p`'s whole f32 values made from every replica's
  // slot (its master, or its f32 values; `slot` null: none here), on the host, collective over
  // the replicas; nullopt where the rank holds them itself (not sharded).
  virtual std::optional<std::vector<float>> GatherWholeValues(const Param& /*p*/,
                                                              const Optimizer::Slot* /*slot*/) {
    return std::nullopt;
  }
  // Once the optimizer is built over this sync's shard: ZeRO-3 hands it the parts of its own
  // that hold the values of the parameters across the shard's edge (Optimizer::Slot::values)
  // and releases those parameters' whole values.
  virtual void AttachOptimizer(Optimizer& /*optimizer*/) {}
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

// Checkpoints of sharded state. `t`'s optimizer state as whole temporaries (workspace): moments
// in f32, or with `quantized` 8-bit codes and block maxima; an fp32 master for a 16-bit value.
void AllocateWholeState(ParamTensors& t, Allocator& allocator, bool quantized);

// Member `from`'s run of flat elements [begin, end) of a parameter's optimizer state, to go into
// member `holder`'s whole temporaries (`quantized`: 8-bit codes, and the run's block maxima).
struct StateRun {
  int64_t begin = 0;
  int64_t end = 0;
  int from = 0;
  int holder = 0;
  bool quantized = false;
};

// Moves `run` of `t`'s parameter's state over `group` (null: this rank alone, from and holder
// 0): `from` sends its slot's (`own`: moments, block maxima, fp32 master), the holder receives
// them into `t`'s temporaries (AllocateWholeState) or copies its own; other members do nothing.
// The posted works go into `works`, the views they use into `keep`, until waited for.
void MoveStateRun(Backend& backend, Group* group, const ParamTensors& t, const Optimizer::Slot* own,
                  const StateRun& run, std::vector<Tensor>& keep,
                  std::vector<std::unique_ptr<Work>>& works);

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

// The flat space ZeRO shards: the layers' distinct parameter values (by storage: a share
// group's copies and a tied copy beside its original once), in layer and Layer::params() order.
struct ZeroFlatSpace {
  struct Piece {
    Param* param;  // the first holder of the value
    int64_t at;    // its first element in the flat space
    int layer;     // the graph index of that holder's layer
  };
  std::vector<Piece> pieces;
  std::map<int, std::pair<int64_t, int64_t>> layer_spans;  // each layer's new pieces: [first, end)
  int64_t numel = 0;

  explicit ZeroFlatSpace(const std::vector<ZeroLayer>& layers);
  // Where the replicas' shards begin, and the end: replica r owns [b[r], b[r + 1]), b[r] the
  // first of r·S (S = ceil(numel / replicas)) or, with `block_aligned` (8-bit optimizer state),
  // moved up to the next kQuantBlock boundary of the parameter it falls in when that parameter
  // is quantised (kMinQuantizedElements or more), so that no quantisation block is cut.
  std::vector<int64_t> Boundaries(int replicas, bool block_aligned) const;
};

class ZeroSync final : public GradientSync {
 public:
  // Lays out the flat space of the layers' distinct parameter values (by storage, in order: the
  // optimizer's slots, as StageModel::params lists them) and books the collectives' buffers.
  // Needs one parameter dtype and f32 gradients. `level` 2 releases the gradients with no
  // element in this replica's shard until their layer's first backward, and takes back those
  // with one where the model released them (the Trainer does at the build). `level` 3 also
  // releases each value with no element in the shard (the Trainer releases them at the build
  // already) and gathers a layer's for each use: `keep_for_step` keeps a gathered layer until
  // the step end (parallel.zero3_keep step) rather than releasing it after the use.
  // `quantized_state`: the optimizer keeps 8-bit moments (optimizer.state int8), so the shards
  // are cut at quantisation blocks (ZeroFlatSpace::Boundaries).
  ZeroSync(ReplicaContext context, const std::vector<ZeroLayer>& layers, int level,
           bool keep_for_step = false, bool quantized_state = false);
  const char* reduce_pass() const override { return "reduce-scatter replicas"; }
  const char* after_update_pass() const override { return "all-gather replicas"; }
  bool after_tied_sums() const override { return true; }
  void BeforeLayerBackward(int index) override;
  bool LayerGradientsDone(int index, int64_t step) override;
  bool BeforeLayerUse(int index, int next, int64_t step) override;
  void AfterLayerUse(int index) override;
  void AcquireLayerValues(int index, bool gather) override;
  void ReleaseLayerValues(int index) override;
  void AttachOptimizer(Optimizer& optimizer) override;
  std::optional<std::vector<float>> GatherWholeValues(const Param& p,
                                                      const Optimizer::Slot* slot) override;
  void Reduce(int64_t step) override;  // the reduce-scatter of the gradients not reduced yet
  // The all-gather of the updated parameters (ZeRO-3: the release of those gathered instead).
  void AfterUpdate(int64_t step) override;
  std::vector<Tensor> ReducedGradient(Param& p) const override;
  bool writes_layer_sums(int) const override { return true; }

  std::optional<OptimizerShard> optimizer_shard() const override;
  std::optional<LayerTensors> GatherLayerState(LayerTensors layer,
                                               const Optimizer& optimizer) override;

 private:
  using FlatPiece = ZeroFlatSpace::Piece;
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
  // ZeRO-3: a parameter across the shard's edge keeps its elements [begin, end) in the shard
  // in `values` (params), its whole value resident only while gathered.
  struct ShardPart {
    int64_t begin = 0;
    int64_t end = 0;
    Tensor values;
  };
  // ZeRO-3: where a layer's values lie in the flat space (a shared or tied one's in the layer
  // that holds it first) and those of them to release (none in this replica's shard).
  struct LayerValues {
    std::vector<Span> runs;  // maximal runs of its pieces
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
  // One round of a reduce-scatter or an all-gather: posted (its chunks packed, its sends and
  // receives posted), then completed (waited for; summed into the gradients, or the others'
  // parts copied into the values).
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
  // Round k's chunk of each replica in `buffer` (buffer_, or values_buffer_ for the all-gather),
  // and replica i's `count` elements in received_.
  std::vector<Tensor> RoundChunks(const Tensor& buffer, Span span, int64_t k) const;
  Tensor Received(int i, int64_t count) const;
  // The parameters' values of `span` from each replica's part (collective); the storages in it
  // must be resident. A round of it posted (this replica's part packed, the sends and receives
  // posted) and completed (waited for, the others' parts copied in).
  void Gather(Span span, const std::string& what);
  Round PostGather(Span span, int64_t k, const std::string& what);
  void CompleteGather(Round& round);
  Tensor& GatherBuffer();
  // ZeRO-3: the runs of layer `index` not gathered and kept; their bytes; a failure's words.
  std::vector<Span> StaleRuns(int index) const;
  int64_t ValueBytes(const std::vector<Span>& runs) const;
  std::string GatherWhat(int index, int64_t step) const;
  void MakeResident(int index);  // the layer's released values back, the shard's parts in
  void SetUpValues(const std::vector<ZeroLayer>& layers);  // ZeRO-3's part of the constructor
  // The next layer's gather, its first round posted during the current layer's use.
  struct Prefetch {
    int index = -1;
    std::vector<Span> runs;
    Round first;
  };
  void FinishPrefetch();  // the posted round completed, the rest run, the runs kept
  void Release(std::vector<Tensor>& tensors);
  void Restore(std::vector<Tensor>& tensors);  // uninitialised
  void ReleaseOne(Tensor& t);
  // ZeRO-3's shard parts of `values` (those that have one): put into the whole values, or
  // taken from them (resident ones only).
  void FillParts(const std::vector<Tensor>& values);
  void SaveParts(const std::vector<Tensor>& values);

  ReplicaContext context_;
  int level_ = 1;
  bool keep_for_step_ = false;
  std::vector<FlatPiece> flat_;
  int64_t flat_numel_ = 0;
  std::vector<int64_t> boundaries_;  // replica r owns [boundaries_[r], boundaries_[r + 1])
  bool quantized_state_ = false;
  int64_t chunk_ = 0;  // B: each member's elements per round of the collectives
  Tensor buffer_;      // R x B f32 (the gradients), comm
  Tensor received_;    // (R - 1) x B f32: the other replicas' chunks of mine, comm
  // R x B in the parameters' dtype when that is not f32 or at ZeRO-3 (whose gathers run
  // beside the reduce-scatter's rounds), comm; else the all-gather uses buffer_.
  Tensor values_buffer_;
  // ZeRO-2, by graph index. A gradient shared by several layers (a share group's copies) is in
  // each one's `released`; a tied copy beside its original (summed into it first) in its own.
  std::map<int, LayerGrads> layers_;
  std::vector<Span> at_step_end_;  // the flat spans of the layers not final at their backward
  // ZeRO-2: the last round of the last layer reduced in the backward, posted and not yet
  // waited for: completed before the next layer's reduction or at the step end.
  std::optional<Round> in_flight_;
  // ZeRO-3, by graph index.
  std::map<int, LayerValues> values_;
  std::set<std::pair<int64_t, int64_t>> fresh_;  // ZeRO-3: runs gathered and still whole
  std::optional<Prefetch> prefetch_;
  std::map<const Storage*, ShardPart> parts_;  // ZeRO-3, by the parameter value's storage
};

}  // namespace baton
