// The memory planner (see memory_planner.h): each rank's real trainer -- stage model, optimizer,
// engine and step end -- run for one step on a meta backend with a meta communicator.
#include "planner/memory_planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <tuple>

#include "checkpoint/checkpoint_snapshot.h"
#include "comm/meta_communicator.h"
#include "core/error.h"
#include "kernels/backend_factory.h"
#include "model/graph.h"
#include "planner/partitioner.h"
#include "worker/trainer.h"

namespace baton {
namespace {

CommTransport TransportFor(const Plan& plan, const MemoryPlanOptions& options) {
  if (options.transport) return *options.transport;
  return plan.config.device.type == DeviceType::kCpu ? CommTransport::kGloo : CommTransport::kNccl;
}

// The device a rank's meta backend stands for: the CPU, or a GPU (which one does not matter).
Device PlannedDevice(const Config& config) {
  return config.device.type == DeviceType::kCpu ? Device::Cpu() : Device::Cuda(0);
}

// `rank`: a world rank (Plan::WorldRank).
RankMemory PredictRank(const Plan& plan, int rank, const std::vector<LayerRange>& virtual_stages,
                       const MemoryPlanOptions& options) {
  const int p = plan.world_size();
  BATON_CHECK(0 <= rank && rank < p, "rank {} of a {}-rank plan", rank, p);
  BATON_CHECK(static_cast<int>(virtual_stages.size()) == plan.schedule.num_virtual_stages(),
              "{} layer ranges for {} virtual stages", virtual_stages.size(),
              plan.schedule.num_virtual_stages());
  MemoryLedger ledger;
  RankMemory result;
  {
    std::unique_ptr<Backend> backend =
        MakeMetaBackend(PlannedDevice(plan.config), ledger, plan.config.device.threads);
    std::unique_ptr<Communicator> comm =
        p > 1 ? MakeMetaCommunicator(rank, p, TransportFor(plan, options), backend->allocator(),
                                     static_cast<int>(plan.LinkedRanks(rank).size()))
              : nullptr;
    Plan cut = plan;
    cut.SetCut(virtual_stages);
    Trainer trainer(TrainerSetupFor(cut, rank, comm.get()), *backend);
    trainer.Step(1);
    // Saving books after a step what the worker's save books: under ZeRO-1 replica 0's gathered
    // optimizer state, with tensor ranks the whole tensors and their sums' staging, a layer at
    // a time. A background save (output.async_checkpoint) also fills a host copy of what the
    // rank writes, kept from then on: the steps after that save run beside it, and a later save
    // gathers its temporaries beside the whole copy.
    MetaAllocator host(ledger, Device::Cpu());
    CheckpointSnapshot snapshot(host);
    const bool copies =
        plan.config.output.async_checkpoint && WritesCheckpointFiles(plan.layout(), rank);
    if (SavesACheckpoint(plan.config)) trainer.state().SaveTo(copies ? &snapshot : nullptr);
    if (copies && SavesBeforeTheLastStep(plan.config)) {
      trainer.Step(2);
      if (CheckpointsSaved(plan.config) > 1) trainer.state().SaveTo(&snapshot);
    }
    result.peak_in_flight = trainer.peak_stashed_microbatches();
  }
  result.peak = ledger.Peak();
  return result;
}

// Tensor rank 0 of a stage's T, for layers run on a meta backend alone: its sums move nothing.
class LedgerOnlyTensorGroup final : public TensorGroup {
 public:
  LedgerOnlyTensorGroup(int size, bool sequence_parallel)
      : size_(size), sequence_parallel_(sequence_parallel) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  bool sequence_parallel() const override { return sequence_parallel_; }
  void AllReduceSum(Tensor& /*t*/) override {}
  void AllGather(Tensor& /*whole*/, int /*dim*/) override {}
  void ReduceScatterSum(Tensor& /*whole*/, int /*dim*/) override {}

