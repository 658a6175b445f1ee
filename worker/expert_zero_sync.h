// ZeRO with experts split over expert groups (parallel.zero >= 1 with parallel.experts E > 1;
// docs/parallel.md): the stage's other parameters are a ZeroSync's over every replica (at its
// level: ZeRO-2 releases their gradients outside the shard, ZeRO-3 their values too), and the
// stacked expert parameters each member holds (its N/E experts of each MoE layer) have their
// optimizer state sharded over the member's expert-data-parallel group (the R/E replicas
// holding the same experts, ParallelLayout::ExpertDataGroupOf); their values and gradients stay
// whole on every member holding them at every level.
//
// By this sync's reduction the experts' gradients are whole on every member holding them (the
// step end's expert sums pass sums every replica's contribution in replica order), so member d
// of the D = R/E holding an expert parameter of n elements steps its flat elements
// [d S, min((d + 1) S, n)), S = ceil(n / D), and after the step every member gathers the others'
// updated runs (with 8-bit state, S rounded up to whole blocks of kQuantBlock). The values,
// gradients and every sum are E = 1's bits: only where the state lives changes. The gradient norm
// takes the experts' squares whole, expert by expert (the step end's expert slots), so every E of a
// ZeRO-1 run gives the same norm.
//
// Checkpoints: each expert parameter's state is gathered onto the group's first member (a
// member of expert group 0), which makes it whole across its expert group as without ZeRO.
// Not thread-safe: the Trainer's thread calls it.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "worker/gradient_sync.h"

namespace baton {

class ExpertZeroSync final : public GradientSync {
 public:
  // `rest`: the ZeroSync of every parameter but `experts` (laid out without them). `experts`:
  // this rank's stacked expert parameters split over its expert group. `expert_data`: the
  // context over the expert-data-parallel group (its `replicas` null where the group is this
  // member alone: the state stays whole).
  // `quantized_state`: 8-bit moments (optimizer.state int8), so each run is whole blocks.
  ExpertZeroSync(std::unique_ptr<ZeroSync> rest, std::vector<Param*> experts,
                 ReplicaContext expert_data, bool quantized_state = false);

  const char* reduce_pass() const override { return rest_->reduce_pass(); }
  const char* after_update_pass() const override { return rest_->after_update_pass(); }
  bool after_tied_sums() const override { return rest_->after_tied_sums(); }
  void Reduce(int64_t step) override { rest_->Reduce(step); }
  // The rest's (ZeRO-2's gradients and ZeRO-3's values of the other parameters).
  void BeforeLayerBackward(int index) override { rest_->BeforeLayerBackward(index); }
  bool LayerGradientsDone(int index, int64_t step) override {
    return rest_->LayerGradientsDone(index, step);
  }
  bool BeforeLayerUse(int index, int next, int64_t step) override {
    return rest_->BeforeLayerUse(index, next, step);
  }
  void AfterLayerUse(int index) override { rest_->AfterLayerUse(index); }
  void AcquireLayerValues(int index, bool gather) override {
    rest_->AcquireLayerValues(index, gather);
  }
  void ReleaseLayerValues(int index) override { rest_->ReleaseLayerValues(index); }
  void AttachOptimizer(Optimizer& optimizer) override { rest_->AttachOptimizer(optimizer); }
  // The rest's all-gather, then each expert parameter's over the expert-data-parallel group.
  void AfterUpdate(int64_t step) override;
  // An expert parameter's gradient is whole here (its norm goes expert by expert).
  std::vector<Tensor> ReducedGradient(Param& p) const override;
  bool writes_layer_sums(int) const override { return true; }
  std::optional<OptimizerShard> optimizer_shard() const override;
  // The rest's state gathered onto replica 0, the experts' onto their group's first member:
  // every member of expert group 0 gets the layer (only replica 0's holds the rest's state;
  // the others' is for making the experts whole across the expert group, and not written).
  std::optional<LayerTensors> GatherLayerState(LayerTensors layer,
                                               const Optimizer& optimizer) override;

 private:
  // The flat elements of `p` that member `member` of the expert-data-parallel group steps (with
  // 8-bit state, whole quantisation blocks: S rounded up to one).
  std::pair<int64_t, int64_t> RunOf(const Param& p, int member) const;
  int members() const;  // D
  int member() const;   // this rank's place among them

  std::unique_ptr<ZeroSync> rest_;
  std::vector<Param*> experts_;
  std::set<const Param*> apart_;
  ReplicaContext expert_data_;
  bool quantized_state_ = false;
};

}  // namespace baton
