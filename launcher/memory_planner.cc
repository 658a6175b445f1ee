// The memory planner (see memory_planner.h): replays each rank's setup, one training step and
// the step end over a MemoryLedger of symbolic tensors.
#include "launcher/memory_planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <tuple>

#include "core/error.h"
#include "launcher/memory_replay.h"
#include "launcher/partitioner.h"
#include "launcher/step_time.h"
#include "model/cost.h"
#include "scheduler/simulator.h"
#include "worker/engine.h"

namespace baton {
namespace {

constexpr int64_t kF32Bytes = 4;
constexpr int64_t kI32Bytes = 4;

// ---- when the engine frees an output it sent

// The engine keeps a sent tensor until a ReapSends (after every action) finds the send complete,
// and a send completes once the peer has posted the matching receive (rendezvous, as FakeHub,
// Gloo and NCCL do). Each action is placed in time by the simulator under FLOP costs: a SEND
// or RECV is posted when its rank finishes the action before it. A send is taken as reaped
// after the first action of its rank that ends strictly after the peer posted the receive.
// Returns, per action of `rank`, the program indices of the sends reaped right after it.
std::vector<std::vector<int>> ReapSchedule(const Plan& plan,
                                           const std::vector<LayerRange>& virtual_stages,
                                           int rank) {
  const Schedule& schedule = plan.schedule;
  const int p = schedule.stages;
  const SimulationResult sim = Simulate(schedule, FlopCosts(plan, virtual_stages));
  const double eps = 1e-9 * std::max(1.0, sim.makespan);
  // posted[r][i]: when rank r dispatches action i; done[r][i]: when it returns from it.
  std::vector<std::vector<double>> posted(static_cast<size_t>(p)), done(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    double t = 0;
    size_t k = 0;
    for (const Action& action : schedule.per_rank[static_cast<size_t>(r)]) {
      posted[static_cast<size_t>(r)].push_back(t);
      if (IsCompute(action.kind)) t = sim.timeline[static_cast<size_t>(r)].at(k++).end;
      done[static_cast<size_t>(r)].push_back(t);
    }
  }
  // The k-th receive posted on each link (src -> dst), in the receiver's order.
  std::map<std::pair<int, int>, std::vector<double>> recv_times;
  for (int r = 0; r < p; ++r) {
    const auto& actions = schedule.per_rank[static_cast<size_t>(r)];
    for (size_t i = 0; i < actions.size(); ++i) {
      if (!IsRecv(actions[i].kind)) continue;
      recv_times[{PeerRank(actions[i], p), r}].push_back(posted[static_cast<size_t>(r)][i]);
    }
  }
  const auto& actions = schedule.per_rank[static_cast<size_t>(rank)];
  const auto& rank_done = done[static_cast<size_t>(rank)];
  std::vector<std::vector<int>> reaped(actions.size());
  std::map<int, size_t> sent;  // per peer: sends so far
  for (size_t i = 0; i < actions.size(); ++i) {
    if (!IsSend(actions[i].kind)) continue;
    const int peer = PeerRank(actions[i], p);
    const std::vector<double>& recvs = recv_times.at({rank, peer});
    const double recv_posted = recvs.at(sent[peer]++);
    for (size_t j = i; j < actions.size(); ++j) {
      if (recv_posted < rank_done[j] - eps) {
        reaped[j].push_back(static_cast<int>(i));
        break;
      }
    }  // not reaped by any action: the step's final ReapSends(wait_all) frees it
  }
  return reaped;
}

// ---- one rank

class RankReplay {
 public:
  RankReplay(const Plan& plan, int rank, const std::vector<LayerRange>& virtual_stages,
             const MemoryPlanOptions& options, bool sends_complete_before_compute)
      : plan_(plan),
        rank_(rank),
        options_(options),
        sends_complete_before_compute_(sends_complete_before_compute) {
    const Config& config = plan.config;
    for (int c = 0; c < plan.num_chunks(); ++c) {
      chunks_.push_back(
          virtual_stages.at(static_cast<size_t>(VirtualStage(rank, c, plan.num_ranks()))));
    }
    const int last = static_cast<int>(plan.graph.size()) - 1;
    for (const LayerRange& r : chunks_) {
      holds_first_ |= r.first == 0;
      holds_last_ |= r.last == last;
    }
    ctx_.ledger = &ledger_;
    ctx_.dims = plan.dims;
    ctx_.batch = MicroBatchSize(config);
    ctx_.seq = SequenceLength(config);
    ctx_.act_dtype = config.precision.dtype;
    ctx_.param_dtype = config.precision.dtype;
    ctx_.selective = config.parallel.checkpoint.kind == CheckpointPolicy::Kind::kSelective;
    ctx_.threads = config.device.threads;
    every_ = config.parallel.checkpoint.kind == CheckpointPolicy::Kind::kEvery
                 ? config.parallel.checkpoint.every
                 : 0;
    slots_.resize(static_cast<size_t>(config.train.micro_batches) * chunks_.size());
  }

