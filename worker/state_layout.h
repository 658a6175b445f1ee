// How one rank's parameter state (value, master, moments) is laid out across its groups, and
// the whole <-> part moves that checkpoints and initialisation need, in one place:
//  - tensor ranks (parallel.tensor T > 1): each cut parameter's value, master and moments hold
//    this rank's part of the whole (ParamTensors::split, model/tensor_parallel.h);
//  - ZeRO-1 (parallel.zero 1 with replicas): the optimizer holds master and moments for this
//    replica's shard of the stage's flat parameter space only (GradientSync::optimizer_shard,
//    the optimizer's slots); the values are whole on every replica (ZeRO-3: gathered whole
//    for the layer being saved and made resident for the layer being loaded, then released
//    outside the shard again: GradientSync::AcquireLayerValues).
// A checkpoint holds every tensor whole (docs/checkpoints.md), so with either split saving and
// loading go layer by layer through whole temporaries booked as workspace, one layer at a time;
// without one, the stage's own tensors are written and filled directly.
//
// Collective where the state is split: every rank of the stage's tensor group and replicas calls
// Save and Load at the same point (the worker after the same step; the memory planner books
// through Save). Not thread-safe; the Trainer owns it, and the model, optimizer, sync and group
// it was built with must outlive it.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "checkpoint/checkpoint_snapshot.h"
#include "checkpoint/layer_tensors.h"
#include "kernels/backend.h"
#include "model/tensor_parallel.h"
#include "worker/gradient_sync.h"
#include "worker/optimizer.h"
#include "worker/stage_model.h"

namespace baton {

class StateLayout {
 public:
  // `optimizer` null: the stage keeps no optimizer state (evaluation, INT8 weights). `sync`: the
  // replicas' gradient sync, which says whether (and how) they shard the optimizer's state
  // (GradientSync::optimizer_shard). `tensor` null without tensor ranks, `experts` without an
  // expert group (parallel.experts > 1: each MoE layer's stacked experts hold this member's
  // experts, made whole across the group like a tensor rank's parts). `stage` names errors.
  StateLayout(Backend& backend, StageModel& model, Optimizer* optimizer, GradientSync& sync,
              TensorGroup* tensor, int stage, ExpertGroup* experts = nullptr);
  StateLayout(const StateLayout&) = delete;
  StateLayout& operator=(const StateLayout&) = delete;

  // ZeRO-1: the optimizer holds this replica's shard only.
  bool sharded() const { return sync_.optimizer_shard().has_value(); }
  // Tensor ranks or an expert group: cut parameters hold parts.
  bool cut() const { return tensor_ != nullptr || experts_ != nullptr; }

  // The whole of one cut tensor from this rank's `part` of it and the other ranks' (its tensor
  // group's, or its expert group's: split.over; with tensor ranks too, its expert group's then
  // its tensor group's), booked as workspace. Collective over those groups.
  Tensor GatherWhole(const Tensor& part, const TensorSplit& split);

  // Hands `write` what a checkpoint of this rank stores: its layers with their optimizer state,
  // whole. Unsplit, all in one call; split, one layer per call, gathered onto replica 0 and made
  // whole across the tensor ranks, that layer's temporaries alive until `write` returns (under
  // ZeRO-1 only replica 0's ranks get calls).
  void Save(const std::function<void(const std::vector<LayerTensors>&)>& write);
  // Save into a host copy: `copy` (emptied first) gets a copy of every layer Save hands over, as
  // a background checkpoint's writer needs; null: the save's collective part alone, copying
  // nothing (a rank that writes no files, the memory planner's booking of a save).
  void SaveTo(CheckpointSnapshot* copy);

  // Resuming: `read` fills the whole tensors it is handed (a CheckpointReader's LoadLayers), and
  // each rank keeps its part and shard of them: values, and with an optimizer its state (an
  // evaluation keeps none, so it reads the weights only).
  void Load(const std::function<void(const std::vector<LayerTensors>&)>& read);

  // model.init_from: `load` fills the values and, where it is handed them, the fp32 masters of
  // the layers it is handed from the source's values (their moments are left out: they stay
  // zero). Unsplit, every layer in one call; cut (tensor ranks, an expert group), one layer per
  // call in whole temporaries of which each rank then keeps its part (each param's `split` still
  // says which part: a loader may leave the rest unread). Under ZeRO-1 no masters are handed
  // (they are shards): each is then set from its rounded parameter.
  void InitValues(const std::function<void(const std::vector<LayerTensors>&)>& load);

 private:
  // The tensors of local layer `layer_index`, with `optimizer`'s state for them when given.
  LayerTensors LayerOf(int layer_index, const Optimizer* optimizer) const;
  // ZeRO-1 loading: the layer's values with whole temporaries for its optimizer state; then
  // KeepOwnState copies this replica's shard of them into the optimizer.
  LayerTensors LayerStateToLoad(int layer_index) const;
  void KeepOwnState(const LayerTensors& loaded);
  // Tensor ranks: `layer` with each cut tensor made whole (the group's parts all-gathered and
  // put at their places: the bits each rank holds), a temporary booked as workspace.
  LayerTensors WholeLayer(const LayerTensors& layer);
  // `layer` with each cut tensor replaced by an uninitialised whole one (workspace; its `split`
  // kept: the part this rank will keep); then KeepParts copies this rank's part of each into
  // `layer`'s.
  LayerTensors WholeTemporaries(const LayerTensors& layer) const;
  void KeepParts(const LayerTensors& whole, const LayerTensors& layer);
  void ResetMastersFromValues();

  Backend& backend_;
  StageModel& model_;
  Optimizer* optimizer_;
  GradientSync& sync_;
  TensorGroup* tensor_;
  int stage_;
  ExpertGroup* experts_;
};

}  // namespace baton
