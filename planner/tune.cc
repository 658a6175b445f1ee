// The tuner's search (see tune.h).
#include "planner/tune.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <thread>

#include "core/error.h"
#include "core/units.h"
#include "model/from_config.h"
#include "planner/memory_planner.h"
#include "planner/partitioner.h"
#include "planner/planner.h"

namespace baton {

const std::vector<TunableSchedule>& TunableSchedules() {
  // Every kind the generators know (scheduler/schedule_kinds.h), those of many chunks with 2;
  // one-chunk kinds first, then the looped ones, then the V ones (ties go to the earlier).
  static const std::vector<TunableSchedule> kSchedules = [] {
    std::vector<TunableSchedule> all;
    for (ChunkRule rule : {ChunkRule::kOne, ChunkRule::kMany, ChunkRule::kV}) {
      for (const ScheduleKindInfo& info : kScheduleKinds) {
        if (info.chunks == rule) {
          all.push_back({std::string(info.name), rule == ChunkRule::kOne ? 1 : 2});
        }
      }
    }
    return all;
  }();
  return kSchedules;
}

namespace {

// The base config (as YAML) with `schedule`: the name goes through the config's own parser, so
// any name parallel.schedule accepts works. Throws baton::Error for one it does not.
Config WithSchedule(const std::string& base_yaml, const TunableSchedule& schedule) {
  return ParseConfigString(
      base_yaml, "tune",
      {"parallel.schedule=" + schedule.name, fmt::format("parallel.chunks={}", schedule.chunks),
       "parallel.schedule_file=\"\"", "parallel.cut=\"\""});
}

double PredictOn(Plan& plan, const MeasuredCosts& measured, const std::vector<LayerRange>& cut) {
  plan.SetCut(cut);
  return PredictMeasuredStep(plan, measured).seconds;
}

// From the measured-balanced cut, moves one boundary by one layer at a time while the predicted
// step gets shorter. Leaves `plan` cut at the result. Share groups keep the balanced cut (moving a
// boundary could split a group).
std::vector<LayerRange> SimulatorCut(Plan& plan, const MeasuredCosts& measured) {
  const std::vector<std::vector<int>> groups = ShareGroups(plan.graph, plan.dims);
  std::vector<LayerRange> cut =
      PartitionKeepingGroups(plan.layer_costs, plan.schedule.num_virtual_stages(), groups);
  double best = PredictOn(plan, measured, cut);
  const bool movable = std::none_of(groups.begin(), groups.end(),
                                    [](const std::vector<int>& g) { return g.size() > 1; });
  for (int round = 0; movable && round < 4 * static_cast<int>(plan.graph.size()); ++round) {
    bool improved = false;
    for (size_t b = 0; b + 1 < cut.size(); ++b) {
      for (int step : {-1, 1}) {
        std::vector<LayerRange> moved = cut;
        moved[b].last += step;
        moved[b + 1].first += step;
        if (moved[b].size() < 1 || moved[b + 1].size() < 1) continue;
        const double seconds = PredictOn(plan, measured, moved);
        if (seconds < best * (1 - 1e-9)) {
          best = seconds;
          cut = std::move(moved);
          improved = true;
        }
      }
    }
    if (!improved) break;
  }
  plan.SetCut(cut);
  return cut;
}

struct Searched {
  TuneCandidate candidate;
  Plan plan;
};

// Fills the candidate's memory figures: the budgeted cut when there is a budget (re-predicting
// the step when the budget moved layers), else every stage's predicted peak.
void CheckMemory(Searched& s, const MeasuredCosts& measured, int64_t budget) {
  TuneCandidate& c = s.candidate;
  c.memory_checked = true;
  c.peaks.clear();
  if (budget <= 0) {
    const std::vector<RankMemory> ranks = PredictMemory(s.plan);
    const ParallelLayout layout = s.plan.layout();
    for (int stage = 0; stage < s.plan.num_stages(); ++stage) {
      const int rank = layout.WorldRank({.stage = stage, .replica = 0, .tensor = 0});
      c.peaks.push_back(ranks[static_cast<size_t>(rank)].peak.total);
    }
    c.fits = true;
    c.note = "no budget";
    return;
  }
  const BudgetedPartition cut = PartitionWithinBudget(s.plan, budget);
  c.fits = cut.fits;
  c.peaks = cut.totals;
  c.note = cut.bound;
  if (cut.fits && cut.virtual_stages != c.cut) {
    c.cut = cut.virtual_stages;
    s.plan.SetCut(c.cut);
    c.prediction = PredictMeasuredStep(s.plan, measured);
  }
}

std::string Describe(const TuneCandidate& c) {
  return fmt::format("{}{} on {} stages{}{}, {} micro-batches, checkpoint {}", c.schedule,
                     c.chunks > 1 ? fmt::format(" (v={})", c.chunks) : "", c.stages,
                     c.tensor > 1 ? fmt::format(" x {} tensor ranks", c.tensor) : "",
                     c.replicas > 1 ? fmt::format(" x {} replicas", c.replicas) : "",
                     c.micro_batches, c.checkpoint.ToString());
}

std::string CutText(const std::vector<LayerRange>& cut) {
  std::vector<std::pair<int, int>> ranges;
  for (const LayerRange& r : cut) ranges.emplace_back(r.first, r.last);
  return FormatCut(ranges);
}

}  // namespace

int DefaultMaxProcesses(const Config& config) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / config.device.threads);
}