  RankMemory Run(const std::vector<std::vector<int>>& reaped) {
    Setup();
    Step(reaped);
    StepEnd();
    return {ledger_.Peak(), peak_in_flight_};
  }

 private:
  struct Slot {
    SymTensor input, output, grad_output, grad_input;
    std::vector<SymStash> stashes;
    std::vector<SymTensor> segment_inputs;
  };

  const LayerSpec& Spec(const LayerRange& range, int i) const {
    return plan_.graph[static_cast<size_t>(range.first + i)];
  }
  Slot& slot(int microbatch, int chunk) {
    return slots_[static_cast<size_t>(microbatch) * chunks_.size() + static_cast<size_t>(chunk)];
  }
  int VirtualOf(int chunk) const { return VirtualStage(rank_, chunk, plan_.num_ranks()); }
  int NumVirtual() const { return plan_.num_ranks() * static_cast<int>(chunks_.size()); }

  // worker/trainer.cc's constructor: StageModel (values and grads, layer by layer; a head tied
  // to a local embedding drops its own wte), Optimizer (master, m, v per distinct value),
  // then tokens and targets per micro-batch.
  void Setup() {
    int64_t distinct_numel = 0;
    SymTensor head_wte;  // the head's own copy, until StageModel ties it to the embedding's
    for (const LayerRange& r : chunks_) {
      for (int i = 0; i < r.size(); ++i) {
        for (int64_t numel : ParamNumels(Spec(r, i), plan_.dims)) {
          head_wte = ctx_.New(MemCategory::kParams, numel, ctx_.param_dtype);  // the last wins
          persistent_.push_back(head_wte);
          persistent_.push_back(ctx_.New(MemCategory::kGrads, numel, DType::kF32));
          distinct_numel += numel;
        }
      }
    }
    if (holds_first_ && holds_last_) {  // StageModel shares the embedding's wte with the head
      persistent_.erase(
          std::find_if(persistent_.begin(), persistent_.end(),
                       [&](const SymTensor& t) { return t.identity() == head_wte.identity(); }));
      distinct_numel -= int64_t{plan_.dims.vocab_size} * plan_.dims.width;
    }
    head_wte = SymTensor();
    const bool master = ctx_.param_dtype != DType::kF32;
    persistent_.push_back(
        ctx_.New(MemCategory::kOptimizer, distinct_numel * (master ? 3 : 2), DType::kF32));
    const int64_t tokens = ctx_.batch * ctx_.seq;
    for (int k = 0; k < plan_.config.train.micro_batches; ++k) {
      if (holds_first_)
        persistent_.push_back(ctx_.New(MemCategory::kActivations, tokens, DType::kI32));
      if (holds_last_)
        persistent_.push_back(ctx_.New(MemCategory::kActivations, tokens, DType::kI32));
    }
  }

