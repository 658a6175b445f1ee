// Fit to a budget (see fit.h).
#include "planner/fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/error.h"
#include "core/units.h"
#include "kernels/backend.h"
#include "model/cost.h"
#include "model/from_config.h"
#include "planner/candidates.h"
#include "planner/memory_planner.h"
#include "planner/planner.h"
#include "planner/step_time.h"

namespace baton {
namespace {

// Every candidate, in search order: the configured tensor ranks and replicas first, fewer stages,
// micro-batches, optimizer state, checkpointing and precision changes before more.
std::vector<Levers> Search(const Config& config, int max_stages, int num_layers,
                           int max_processes) {
  std::vector<DType> dtypes = {config.precision.dtype};
  if (config.precision.dtype == DType::kF32) dtypes.push_back(DType::kBF16);
  const std::vector<int> micro_batches = MicroBatchCounts(config, config.train.micro_batches);
  std::vector<OptimizerState> states = {config.optimizer.state};
  if (config.optimizer.state == OptimizerState::kF32) states.push_back(OptimizerState::kInt8);
  std::vector<Levers> levers;
  const int configured = config.parallel.replicas;
  const int configured_tensor = config.parallel.tensor;
  const int experts = config.parallel.experts;
  for (int t : TensorCounts(config, configured_tensor, config.parallel.stages, max_processes)) {
    for (int r = configured; r == configured || r * t * config.parallel.stages <= max_processes;
         ++r) {
      for (int p = config.parallel.stages; p <= max_stages; ++p) {
        if ((r != configured || t != configured_tensor) && p * t * r > max_processes) break;
        const int stage_layers = (num_layers + p - 1) / p;
        for (int m : micro_batches) {
          if (m % r != 0) continue;
          for (OptimizerState state : states) {
            for (const CheckpointPolicy& policy :
                 CheckpointPolicies(stage_layers, config.parallel.checkpoint)) {
              for (DType dtype : dtypes) {
                levers.push_back({dtype, policy, m, p, r, state, t, 1, experts});
                // Replicas added: ZeRO-2 and ZeRO-3 too, a level above each (Apply drops them
                // where ZeRO does not apply, and such twins are left out).
                if (r != configured && r > 1 && experts == 1) {
                  levers.push_back({dtype, policy, m, p, r, state, t, 2, 1});
                  levers.push_back({dtype, policy, m, p, r, state, t, 3, 1});
                }
                // A mixture of experts: its experts split over the replicas instead (the
                // configured ones too, at no added process), each tensor rank's fold.
                for (int e : ExpertCounts(config, r, t)) {
                  if (e != experts) {
                    levers.push_back({dtype, policy, m, p, r, state, t, 0, e});
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return levers;
}

int LevelOf(const Levers& lever, const Config& config) {
  if (lever.experts != config.parallel.experts) return 7;  // the replicas' own lever, as ZeRO-1
  if (lever.replicas != config.parallel.replicas) return 7 + std::max(0, lever.zero - 1);
  if (lever.tensor != config.parallel.tensor) return 6;
  if (lever.stages != config.parallel.stages) return 5;
  if (lever.state != config.optimizer.state) return 4;
  if (lever.micro_batches != config.train.micro_batches) return 3;
  if (!(lever.checkpoint == config.parallel.checkpoint)) return 2;
  if (lever.dtype != config.precision.dtype) return 1;
  return 0;
}

}  // namespace

int64_t ReplicaBytesPerStep(const Plan& plan) {
  const int replicas = plan.layout().replicas();
  if (replicas < 2) return 0;
  const ParallelConfig& parallel = plan.config.parallel;
  const double share = static_cast<double>(replicas - 1) / replicas;
  const double grad_bytes = 4.0;  // f32 gradients
  const double value_bytes = static_cast<double>(SizeOf(plan.config.precision.dtype));
  double worst = 0;
  for (int s = 0; s < plan.num_stages(); ++s) {
    int64_t numel = 0;
    for (const LayerRange& range : plan.ChunkRanges(s)) {
      numel += StoredParamCount(plan.graph, range.first, range.last, plan.dims);
    }
    double n = static_cast<double>(numel) / plan.layout().tensor();
    double bytes = 0;
    if (parallel.experts > 1) {
      // The stacked experts (whole): summed by the expert sums pass, not the all-reduce; a
      // member's E sources of its X / E go to each of the other D - 1 holding them. Under ZeRO
      // each then sends its run (1 / D) of its updated X / E to them (once a step at every level:
      // ZeRO-3 leaves the experts resident).
      double experts = 0;
      for (const LayerRange& range : plan.ChunkRanges(s)) {
        for (int i = range.first; i <= range.last; ++i) {
          experts +=
              static_cast<double>(ExpertParamCount(plan.graph[static_cast<size_t>(i)], plan.dims));
        }
      }
      experts /= plan.layout().tensor();  // each tensor rank's fold
      n -= experts;
      const double holders = static_cast<double>(replicas) / parallel.experts;  // D
      bytes = (holders - 1) * experts * grad_bytes;
      if (parallel.zero >= 1) {
        bytes += (holders - 1) / holders * experts / parallel.experts * value_bytes;
      }
    }
    if (parallel.zero == 0) {
      bytes += 2 * share * n * grad_bytes;  // the all-reduce: a reduce-scatter and an all-gather
    } else if (parallel.zero < 3 || parallel.zero3_keep == Zero3Keep::kStep) {
      bytes += share * n * (grad_bytes + value_bytes);  // the values gathered once a step
    } else {
      // Each micro-batch gathers every layer for its forward and backward, and again for a
      // checkpointed recompute and a split-off W.
      const std::vector<Action>& program = plan.schedule.per_stage[static_cast<size_t>(s)];
      const bool split = std::any_of(program.begin(), program.end(), [](const Action& a) {
        return a.kind == ActionKind::kBackwardWeight;
      });
      const bool recompute = parallel.checkpoint.kind == CheckpointPolicy::Kind::kEvery;
      const int uses =
          MicroBatchesPerReplica(plan.config) * (2 + (recompute ? 1 : 0) + (split ? 1 : 0));
      bytes += share * n * (grad_bytes + uses * value_bytes);
    }
    worst = std::max(worst, bytes);
  }
  return static_cast<int64_t>(worst);
}

namespace {

FitCandidate Evaluate(const Config& base, const Levers& lever, const FitOptions& options) {
  FitCandidate c;
  static_cast<Levers&>(c) = lever;
  c.level = LevelOf(lever, base);
  Plan plan;
  try {
    plan = MakePlan(Apply(base, lever));
  } catch (const Error& e) {
    c.note = e.what();
    return c;
  }
  c.valid = true;
  const BudgetedPartition cut = PartitionWithinBudget(plan, options.budget);
  if (cut.fits) plan.SetCut(cut.virtual_stages);  // else time the balanced cut
  c.fits = cut.fits;
  c.peak = *std::max_element(cut.totals.begin(), cut.totals.end());
  c.step_seconds = options.measured != nullptr
                       ? PredictMeasuredStep(plan, *options.measured).seconds
                       : PredictStepSeconds(plan, options.rates);
  c.note = cut.bound;
  c.replica_bytes = ReplicaBytesPerStep(plan);
  return c;
}

}  // namespace

namespace {

// When nothing fits: the structural changes (they change the model, so --fit never applies
// them) that would, each on top of the leanest candidate's levers: the smallest share group
// (model.share.group, all sublayers shared) and the largest low rank (model.low_rank) of C/2,
// C/4, C/8 whose predicted peak fits. Lines "  --set ... fits at X per stage (with ...)".
std::string StructuralSuggestions(const Config& config, const FitCandidate& leanest,
                                  const FitOptions& options) {
  const Levers& lever = leanest;
  std::vector<std::pair<std::string, Config>> tries;
  const ModelConfig& m = config.model;
  const bool structured = m.share_group > 1 || m.low_rank_attn > 0 || m.low_rank_mlp > 0;
  if (m.preset != ModelPreset::kCustom && !structured) {
    std::vector<int> groups;
    for (int g = 2; g < m.num_layers; g *= 2) groups.push_back(g);
    groups.push_back(m.num_layers);
    for (int g : groups) {
      if (g < 2) continue;
      Config c = config;
      c.model.share_group = g;
      c.model.share_what = ShareWhat::kAll;
      tries.emplace_back(fmt::format("--set model.share.group={}", g), std::move(c));
    }
  }
  if (!structured) {
    for (int64_t divisor : {2, 4, 8}) {
      const int64_t r = m.width / divisor;
      if (r < 1) continue;
      Config c = config;
      const bool attention = m.preset == ModelPreset::kGpt || LlamaLike(m.preset);
      if (attention) c.model.low_rank_attn = r;
      c.model.low_rank_mlp = r;
      tries.emplace_back(
          attention ? fmt::format("--set model.low_rank.attn={} --set model.low_rank.mlp={}", r, r)
                    : fmt::format("--set model.low_rank.mlp={}", r),
          std::move(c));
    }
  }
  std::string lines;
  bool share_found = false, low_rank_found = false;
  for (const auto& [flags, structural] : tries) {
    const bool share = flags.find("share") != std::string::npos;
    if ((share && share_found) || (!share && low_rank_found)) continue;
    const FitCandidate c = Evaluate(structural, lever, options);
    if (!c.fits) continue;
    (share ? share_found : low_rank_found) = true;
    const std::string levers = SetFlags(Apply(structural, lever), structural);
    lines += fmt::format("\n  {} fits at {} per stage{}", flags, FormatBytes(c.peak),
                         levers.empty() ? "" : fmt::format(" (with {})", levers));
  }
  if (lines.empty()) return "";
  return "; structural changes that would fit (they change the model, so --fit does not apply "
         "them; docs/memory.md):" +
         lines;
}

}  // namespace

FitResult FitToBudget(const Config& config, const FitOptions& options) {
  BATON_CHECK(options.budget > 0, "--fit needs a positive --memory-budget");
  const int num_layers = static_cast<int>(GraphOf(config.model).size());
  const int max_stages = options.max_stages > 0 ? options.max_stages
                                                : std::min(2 * config.parallel.stages, num_layers);
  FitResult result;
  for (const Levers& lever : Search(config, max_stages, num_layers, options.max_processes)) {
    result.candidates.push_back(Evaluate(config, lever, options));
  }
  std::vector<FitCandidate>& all = result.candidates;
  // Tiers of levels: as configured; precision and checkpointing, by time; micro-batches; 8-bit
  // optimizer state; stages; tensor ranks; replicas with ZeRO-1; with ZeRO-2; with ZeRO-3.
  const auto tier = [](int level) { return level == 0 ? 0 : level <= 2 ? 1 : level - 1; };
  for (int t = 0; t <= 8 && result.chosen < 0; ++t) {
    for (size_t i = 0; i < all.size(); ++i) {
      if (!all[i].fits || tier(all[i].level) != t) continue;
      if (result.chosen < 0) {
        result.chosen = static_cast<int>(i);
        continue;
      }
      const FitCandidate& best = all[static_cast<size_t>(result.chosen)];
      // Tensor ranks: the fewest that fit (the step-time model does not cost their sums over
      // the group, every layer and micro-batch), then the fastest.
      if (all[i].tensor != best.tensor) {
        if (all[i].tensor < best.tensor) result.chosen = static_cast<int>(i);
        continue;
      }
      // Within 1% is a tie: the fewer changes win (search order puts them first).
      const bool faster =
          all[i].step_seconds < best.step_seconds * 0.99 ||
          (all[i].step_seconds <= best.step_seconds * 1.01 && all[i].level < best.level);
      if (faster) result.chosen = static_cast<int>(i);
    }
  }
  if (result.chosen < 0) {
    const FitCandidate* leanest = nullptr;
    for (const FitCandidate& c : all) {
      if (c.valid && (leanest == nullptr || c.peak < leanest->peak)) leanest = &c;
    }
    BATON_CHECK(leanest != nullptr, "--fit: no candidate configuration could be planned");
    BATON_FAIL(
        "no configuration fits the memory budget of {}: the smallest peak reachable is {} ({} "
        "stages{}{}, {} micro-batches, {}, checkpoint {}, {} optimizer state); raise the budget or "
        "allow more stages (--max-stages){}{}",
        FormatBytes(options.budget), FormatBytes(leanest->peak), leanest->stages,
        leanest->tensor > 1 ? fmt::format(" x {} tensor ranks", leanest->tensor) : "",
        leanest->replicas > 1 ? fmt::format(" x {} replicas", leanest->replicas) : "",
        leanest->micro_batches, PrecisionName(leanest->dtype), leanest->checkpoint.ToString(),
        Name(leanest->state),
        options.max_processes > 0
            ? " or processes (--max-processes)"
            : " or tensor ranks and data-parallel replicas with ZeRO-1 (--max-processes)",
        StructuralSuggestions(config, *leanest, options));
  }
  const FitCandidate& chosen = all[static_cast<size_t>(result.chosen)];
  result.config = Apply(config, chosen);
  result.set_flags = SetFlags(result.config, config);
  return result;
}

Plan PlanForBudget(const Config& config, int64_t budget, bool fit, int max_stages,
                   const StepRates& rates, FitResult* search, int max_processes,
                   const MeasuredCosts* measured) {
  if (!fit) return MakePlan(config, budget);
  FitResult result = FitToBudget(config, {budget, rates, max_stages, max_processes, measured});
  Plan plan = MakePlan(result.config, budget);
  if (search != nullptr) *search = std::move(result);
  return plan;
}

ProfileRequest FitProfileRequest(const Config& config) {
  ProfileRequest request;
  request.dtypes = {config.precision.dtype};
  if (config.precision.dtype == DType::kF32) request.dtypes.push_back(DType::kBF16);
  for (int m = config.train.micro_batches; m <= config.train.batch_size; ++m) {
    if (config.train.batch_size % m == 0)
      request.micro_batch_sizes.push_back(config.train.batch_size / m);
  }
  request.states = {config.optimizer.state};
  if (config.optimizer.state == OptimizerState::kF32)
    request.states.push_back(OptimizerState::kInt8);
  request.repeats = 5;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int p = 2; p <= cores / config.device.threads; ++p) request.concurrency.push_back(p);
  return request;
}

namespace {

// FLOP/s of the CPU backend's Matmul on (n, n) x (n, n) tensors, f32 and bf16, each the best of
// `repeats` calls after a warm-up; the two are timed alternately so that a clock or load change
// during the measurement affects both alike.
StepRates MeasureCpuRates(int threads, int64_t n, int repeats) {
  MemoryLedger ledger;
  std::unique_ptr<Backend> backend = MakeCpuBackend(ledger, threads);
  struct Operands {
    Tensor a, b, out;
  };
  const auto make = [&](DType dtype) {
    Operands o;
    for (Tensor* t : {&o.a, &o.b, &o.out}) {
      *t = Tensor::Empty(backend->allocator(), {n, n}, dtype, MemCategory::kWorkspace);
      backend->Zero(*t);
    }
    return o;
  };
  Operands f32 = make(DType::kF32), bf16 = make(DType::kBF16);
  const auto time = [&](Operands& o) {
    const auto start = Clock::now();
    backend->Matmul(o.a, false, o.b, false, o.out, false);
    const double seconds = Seconds(Clock::now() - start);
    return 2.0 * static_cast<double>(n * n * n) / seconds;
  };
  StepRates best(0.0);
  for (int r = 0; r <= repeats; ++r) {
    const double f = time(f32), h = time(bf16);
    if (r == 0) continue;  // warm-up
    best.f32 = std::max(best.f32, f);
    best.half = std::max(best.half, h);
  }
  return best;
}

}  // namespace

StepRates MeasureStepRates(const Config& config) {
  if (config.device.type != DeviceType::kCpu) return {60e12, 800e12};
  return MeasureCpuRates(config.device.threads, 512, 7);
}

namespace {

// A candidate of the replicas' level that splits each MoE layer's experts over them (Search
// gives those zero 0).
bool SplitsExperts(const FitCandidate& c) { return c.level == 7 && c.zero == 0; }

}  // namespace

std::string FormatFitTable(const FitResult& result, int64_t budget) {
  static const char* kLevels[] = {"as configured", "precision", "checkpointing", "micro-batches",
                                  "8-bit state",   "stages",    "tensor ranks",  "replicas",
                                  "ZeRO-2",        "ZeRO-3"};
  static const char* kWhy[] = {
      "the configuration as it is fits",
      "the fastest predicted step among precision and checkpointing",
      "the fastest predicted step among precision and checkpointing",
      "nothing fits without more micro-batches",
      "nothing fits without 8-bit optimizer state, which costs no device (AdamW's moments "
      "quantized: a small change to the updates)",
      "nothing fits without more stages, even with 8-bit optimizer state",
      "no pipeline of up to --max-stages stages fits (a layer alone, or too many layers per "
      "stage, is too large for a rank): the fewest tensor ranks that fit split every layer",
      "nothing fits without data-parallel replicas (ZeRO-1)",
      "nothing fits with ZeRO-1's replicas: ZeRO-2 also lets each layer's gradients outside the "
      "replica's shard go once its backward is done",
      "nothing fits with ZeRO-2's replicas: ZeRO-3 also holds each layer's parameters outside "
      "the replica's shard only while the layer runs (gathered for each use)"};
  const auto level_name = [](const FitCandidate& c) {
    return SplitsExperts(c) ? "expert groups" : kLevels[c.level];
  };
  const bool replicas = std::any_of(result.candidates.begin(), result.candidates.end(),
                                    [](const FitCandidate& c) { return c.replicas > 1; });
  const bool tensor = std::any_of(result.candidates.begin(), result.candidates.end(),
                                  [](const FitCandidate& c) { return c.tensor > 1; });
  const bool experts = std::any_of(result.candidates.begin(), result.candidates.end(),
                                   [](const FitCandidate& c) { return c.experts > 1; });
  const auto stages_of = [&](const FitCandidate& c) {
    std::string s = std::to_string(c.stages);
    if (tensor) s += fmt::format("x{}", c.tensor);
    if (replicas) s += fmt::format("x{}", c.replicas);
    if (experts) s += fmt::format("/{}", c.experts);
    return s;
  };
  const std::string header =
      std::string("P") + (tensor ? "xT" : "") + (replicas ? "xR" : "") + (experts ? "/E" : "");
  std::string out = fmt::format("{:>1} {:>6} {:>5} {:>11} {:>7} {:>5} {:>13} {:>12} {:>4}  {}\n",
                                "", header == "P" ? "stages" : header, "mbs", "checkpoint", "dtype",
                                "state", "peak", "step (s)", "fits", "lever / bound");
  for (size_t i = 0; i < result.candidates.size(); ++i) {
    const FitCandidate& c = result.candidates[i];
    const bool chosen = static_cast<int>(i) == result.chosen;
    if (!c.valid) {
      out += fmt::format("  {:>6} {:>5} {:>11} {:>7} {:>5} {:>13} {:>12} {:>4}  {}\n", stages_of(c),
                         c.micro_batches, c.checkpoint.ToString(), PrecisionName(c.dtype),
                         Name(c.state), "-", "-", "-", c.note);
      continue;
    }
    const std::string moves = c.replica_bytes > 0 ? fmt::format(" ({}/step to its replicas)",
                                                                FormatBytes(c.replica_bytes))
                                                  : "";
    out += fmt::format("{:>1} {:>6} {:>5} {:>11} {:>7} {:>5} {:>13} {:>12.4f} {:>4}  {}{}: {}\n",
                       chosen ? "*" : "", stages_of(c), c.micro_batches, c.checkpoint.ToString(),
                       PrecisionName(c.dtype), Name(c.state), FormatBytes(c.peak), c.step_seconds,
                       c.fits ? "yes" : "no", level_name(c), moves, c.note);
  }
  if (result.chosen >= 0) {
    const FitCandidate& c = result.candidates[static_cast<size_t>(result.chosen)];
    out += fmt::format(
        "chosen: {} stages{}{}{}, {} micro-batches, checkpoint {}, {}, {} optimizer state: peak "
        "{} within {}, predicted {:.4f} s/step ({})\n",
        c.stages, c.tensor > 1 ? fmt::format(" x {} tensor ranks", c.tensor) : "",
        c.replicas > 1 ? fmt::format(" x {} replicas", c.replicas) : "",
        c.experts > 1 ? fmt::format(", each MoE layer's experts split {} ways", c.experts) : "",
        c.micro_batches, c.checkpoint.ToString(), PrecisionName(c.dtype), Name(c.state),
        FormatBytes(c.peak), FormatBytes(budget), c.step_seconds,
        SplitsExperts(c)
            ? "nothing fits without splitting each MoE layer's experts over the replicas "
              "(parallel.experts: each holds 1/E of them and their optimizer state)"
            : kWhy[c.level]);
    out += fmt::format("apply with: {}\n",
                       result.set_flags.empty() ? "(no change)" : result.set_flags);
  }
  return out;
}

}  // namespace baton
