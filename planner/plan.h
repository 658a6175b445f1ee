// The job plan: what the launcher decides before any worker starts.
//
// From a validated Config it builds the layer graph, cuts it into p*v virtual stages
// (planner/partitioner.h), generates the schedule, inserts its communication and validates it
// (an invalid schedule is an error with the marked rank x time grid). Workers receive the plan
// (proto JobPlan) and never decide any of it themselves.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "model/cost.h"
#include "model/graph.h"
#include "scheduler/schedule.h"
#include "worker/stage_model.h"
#include "worker/trainer.h"

namespace baton {

// How long each kind of wait may take (docs/protocol.md, "Timeouts"), decided once from the
// config by the launcher.
struct Timeouts {
  std::chrono::milliseconds wait{0};                // any wait on a peer: parallel.timeout_s
  std::chrono::milliseconds startup{0};             // rendezvous, ready barrier: max(wait, 60 s)
  std::chrono::milliseconds checkpoint{0};          // a checkpoint's waits: 10 x wait
  std::chrono::milliseconds heartbeat_interval{0};  // how often a worker reports: 0.5 s
  bool operator==(const Timeouts&) const = default;
};
Timeouts TimeoutsFor(const ParallelConfig& parallel);
// Half a second per process: the part of start-up waits (Timeouts::startup, and a worker's wait
// to reach the coordinator) that grows with the job, so that hundreds of processes starting on a
// few cores do not time out.
std::chrono::milliseconds StartupPerProcess(int64_t processes);

struct Plan {
  Config config;
  ModelDims dims;
  std::vector<LayerSpec> graph;
  std::vector<double> layer_costs;         // under config.parallel.partition
  std::vector<LayerRange> virtual_stages;  // p*v contiguous ranges; j runs on rank j % p
  Schedule schedule;  // one pipeline's, of MicroBatchesPerReplica; SEND/RECV actions, validated
  // Evaluation (docs/data.md): the forward-only schedule of the same ranks, chunks and
  // micro-batches, with SEND/RECV actions, validated; and the batches each evaluation reads
  // (EvalBatchesFor), 0 when the config names no held-out data.
  Schedule eval_schedule;
  int64_t eval_batches = 0;
  std::vector<TiedGroup> tied;  // tied parameters and the ranks holding them
  Timeouts timeouts;
  int64_t memory_budget = 0;  // bytes per rank; 0: none
  // Which constraint set the cut: "compute balance", or "memory on stage K (...)" when a
  // budget made early stages take fewer layers (planner/memory_planner.h).
  std::string partition_bound = "compute balance";

  // The ranks of one pipeline (stages): the schedule's ranks. A job of R data-parallel replicas
  // runs R such pipelines, world rank = replica * num_ranks() + stage (docs/parallel.md).
  int num_ranks() const { return config.parallel.stages; }
  int num_replicas() const { return config.parallel.replicas; }
  int world_size() const { return num_ranks() * num_replicas(); }
  int StageOf(int world_rank) const { return world_rank % num_ranks(); }
  int ReplicaOf(int world_rank) const { return world_rank / num_ranks(); }
  int num_chunks() const { return schedule.chunks; }
  // The layer ranges of rank `rank`'s chunks, chunk 0 first.
  std::vector<LayerRange> ChunkRanges(int rank) const;
  MicroBatchShape micro_batch_shape() const;
  // What world rank `world_rank`'s Trainer is built from: everything here, nothing re-derived.
  // `comm` spans the world (all world_size() ranks); null when that is one rank.
  TrainerSetup TrainerSetupFor(int world_rank, Communicator* comm) const;
  bool operator==(const Plan&) const = default;
};

// Each tied parameter (model/graph.h's TiedParameters) with the ranks holding its layers.
std::vector<TiedGroup> TiedGroupsFor(const std::vector<LayerSpec>& graph, const ModelDims& dims,
                                     const std::vector<LayerRange>& virtual_stages, int num_ranks);

// With `memory_budget` > 0 the cut also keeps every rank's predicted memory total within it
// (the Gloo transport's figures: what `baton run` measures); throws baton::Error naming the
// smallest peak any cut reaches when none fits.
Plan MakePlan(const Config& config, int64_t memory_budget = 0);

// The share groups (model.share) that the cut spreads over more than one rank, each as
// "blocks 0-7 (layers 1-8) on stages 0, 1": every such stage holds a copy of the group's shared
// parameters, their gradients summed across those stages at every step end.
std::vector<std::string> SplitShareGroups(const Plan& plan);

// The table `baton plan` prints: stage, layers, parameters, FLOPs, activation bytes per
// micro-batch.
std::string FormatPartitionTable(const Plan& plan);

}  // namespace baton