  // worker/engine.cc: RunStep over this rank's actions.
  void Step(const std::vector<std::vector<int>>& reaped) {
    const auto& actions = plan_.schedule.per_rank[static_cast<size_t>(rank_)];
    std::map<int, SymTensor> pending;  // program index of the SEND -> the tensor it holds
    for (size_t i = 0; i < actions.size(); ++i) {
      const Action& a = actions[i];
      if (sends_complete_before_compute_ && IsCompute(a.kind)) pending.clear();
      switch (a.kind) {
        case ActionKind::kForward:
          Forward(a);
          break;
        case ActionKind::kBackward:
        case ActionKind::kBackwardInput:
          Backward(a, a.kind == ActionKind::kBackwardInput);
          break;
        case ActionKind::kBackwardWeight:
          BackwardWeight(a);
          break;
        case ActionKind::kSendForward:
          pending[static_cast<int>(i)] = std::move(slot(a.microbatch, a.chunk).output);
          break;
        case ActionKind::kSendBackward:
          pending[static_cast<int>(i)] = std::move(slot(a.microbatch, a.chunk).grad_input);
          break;
        case ActionKind::kRecvForward:
          slot(a.microbatch, a.chunk).input = ctx_.Act(ctx_.rows() * plan_.dims.width);
          break;
        case ActionKind::kRecvBackward:
          slot(a.microbatch, a.chunk).grad_output = ctx_.Act(ctx_.rows() * plan_.dims.width);
          break;
      }
      if (!reaped.empty()) {
        for (int send : reaped[i]) pending.erase(send);
      }
    }
    pending.clear();
    for (Slot& s : slots_) s = Slot{};
  }

  void Forward(const Action& a) {
    const LayerRange& range = chunks_.at(static_cast<size_t>(a.chunk));
    Slot& s = slot(a.microbatch, a.chunk);
    const int vs = VirtualOf(a.chunk);
    SymTensor x;
    if (vs > 0 && RankOfVirtualStage(vs - 1, plan_.num_ranks()) == rank_) {
      x = std::move(slot(a.microbatch, a.chunk - 1).output);
    } else if (vs > 0) {
      x = s.input;
    }
    const int n = range.size();
    s.stashes.resize(static_cast<size_t>(n));
    peak_in_flight_ = std::max(peak_in_flight_, ++in_flight_);
    for (int i = 0; i < n; ++i) {
      if (every_ > 0 && i % every_ == 0) s.segment_inputs.push_back(x);
      x = ReplayForward(ctx_, Spec(range, i), x, s.stashes[static_cast<size_t>(i)]);
      if (every_ > 0 && (i % every_ == every_ - 1 || i == n - 1)) {
        for (int j = i - i % every_; j <= i; ++j) s.stashes[static_cast<size_t>(j)].Clear();
      }
    }
    s.input = SymTensor();
    if (range.last == static_cast<int>(plan_.graph.size()) - 1) x = SymTensor();  // the loss
    if (x.defined()) s.output = std::move(x);
  }

  void Recompute(Slot& s, const LayerRange& range, int segment) {
    const int first = segment * every_;
    const int last = std::min(first + every_, range.size()) - 1;
    SymTensor x = s.segment_inputs[static_cast<size_t>(segment)];
    for (int j = first; j <= last; ++j) {
      x = ReplayForward(ctx_, Spec(range, j), x, s.stashes[static_cast<size_t>(j)]);
    }
    s.segment_inputs[static_cast<size_t>(segment)] = SymTensor();
  }

  void Backward(const Action& a, bool input_only) {
    const LayerRange& range = chunks_.at(static_cast<size_t>(a.chunk));
    Slot& s = slot(a.microbatch, a.chunk);
    const int vs = VirtualOf(a.chunk);
    SymTensor dy;
    if (vs + 1 < NumVirtual() && RankOfVirtualStage(vs + 1, plan_.num_ranks()) == rank_) {
      dy = std::move(slot(a.microbatch, a.chunk + 1).grad_input);
    } else if (vs + 1 < NumVirtual()) {
      dy = std::move(s.grad_output);
    }
    const int n = range.size();
    for (int i = n - 1; i >= 0; --i) {
      if (every_ > 0 && (i % every_ == every_ - 1 || i == n - 1)) Recompute(s, range, i / every_);
      dy = ReplayBackward(ctx_, Spec(range, i), dy, s.stashes[static_cast<size_t>(i)], input_only);
    }
    s.segment_inputs.clear();
    if (!input_only) {
      s.stashes.clear();
      --in_flight_;
    }
    if (vs > 0) s.grad_input = std::move(dy);
  }

  void BackwardWeight(const Action& a) {
    const LayerRange& range = chunks_.at(static_cast<size_t>(a.chunk));
    Slot& s = slot(a.microbatch, a.chunk);
    for (int i = range.size() - 1; i >= 0; --i) {
      ReplayBackwardWeight(ctx_, Spec(range, i), s.stashes[static_cast<size_t>(i)]);
    }
    s.stashes.clear();
    --in_flight_;
  }

