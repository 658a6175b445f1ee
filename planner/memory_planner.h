// The memory planner: predicts, before anything runs, what each rank's memory ledger will
// measure -- the peak bytes of params, grads, optimizer, activations, comm and workspace, and
// the peak of their sum (docs/memory.md).
//
// It does so by running the real code: for each rank it builds the rank's Trainer (stage model,
// optimizer, engine) on a meta backend (kernels/backend.h: tensors with a shape, a dtype and a
// ledger booking, no storage; every kernel books the workspace it would use) with a meta
// communicator (comm/meta_communicator.h: the transport's staging, no peers), and runs setup,
// one training step and the step end. Nothing is modelled twice: a layer, kernel or optimizer
// that allocates differently is predicted differently, with no planner change. The prediction
// equals the ledger of a real run byte for byte under rendezvous-safe schedules (every plan's own;
// worker/engine.h) and is an upper bound for schedule files that are not.
//
// Thread-safe: pure functions of the plan.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "comm/meta_communicator.h"
#include "core/memory.h"
#include "core/units.h"
#include "model/graph.h"
#include "plan/plan.h"

namespace baton {

struct MemoryPlanOptions {
  // Whose staging the communicator books; by default the run's: Gloo for CPU stages, NCCL for
  // GPU stages. kInProcess matches RunInProcess (planner/in_process.h).
  std::optional<CommTransport> transport;
};

struct RankMemory {
  MemoryFigures peak;      // per category peaks; total = the peak of the sum
  int peak_in_flight = 0;  // most (micro-batch, chunk) stashes alive at once
};

// One entry per world rank (Plan::WorldRank). With data-parallel replicas a rank also
// holds the gradient bucket (comm) and the staging of the replicas' all-reduce.
std::vector<RankMemory> PredictMemory(const Plan& plan, const MemoryPlanOptions& options = {});

// Bytes one micro-batch leaves stashed in layers [range]: their forward run on a meta backend
// (the input counted when a layer keeps it), as `baton plan`'s partition table prints them; with
// tensor ranks, one rank's part.
int64_t StashBytesPerMicroBatch(const Plan& plan, const LayerRange& range);

// A cut of the plan's graph under a memory budget (planner/partitioner.h's MinMaxPartition):
// the smallest largest-stage cost such that every rank's predicted total fits. Under 1F1B stage
// s keeps min(p - s, m) micro-batches in flight, so early stages may take fewer layers. Memory
// aware cutting needs one chunk per rank; with interleaving only the balanced cut is checked.
// With replicas the cut is checked on replica 0's ranks: the lowest member of each all-reduce
// group stages the most (comm/gloo_communicator.h), so no other replica needs more.
struct BudgetedPartition {
  bool fits = false;
  std::vector<LayerRange> virtual_stages;  // the cut; when nothing fits, the one using least memory
  // Which constraint set the cut: "compute balance", or "memory on stage K (...)"; when nothing
  // fits, why, naming the smallest peak a cut reaches.
  std::string bound;
  std::vector<int64_t>
      totals;  // predicted total per stage (replica 0's tensor rank 0) for that cut
};
BudgetedPartition PartitionWithinBudget(const Plan& plan, int64_t budget,
                                        const MemoryPlanOptions& options = {});

// The table `baton plan` prints: per rank its layers, the predicted peak bytes of each category
// and in total, and the micro-batches it keeps in flight; then the budget and what bound the cut.
std::string FormatMemoryTable(const Plan& plan, const std::vector<RankMemory>& predicted);

}  // namespace baton