std::vector<int64_t> TuneMicroBatchSizes(const Config& config) {
  std::vector<int64_t> sizes;
  for (int m : MicroBatchCounts(config, 1)) sizes.push_back(config.train.batch_size / m);
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

TuneResult Tune(const Config& config, const MeasuredCosts& measured, const TuneOptions& options) {
  const int num_layers = static_cast<int>(GraphOf(config.model).size());
  const int max_processes = options.max_processes > 0
                                ? options.max_processes
                                : std::max(DefaultMaxProcesses(config), options.max_stages);
  const int max_stages =
      std::min(options.max_stages > 0 ? options.max_stages : max_processes, num_layers);
  BATON_CHECK(options.budget >= 0, "--memory-budget must not be negative");
  BATON_CHECK(max_stages >= 1, "--max-stages must be at least 1, got {}", options.max_stages);
  const std::vector<TunableSchedule>& schedules =
      options.schedules.empty() ? TunableSchedules() : options.schedules;
  const std::string base_yaml = ToYaml(config);

  TuneResult result;
  std::vector<Searched> all;
  for (const TunableSchedule& schedule : schedules) {
    Config scheduled;
    try {
      scheduled = WithSchedule(base_yaml, schedule);
    } catch (const Error&) {
      ++result.invalid;  // a name this build's config does not know
      continue;
    }
    for (int p = 1; p <= max_stages && p <= max_processes; ++p) {
      if (p * schedule.chunks > num_layers) break;
      const int chunk_layers = (num_layers + p * schedule.chunks - 1) / (p * schedule.chunks);
      for (int t : TensorCounts(config, 1, p, max_processes)) {
        for (int r = 1; p * t * r <= max_processes; ++r) {
          for (int m : MicroBatchCounts(config, 1)) {
            if (m % r != 0) continue;
            for (const CheckpointPolicy& policy :
                 CheckpointPolicies(chunk_layers, CheckpointPolicy::None())) {
              Searched s;
              TuneCandidate& c = s.candidate;
              static_cast<Levers&>(c) = {config.precision.dtype, policy, m, p, r,
                                         config.optimizer.state, t};
              try {
                s.plan = MakePlan(Apply(scheduled, c));
              } catch (const Error&) {
                ++result.invalid;
                continue;
              }
              s.plan.layer_costs = MeasuredLayerCosts(s.plan, measured);
              c.schedule = schedule.name;
              c.chunks = schedule.chunks;
              c.cut = SimulatorCut(s.plan, measured);
              c.prediction = PredictMeasuredStep(s.plan, measured);
              all.push_back(std::move(s));
            }
          }
        }
      }
    }
  }
  result.searched = static_cast<int>(all.size());
  BATON_CHECK(!all.empty(), "baton tune: no combination could be planned ({} tried)",
              result.invalid);

  // Memory, in order of unbudgeted predicted time, until the top fits are settled.
  std::vector<size_t> order(all.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return all[a].candidate.prediction.seconds < all[b].candidate.prediction.seconds;
  });
  std::vector<double> fitting;  // predicted seconds of the fitting ones, ascending
  const size_t top = static_cast<size_t>(std::max(1, options.top));
  for (size_t i : order) {
    if (fitting.size() >= top && all[i].candidate.prediction.seconds >= fitting[top - 1]) break;
    CheckMemory(all[i], measured, options.budget);
    ++result.checked;
    if (all[i].candidate.fits) {
      fitting.insert(
          std::upper_bound(fitting.begin(), fitting.end(), all[i].candidate.prediction.seconds),
          all[i].candidate.prediction.seconds);
    }
  }
  for (Searched& s : all) {
    if (!s.candidate.memory_checked) continue;
    s.candidate.config = s.plan.config;
    s.candidate.config.parallel.cut = CutText(s.candidate.cut);
    result.ranked.push_back(std::move(s.candidate));
  }
  std::stable_sort(result.ranked.begin(), result.ranked.end(),
                   [](const TuneCandidate& a, const TuneCandidate& b) {
                     if (a.fits != b.fits) return a.fits;
                     return a.prediction.seconds < b.prediction.seconds;
                   });
  if (!result.ranked.front().fits) {
    const TuneCandidate* leanest = nullptr;
    int64_t smallest = std::numeric_limits<int64_t>::max();
    for (const TuneCandidate& c : result.ranked) {
      const int64_t peak = *std::max_element(c.peaks.begin(), c.peaks.end());
      if (peak < smallest) {
        smallest = peak;
        leanest = &c;
      }
    }
    BATON_FAIL(
        "baton tune: nothing fits the memory budget {}: the smallest peak any of the {} "
        "candidates reaches is {} ({}); raise --memory-budget, --max-stages or --max-processes",
        FormatBytes(options.budget), result.searched, FormatBytes(smallest), Describe(*leanest));
  }
  Validate(result.ranked.front().config);
  result.set_flags = SetFlags(result.ranked.front().config, config);
  return result;
}