  // worker/trainer.cc after RunStep: the tied-gradient all-reduce (Gloo stages the peer's f32
  // copy as comm), one SumOfSquares per gradient (a double per 4096 elements of workspace),
  // then AdamW, which allocates nothing.
  void StepEnd() {
    const int64_t wte = int64_t{plan_.dims.vocab_size} * plan_.dims.width;
    const bool tied_across_ranks = (holds_first_ != holds_last_) && plan_.num_ranks() > 1;
    if (tied_across_ranks && options_.transport == CommTransport::kGloo) {
      ledger_.Book(MemCategory::kComm, wte * kF32Bytes);
      ledger_.Release(MemCategory::kComm, wte * kF32Bytes);
    }
    const int last = static_cast<int>(plan_.graph.size()) - 1;
    for (const LayerRange& r : chunks_) {
      for (int i = 0; i < r.size(); ++i) {
        std::vector<int64_t> numels = ParamNumels(Spec(r, i), plan_.dims);
        if (r.first + i == last) numels.pop_back();  // the head's tied wte is skipped
        for (int64_t numel : numels) {
          const int64_t bytes = 2 * ((numel + 4095) / 4096) * kF32Bytes;
          ledger_.Book(MemCategory::kWorkspace, bytes);
          ledger_.Release(MemCategory::kWorkspace, bytes);
        }
      }
    }
  }