 private:
  int size_;
  bool sequence_parallel_;
};

}  // namespace

int64_t StashBytesPerMicroBatch(const Plan& plan, const LayerRange& range) {
  BATON_CHECK(0 <= range.first && range.first <= range.last &&
                  range.last < static_cast<int>(plan.graph.size()),
              "layer range [{}, {}] outside a graph of {} layers", range.first, range.last,
              plan.graph.size());
  MemoryLedger ledger;
  std::unique_ptr<Backend> backend =
      MakeMetaBackend(PlannedDevice(plan.config), ledger, plan.config.device.threads);
  const MicroBatchShape shape = plan.micro_batch_shape();
  const DType dtype = plan.config.precision.dtype;
  // A tensor rank's part of each layer.
  LedgerOnlyTensorGroup tensor(plan.num_tensor(), plan.config.parallel.sequence_parallel);
  std::vector<std::unique_ptr<Layer>> layers;
  for (int i = range.first; i <= range.last; ++i) {
    layers.push_back(BuildLayer(plan.graph[static_cast<size_t>(i)], plan.dims, *backend, dtype,
                                dtype, plan.config.train.seed, nullptr,
                                plan.num_tensor() > 1 ? &tensor : nullptr));
    layers.back()->set_selective_recompute(shape.selective_recompute);
    layers.back()->set_flash_attention(shape.flash_attention);
  }
  MicroBatch batch;
  const Shape tokens = {shape.batch_size, shape.seq_len};
  batch.tokens =
      Tensor::Empty(backend->allocator(), tokens, DType::kI32, MemCategory::kActivations);
  batch.targets =
      Tensor::Empty(backend->allocator(), tokens, DType::kI32, MemCategory::kActivations);
  const int64_t before = ledger.current(MemCategory::kActivations);
  Tensor x;
  if (range.first > 0) {
    // Under sequence parallelism a rank receives its part of the sequence.
    const int64_t positions =
        shape.seq_len / (plan.config.parallel.sequence_parallel ? plan.num_tensor() : 1);
    x = Tensor::Empty(backend->allocator(), {shape.batch_size, positions, plan.dims.width}, dtype,
                      MemCategory::kActivations);
  }
  std::vector<Stash> stashes(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) x = layers[i]->Forward(x, batch, stashes[i]);
  x = Tensor();  // the output moves on to the next stage; what is still booked is the stash
  return ledger.current(MemCategory::kActivations) - before;
}

std::vector<RankMemory> PredictMemory(const Plan& plan, const MemoryPlanOptions& options) {
  std::vector<RankMemory> ranks;
  for (int r = 0; r < plan.world_size(); ++r) {
    ranks.push_back(PredictRank(plan, r, plan.virtual_stages, options));
  }
  return ranks;
}

namespace {

std::vector<int64_t> RankTotals(const Plan& plan, const std::vector<LayerRange>& virtual_stages,
                                const MemoryPlanOptions& options) {
  std::vector<int64_t> totals;
  for (int s = 0; s < plan.num_stages(); ++s) {  // replica 0's, tensor rank 0's
    totals.push_back(
        PredictRank(plan, plan.layout().WorldRank({.stage = s}), virtual_stages, options)
            .peak.total);
  }
  return totals;
}

std::string OverBudget(const std::vector<int64_t>& totals, int64_t budget) {
  std::string stages;
  for (size_t r = 0; r < totals.size(); ++r) {
    if (totals[r] <= budget) continue;
    stages += fmt::format("{}stage {} ({} with the balanced cut)", stages.empty() ? "" : ", ", r,
                          FormatBytes(totals[r]));
  }
  return stages;
}

}  // namespace

BudgetedPartition PartitionWithinBudget(const Plan& plan, int64_t budget,
                                        const MemoryPlanOptions& options) {
  BATON_CHECK(budget > 0, "a memory budget must be positive, got {}", budget);
  BudgetedPartition result;
  const std::vector<int64_t> balanced = RankTotals(plan, plan.virtual_stages, options);
  const int64_t balanced_peak = *std::max_element(balanced.begin(), balanced.end());
  if (balanced_peak <= budget) {
    return {true, plan.virtual_stages, "compute balance", balanced};
  }
  if (plan.num_chunks() > 1) {
    return {false, plan.virtual_stages,
            fmt::format("memory on {}; memory-aware cutting needs one chunk per rank",
                        OverBudget(balanced, budget)),
            balanced};
  }
  // Stage k spanning range r: its predicted total, memoised (each is a replay of the rank).
  std::map<std::tuple<int, int, int>, int64_t> memo;
  const auto total = [&](int k, const LayerRange& r) {
    auto [it, inserted] = memo.try_emplace({k, r.first, r.last}, 0);
    if (inserted) {
      std::vector<LayerRange> cut = plan.virtual_stages;
      cut[static_cast<size_t>(k)] = r;
      it->second =
          PredictRank(plan, plan.layout().WorldRank({.stage = k}), cut, options).peak.total;
    }
    return it->second;
  };
  std::vector<double> prefix(plan.layer_costs.size() + 1, 0.0);
  for (size_t i = 0; i < plan.layer_costs.size(); ++i) {
    prefix[i + 1] = prefix[i] + plan.layer_costs[i];
  }
  const int n = static_cast<int>(plan.graph.size());
  const std::optional<std::vector<LayerRange>> cut =
      MinMaxPartition(n, plan.num_stages(), [&](int k, const LayerRange& r) {
        if (total(k, r) > budget) return std::numeric_limits<double>::infinity();
        return prefix[static_cast<size_t>(r.last) + 1] - prefix[static_cast<size_t>(r.first)];
      });
  if (cut) {
    return {true, *cut, fmt::format("memory on {}", OverBudget(balanced, budget)),
            RankTotals(plan, *cut, options)};
  }
  const std::vector<LayerRange> leanest = *MinMaxPartition(
      n, plan.num_stages(),
      [&](int k, const LayerRange& r) { return static_cast<double>(total(k, r)); });
  result.virtual_stages = leanest;
  result.totals = RankTotals(plan, leanest, options);
  const auto worst = std::max_element(result.totals.begin(), result.totals.end());
  result.bound = fmt::format(
      "no cut into {} stages fits {}: the smallest peak any cut reaches is {} (stage {})",
      plan.num_stages(), FormatBytes(budget), FormatBytes(*worst), worst - result.totals.begin());
  return result;
}

std::string FormatMemoryTable(const Plan& plan, const std::vector<RankMemory>& predicted) {
  const ParallelLayout layout = plan.layout();
  const bool replicas = layout.replicas() > 1;
  const bool tensor = layout.tensor() > 1;
  std::string out = fmt::format("{:>5} {}{}{:>9}", "stage", replicas ? "replica " : "",
                                tensor ? "tensor " : "", "layers");
  for (const auto& [key, bytes] : MemoryEntries(MemoryFigures{}))
    out += fmt::format(" {:>12}", key);
  out += fmt::format(" {:>9}\n", "in flight");
  for (int r = 0; r < static_cast<int>(predicted.size()); ++r) {
    const Coordinates at = layout.At(r);
    const std::vector<LayerRange> chunks = plan.ChunkRanges(at.stage);
    std::string layers;
    for (const LayerRange& c : chunks) {
      layers += fmt::format("{}{}-{}", layers.empty() ? "" : ",", c.first, c.last);
    }
    out +=
        fmt::format("{:>5} {}{}{:>9}", at.stage, replicas ? fmt::format("{:>7} ", at.replica) : "",
                    tensor ? fmt::format("{:>6} ", at.tensor) : "", layers);
    for (const auto& [key, bytes] : MemoryEntries(predicted.at(static_cast<size_t>(r)).peak)) {
      out += fmt::format(" {:>12}", FormatBytes(bytes));
    }
    out += fmt::format(" {:>9}\n", predicted.at(static_cast<size_t>(r)).peak_in_flight);
  }
  if (plan.memory_budget > 0) {
    out += fmt::format("memory budget {} per stage; the cut is bound by {}\n",
                       FormatBytes(plan.memory_budget), plan.partition_bound);
  }
  return out;
}

}  // namespace baton
