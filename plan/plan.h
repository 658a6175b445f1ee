// The job plan: what the launcher decides before any worker starts (planner/planner.h makes it),
// as every process receives it (plan/codec.h: proto JobPlan). Workers build their stage from it
// (worker/trainer.h's TrainerSetupFor) and decide none of it themselves.
//
// Below the worker and the planner: the vocabulary both speak (the cut, its tied groups, the
// timeouts), with nothing here that plans or runs anything.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "model/cost.h"
#include "model/graph.h"
#include "plan/parallel_layout.h"
#include "scheduler/schedule.h"

namespace baton {

// How long each kind of wait may take (docs/protocol.md, "Timeouts"), decided once from the
// config by the launcher (TimeoutsFor).
struct Timeouts {
  std::chrono::milliseconds wait{0};                // any wait on a peer: parallel.timeout_s
  std::chrono::milliseconds startup{0};             // rendezvous, ready barrier: max(wait, 60 s)
  std::chrono::milliseconds checkpoint{0};          // a checkpoint's waits: 10 x wait
  std::chrono::milliseconds heartbeat_interval{0};  // how often a worker reports: 0.5 s
  bool operator==(const Timeouts&) const = default;
};

// The job's timeouts from parallel.timeout_s and the job's size.
Timeouts TimeoutsFor(const ParallelConfig& parallel);
// Half a second per process: the part of start-up waits (Timeouts::startup, and a worker's wait
// to reach the coordinator) that grows with the job, so that hundreds of processes starting on a
// few cores do not time out.
std::chrono::milliseconds StartupPerProcess(int64_t processes);

// A parameter several layers hold copies of (the head's "wte.weight" copies the embedding's), and
// the stages holding those layers: they sum its gradient at every step end.
struct TiedGroup {
  std::string param;
  std::vector<int> layers;  // graph indices, ascending
  std::vector<int> stages;  // the stages holding those layers, ascending, distinct
  bool operator==(const TiedGroup&) const = default;
};

struct Plan {
  Config config;
  ModelDims dims;
  std::vector<LayerSpec> graph;
  std::vector<double> layer_costs;         // under config.parallel.partition
  std::vector<LayerRange> virtual_stages;  // p*v contiguous ranges; j runs on schedule.StageOf(j)
  Schedule schedule;  // one pipeline's, of MicroBatchesPerReplica; SEND/RECV actions, validated
  // Evaluation (docs/data.md): the forward-only schedule of the same ranks, chunks and
  // micro-batches, with SEND/RECV actions, validated; and the batches each evaluation reads
  // (EvalBatchesFor), 0 when the config names no held-out data.
  Schedule eval_schedule;
  int64_t eval_batches = 0;
  // Whether both programs dry-run deadlock-free when every send completes only once its receive
  // is posted (CommSemantics::kRendezvous): then every rank completes its sends before each
  // compute action, and its memory peaks do not depend on its peers' speed (worker/engine.h).
  bool sends_complete_before_compute = false;
  // Tied parameters and the stages holding them, under virtual_stages (TiedGroupsFor).
  std::vector<TiedGroup> tied;
  Timeouts timeouts;
  int64_t memory_budget = 0;  // bytes per rank; 0: none
  // Which constraint set the cut: "compute balance", or "memory on stage K (...)" when a
  // budget made early stages take fewer layers (planner/memory_planner.h).
  std::string partition_bound = "compute balance";

  // The stages of one pipeline: the schedule's rows. Each stage runs on T tensor-parallel ranks
  // (parallel.tensor), and a job of R data-parallel replicas runs R such pipelines: who each
  // world rank is, and every group, comes from the layout (plan/parallel_layout.h).
  ParallelLayout layout() const { return ParallelLayout::Of(config.parallel); }
  int num_stages() const { return config.parallel.stages; }
  int num_replicas() const { return config.parallel.replicas; }
  int num_tensor() const { return config.parallel.tensor; }
  int world_size() const { return layout().world_size(); }
  int num_chunks() const { return schedule.chunks; }
  // The stage holding the head (the last virtual stage): p-1, or 0 under the V layout.
  int head_stage() const { return schedule.StageOf(schedule.num_virtual_stages() - 1); }
  // The layer ranges of stage `stage`'s chunks, chunk 0 first.
  std::vector<LayerRange> ChunkRanges(int stage) const;
  MicroBatchShape micro_batch_shape() const;
  // The groups and peers of world rank `world_rank`, as world ranks (docs/parallel.md, "Rank
  // layout"): the workers build their communicators from these and layout()'s groups, and derive
  // none of their own.
  // Every group of two or more ranks it sums over besides its pipeline: each tied group that
  // spans stages it is one of (in its replica, at its tensor rank), then its replica group, then
  // its tensor group.
  std::vector<std::vector<int>> CollectiveGroups(int world_rank) const;
  // The world ranks that sum `group`'s gradient with world rank `world_rank`: the group's stages
  // in its replica at its tensor rank, stage order; empty when its stage holds no copy.
  std::vector<int> TiedRanks(const TiedGroup& group, int world_rank) const;
  // The ranks it exchanges tensors with point to point, ascending: its pipeline neighbours
  // (stage 0 and the last are neighbours: an interleaved schedule's chunks wrap around), and
  // with ZeRO-1 its stage's other replicas, and its stage's other tensor ranks.
  std::vector<int> Peers(int world_rank) const;
  // Every rank it talks to, ascending: Peers and the members of its CollectiveGroups (the pairs
  // a host transport links, e.g. the shared-memory links of ranks on one host).
  std::vector<int> LinkedRanks(int world_rank) const;
  // Cuts the graph at `cut` (virtual_stages), and the tied groups with it.
  void SetCut(std::vector<LayerRange> cut);
  bool operator==(const Plan&) const = default;
};

// The stages holding any of `layers` under the cut `virtual_stages`: ascending, distinct.
std::vector<int> StagesHolding(const std::vector<int>& layers,
                               const std::vector<LayerRange>& virtual_stages, int num_stages,
                               ChunkLayout layout);

// Each tied parameter (model/graph.h's TiedParameters) with the stages holding its layers.
std::vector<TiedGroup> TiedGroupsFor(const std::vector<LayerSpec>& graph, const ModelDims& dims,
                                     const std::vector<LayerRange>& virtual_stages, int num_stages,
                                     ChunkLayout layout);

}  // namespace baton