  const Plan& plan_;
  const int rank_;
  const MemoryPlanOptions options_;
  const bool sends_complete_before_compute_;
  std::vector<LayerRange> chunks_;
  bool holds_first_ = false;
  bool holds_last_ = false;
  int every_ = 0;
  MemoryLedger ledger_;
  ReplayContext ctx_;
  std::vector<SymTensor> persistent_;
  std::vector<Slot> slots_;
  int in_flight_ = 0;
  int peak_in_flight_ = 0;
};

// The engine's send mode is a property of the schedule (worker/engine.h): decided once per plan.
RankMemory PredictRank(const Plan& plan, int rank, const std::vector<LayerRange>& virtual_stages,
                       const MemoryPlanOptions& options, bool sends_complete_before_compute) {
  BATON_CHECK(0 <= rank && rank < plan.num_ranks(), "rank {} of a {}-rank plan", rank,
              plan.num_ranks());
  BATON_CHECK(static_cast<int>(virtual_stages.size()) == plan.schedule.num_virtual_stages(),
              "{} layer ranges for {} virtual stages", virtual_stages.size(),
              plan.schedule.num_virtual_stages());
  RankReplay replay(plan, rank, virtual_stages, options, sends_complete_before_compute);
  if (sends_complete_before_compute) return replay.Run({});
  return replay.Run(ReapSchedule(plan, virtual_stages, rank));
}

}  // namespace

RankMemory PredictRankMemory(const Plan& plan, int rank,
                             const std::vector<LayerRange>& virtual_stages,
                             const MemoryPlanOptions& options) {
  return PredictRank(plan, rank, virtual_stages, options, RendezvousSafeSends(plan.schedule));
}

std::vector<RankMemory> PredictMemory(const Plan& plan, const MemoryPlanOptions& options) {
  const bool sends_complete = RendezvousSafeSends(plan.schedule);
  std::vector<RankMemory> ranks;
  for (int r = 0; r < plan.num_ranks(); ++r) {
    ranks.push_back(PredictRank(plan, r, plan.virtual_stages, options, sends_complete));
  }
  return ranks;
}

namespace {

std::vector<int64_t> RankTotals(const Plan& plan, const std::vector<LayerRange>& virtual_stages,
                                const MemoryPlanOptions& options, bool sends_complete) {
  std::vector<int64_t> totals;
  for (int r = 0; r < plan.num_ranks(); ++r) {
    totals.push_back(PredictRank(plan, r, virtual_stages, options, sends_complete).peak.total);
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
  const bool sends_complete = RendezvousSafeSends(plan.schedule);
  const std::vector<int64_t> balanced =
      RankTotals(plan, plan.virtual_stages, options, sends_complete);
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
      it->second = PredictRank(plan, k, cut, options, sends_complete).peak.total;
    }
    return it->second;
  };
  std::vector<double> prefix(plan.layer_costs.size() + 1, 0.0);
  for (size_t i = 0; i < plan.layer_costs.size(); ++i) {
    prefix[i + 1] = prefix[i] + plan.layer_costs[i];
  }
  const int n = static_cast<int>(plan.graph.size());
  const std::optional<std::vector<LayerRange>> cut =
      MinMaxPartition(n, plan.num_ranks(), [&](int k, const LayerRange& r) {
        if (total(k, r) > budget) return std::numeric_limits<double>::infinity();
        return prefix[static_cast<size_t>(r.last) + 1] - prefix[static_cast<size_t>(r.first)];
      });
  if (cut) {
    return {true, *cut, fmt::format("memory on {}", OverBudget(balanced, budget)),
            RankTotals(plan, *cut, options, sends_complete)};
  }
  const std::vector<LayerRange> leanest = *MinMaxPartition(
      n, plan.num_ranks(),
      [&](int k, const LayerRange& r) { return static_cast<double>(total(k, r)); });
  result.virtual_stages = leanest;
  result.totals = RankTotals(plan, leanest, options, sends_complete);
  const auto worst = std::max_element(result.totals.begin(), result.totals.end());
  result.bound = fmt::format(
      "no cut into {} stages fits {}: the smallest peak any cut reaches is {} (stage {})",
      plan.num_ranks(), FormatBytes(budget), FormatBytes(*worst), worst - result.totals.begin());
  return result;
}

std::vector<std::pair<std::string, int64_t>> MemoryEntries(const MemoryFigures& figures) {
  std::vector<std::pair<std::string, int64_t>> entries;
  for (MemCategory c : kAllMemCategories) entries.emplace_back(std::string(Name(c)), figures[c]);
  entries.emplace_back("total", figures.total);
  return entries;
}

std::string FormatMemoryTable(const Plan& plan, const std::vector<RankMemory>& predicted) {
  std::string out = fmt::format("{:>5} {:>9}", "stage", "layers");
  for (const auto& [key, bytes] : MemoryEntries(MemoryFigures{}))
    out += fmt::format(" {:>12}", key);
  out += fmt::format(" {:>9}\n", "in flight");
  for (int r = 0; r < plan.num_ranks(); ++r) {
    const std::vector<LayerRange> chunks = plan.ChunkRanges(r);
    std::string layers;
    for (const LayerRange& c : chunks) {
      layers += fmt::format("{}{}-{}", layers.empty() ? "" : ",", c.first, c.last);
    }
    out += fmt::format("{:>5} {:>9}", r, layers);
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

int64_t ParseByteSize(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  const std::string number = text.substr(0, i);
  std::string unit = text.substr(i);
  unit.erase(
      std::remove_if(unit.begin(), unit.end(), [](unsigned char ch) { return std::isspace(ch); }),
      unit.end());
  static const std::map<std::string, double> kUnits = {{"", 1},
                                                       {"B", 1},
                                                       {"KiB", 1024.0},
                                                       {"MiB", 1048576.0},
                                                       {"GiB", 1073741824.0},
                                                       {"TiB", 1099511627776.0},
                                                       {"KB", 1e3},
                                                       {"MB", 1e6},
                                                       {"GB", 1e9},
                                                       {"TB", 1e12},
                                                       {"K", 1024.0},
                                                       {"M", 1048576.0},
                                                       {"G", 1073741824.0},
                                                       {"T", 1099511627776.0}};
  const auto it = kUnits.find(unit);
  double value = 0;
  bool ok = !number.empty() && std::count(number.begin(), number.end(), '.') <= 1 &&
            number != "." && it != kUnits.end();
  if (ok) {
    value = std::stod(number) * it->second;
    ok = std::isfinite(value) && value < 9.2e18;
  }
  if (!ok) BATON_FAIL("'{}' is not a byte size (write e.g. 24GiB, 512MiB, 1.5GB or 4096)", text);
  return static_cast<int64_t>(std::llround(value));
}

std::string FormatBytes(int64_t bytes) {
  static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (std::llabs(bytes) < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (std::fabs(value) >= 1024.0 && unit < 3) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.2f} {}", value, kUnits[unit]);
}

}  // namespace baton