std::string FormatTuneTable(const TuneResult& result, int64_t budget, int top) {
  std::string out =
      fmt::format("{:>4} {:<15} {:>6} {:>6} {:>8} {:>5} {:<10} {:>9} {:>8}  {:<24} {}\n", "rank",
                  "schedule", "stages", "tensor", "replicas", "mbs", "checkpoint", "step ms",
                  "bubble %", "peak MiB per stage", "fits");
  int rank = 0;
  for (const TuneCandidate& c : result.ranked) {
    if (rank >= top) break;
    ++rank;
    std::string peaks;
    for (int64_t peak : c.peaks) {
      peaks += fmt::format("{}{:.1f}", peaks.empty() ? "" : " ",
                           static_cast<double>(peak) / (1024.0 * 1024.0));
    }
    const std::string schedule =
        c.chunks > 1 ? fmt::format("{} v={}", c.schedule, c.chunks) : c.schedule;
    out += fmt::format("{:>4} {:<15} {:>6} {:>6} {:>8} {:>5} {:<10} {:>9.1f} {:>8.1f}  {:<24} {}\n",
                       rank, schedule, c.stages, c.tensor, c.replicas, c.micro_batches,
                       c.checkpoint.ToString(), 1e3 * c.prediction.seconds,
                       100 * c.prediction.bubble, peaks, c.fits ? "yes" : "no");
  }
  out +=
      fmt::format("searched {} candidates ({} more could not be planned); memory predicted for {}",
                  result.searched, result.invalid, result.checked);
  if (result.checked < result.searched) {
    out += fmt::format(" (the others are predicted slower than the {} fastest that fit)", top);
  }
  if (budget > 0) out += fmt::format("; budget {} per process", FormatBytes(budget));
  out += "\n";
  const TuneCandidate& best = result.ranked.front();
  out += fmt::format(
      "best: {} {} cut {}: predicted {:.1f} ms per step = simulated schedule {:.1f} + step end "
      "{:.1f} + collectives {:.1f}\n",
      best.schedule,
      fmt::format("p={} t={} r={} m={} checkpoint {}", best.stages, best.tensor, best.replicas,
                  best.micro_batches, best.checkpoint.ToString()),
      best.config.parallel.cut, 1e3 * best.prediction.seconds, 1e3 * best.prediction.makespan,
      1e3 * best.prediction.step_end, 1e3 * best.prediction.collectives);
  out +=
      fmt::format("apply with: {}\n", result.set_flags.empty() ? "(no change)" : result.set_flags);
  return out;
}

}  // namespace baton
