// The memory planner: predicts, before anything runs, what each rank's memory ledger will
// measure -- the peak bytes of params, grads, optimizer, activations, comm and workspace, and
// the peak of their sum (docs/memory.md derives every figure).
//
// Parameters, gradients and optimizer state follow closed forms (cost.h: tied wte counted once
// as a value when one rank holds both ends, its two grads both; an f32 master copy plus f32 m
// and v per parameter, m and v only for f32 parameters). Activations, comm buffers and
// workspace are predicted by replaying the rank's schedule over the layers' allocation pattern
// (memory_replay.h): tokens and targets, every stash kept per (micro-batch, chunk) under the
// checkpoint policy for as many micro-batches as the schedule keeps in flight, receive buffers,
// outputs pending send, recompute, and the transient tensors and kernel staging of each layer
// call. The total is the highest sum at any point of that replay, so transient peaks add up
// only where they coincide.
//
// Thread-safe: pure functions of the plan.
#pragma once

#include <string>
#include <vector>

#include "core/memory.h"
#include "launcher/plan.h"
#include "worker/stage_model.h"

namespace baton {

// How the communicator books memory: Gloo (real processes on CPU) stages the peer's copy of the
// tied-embedding gradient as comm; the in-process FakeHub (RunInProcess) books nothing.
enum class CommTransport { kGloo, kInProcess };

struct MemoryPlanOptions {
  CommTransport transport = CommTransport::kGloo;
};

struct RankMemory {
  MemoryFigures peak;      // per category peaks; total = the peak of the sum
  int peak_in_flight = 0;  // most (micro-batch, chunk) stashes alive at once
};

// One entry per rank.
std::vector<RankMemory> PredictMemory(const Plan& plan, const MemoryPlanOptions& options = {});

// Rank `rank` of `plan` if its virtual stages were `virtual_stages` (p*v ranges, the cut a
// partitioner is considering); the plan's schedule and config are used as they are.
RankMemory PredictRankMemory(const Plan& plan, int rank,
                             const std::vector<LayerRange>& virtual_stages,
                             const MemoryPlanOptions& options = {});

// A cut of the plan's graph under a memory budget (launcher/partitioner.h's MinMaxPartition):
// the smallest largest-stage cost such that every rank's predicted total fits. Under 1F1B stage
// s keeps min(p - s, m) micro-batches in flight, so early stages may take fewer layers. Memory
// aware cutting needs one chunk per rank; with interleaving only the balanced cut is checked.
struct BudgetedPartition {
  bool fits = false;
  std::vector<LayerRange> virtual_stages;  // the cut; when nothing fits, the one using least memory
  // Which constraint set the cut: "compute balance", or "memory on stage K (...)"; when nothing
  // fits, why, naming the smallest peak a cut reaches.
  std::string bound;
  std::vector<int64_t> totals;  // predicted total per rank for that cut
};
BudgetedPartition PartitionWithinBudget(const Plan& plan, int64_t budget,
                                        const MemoryPlanOptions& options = {});

// "params" -> bytes ..., "total" -> bytes: the key names of the report's memory objects.
std::vector<std::pair<std::string, int64_t>> MemoryEntries(const MemoryFigures& figures);

// The table `baton plan` prints: per rank its layers, the predicted peak bytes of each category
// and in total, and the micro-batches it keeps in flight; then the budget and what bound the cut.
std::string FormatMemoryTable(const Plan& plan, const std::vector<RankMemory>& predicted);

// Byte sizes as people write them: "24GiB", "512MiB", "1.5GB", "4096", "64 KiB" (binary units
// KiB MiB GiB TiB; decimal KB MB GB TB; B or none for bytes). Throws baton::Error otherwise.
int64_t ParseByteSize(const std::string& text);
// 1536 -> "1.50 KiB"; exact below 1 KiB.
std::string FormatBytes(int64_t bytes);

}  // namespace baton
