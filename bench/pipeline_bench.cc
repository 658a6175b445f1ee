// pipeline_bench: 1 stage vs P stages (default 2) of real processes under several schedules side
// by side, `baton run` with m micro-batches (default 8) and one thread per process, on
// gpt-small-cpu. For each schedule: tokens/s and its ratio to the 1-stage run; the measured
// bubble and the simulator's, the simulator fed the run's own costs read off its trace.json; and
// per stage where the step's time went, measured against simulated. Every figure is defined in
// bench/README.md ("pipeline_bench").
//
// Checks before printing: every loss finite, the first near ln(vocab), and every P-stage run
// bit-identical to the 1-stage run (every step's loss and the param_checksum: DESIGN.md's first
// invariant). A failed check exits 1.
//
//   pipeline_bench [--schedules gpipe,1f1b,zb-h1] [--stages 2] [--microbatches 8] [--steps 8]
//                  [--repeats 1] [--keep] [--set section.key=value ...] [--baton PATH]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/trace_costs.h"
#include "config/config.h"
#include "core/error.h"
#include "core/temp_dir.h"
#include "planner/planner.h"

namespace baton::bench {
namespace {

struct Options {
  std::string baton = BATON_BINARY;
  std::string config = BATON_SOURCE_DIR "/configs/gpt-small-cpu.yaml";
  std::string schedules;  // NAME[:CHUNKS],...; empty: every candidate `baton run` accepts
  int stages = 2;
  int microbatches = 8;
  int64_t steps = 8;
  int repeats = 1;
  bool keep = false;
  std::vector<std::string> sets;  // more --set overrides for every run
};

// A schedule to run: its name and chunks per stage.
struct Candidate {
  std::string name;
  int chunks = 1;
};

// The default list: those `baton run` accepts of these (V-shapes hold 2 chunks per stage).
const std::vector<Candidate> kCandidates = {{"gpipe", 1},          {"1f1b", 1}, {"zb-h1", 1},
                                            {"interleaved-zb", 2}, {"zb-v", 2}, {"dualpipev", 2}};

// The first measured step: step 1 pays for first touches (bench/README.md, tokens/s).
constexpr int64_t kFirstMeasuredStep = 2;

struct Run {
  Candidate schedule;
  int stages = 1;
  std::vector<std::string> overrides;
  Schedule program;  // the plan's schedule, with communication: what the workers ran
  CommSemantics semantics = CommSemantics::kAsync;  // rendezvous when sends complete first
  ReportFigures figures;
  Throughput throughput;
  std::vector<StepParts> measured;
  DerivedCosts costs;
  SimulatedStep simulated;
  double replayed = 0;       // ReplayedBubble: every measured action at its own duration
  double report_bubble = 0;  // mean of the report's per-stage bubble_fraction (every step)
};

std::vector<std::string> OverridesFor(const Options& options, const Candidate& schedule,
                                      int stages) {
  std::vector<std::string> overrides = {fmt::format("parallel.stages={}", stages),
                                        fmt::format("parallel.schedule={}", schedule.name),
                                        fmt::format("parallel.chunks={}", schedule.chunks),
                                        "parallel.checkpoint=none",
                                        "precision.dtype=fp32",
                                        "device.threads=1",
                                        fmt::format("train.micro_batches={}", options.microbatches),
                                        fmt::format("train.steps={}", options.steps)};
  overrides.insert(overrides.end(), options.sets.begin(), options.sets.end());
  return overrides;
}

// The plan for these overrides; throws (baton::Error) when `baton run` would refuse.
Plan PlanFor(const Options& options, const std::vector<std::string>& overrides) {
  return MakePlan(LoadConfig(options.config, overrides));
}

Run RunSchedule(const Options& options, const Config& config, const Candidate& schedule, int stages,
                int repeat, const std::string& work_dir) {
  Run run;
  run.schedule = schedule;
  run.stages = stages;
  run.overrides = OverridesFor(options, schedule, stages);
  const Plan plan = PlanFor(options, run.overrides);
  run.program = plan.schedule;
  run.semantics =
      plan.sends_complete_before_compute ? CommSemantics::kRendezvous : CommSemantics::kAsync;
  const std::string name = fmt::format("{}_p{}_run{}", schedule.name, stages, repeat);
  const nlohmann::json report =
      RunBaton(options.baton, options.config, run.overrides, work_dir, name);
  run.figures = ReadReport(report);
  BATON_CHECK(static_cast<int>(run.figures.stages.size()) == stages, "{} stages reported, not {}",
              run.figures.stages.size(), stages);
  run.throughput = MeasureThroughput(TokensPerStep(config), run.figures.step_seconds);
  for (const StageFigures& s : run.figures.stages) run.report_bubble += s.bubble_fraction / stages;

  const std::string trace_path = (std::filesystem::path(work_dir) / name / "trace.json").string();
  std::ifstream in(trace_path);
  BATON_CHECK(in.good(), "{} wrote no trace {}", name, trace_path);
  const PipelineTrace trace =
      ReadChromeTrace(nlohmann::json::parse(in), stages, run.program.layout);
  run.measured = MeasureBreakdown(trace, kFirstMeasuredStep);
  run.costs = DeriveCosts(trace, run.program, kFirstMeasuredStep);
  run.simulated = SimulateStep(run.program, run.costs, run.semantics);
  run.replayed = ReplayedBubble(
      run.program, StepCosts(trace, run.program, kFirstMeasuredStep, run.costs), run.semantics);
  return run;
}

void CheckSame(const Run& reference, const Run& run, int64_t vocab_size) {
  const std::string what = fmt::format("{} at {} stage(s)", run.schedule.name, run.stages);
  CheckLossesSane(run.figures.losses, vocab_size, what);
  CheckIdentical(reference.figures.losses, run.figures.losses, fmt::format("1 stage vs {}", what));
  BATON_CHECK(reference.figures.param_checksum == run.figures.param_checksum,
              "param_checksum {} at 1 stage vs {} for {}", reference.figures.param_checksum,
              run.figures.param_checksum, what);
}

std::vector<Candidate> ParseSchedules(const std::string& text) {
  std::vector<Candidate> list;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, comma - begin);
    begin = comma + 1;
    if (item.empty()) continue;
    Candidate c{item, 1};
    for (const Candidate& known : kCandidates) {
      if (known.name == item) c.chunks = known.chunks;
    }
    if (const size_t colon = item.find(':'); colon != std::string::npos) {
      c.name = item.substr(0, colon);
      c.chunks = std::stoi(item.substr(colon + 1));
    }
    list.push_back(c);
  }
  BATON_CHECK(!list.empty(), "--schedules names no schedule");
  return list;
}

// The default list: the candidates whose plan can be made (the others are not there yet).
std::vector<Candidate> AcceptedCandidates(const Options& options) {
  std::vector<Candidate> accepted;
  for (const Candidate& c : kCandidates) {
    try {
      PlanFor(options, OverridesFor(options, c, options.stages));
      accepted.push_back(c);
    } catch (const std::exception& e) {
      std::string why = e.what();
      why = why.substr(0, why.find('\n'));
      std::cout << fmt::format("  {} (chunks {}) left out: {}\n", c.name, c.chunks, why);
    }
  }
  BATON_CHECK(!accepted.empty(), "no schedule can be planned");
  return accepted;
}

std::string Ms(double ms) { return fmt::format("{:.1f}", ms); }
std::string Percent(double fraction) { return fmt::format("{:.1f}%", 100 * fraction); }

// The stages' F/B/I/W time per measured step.
double ComputePerStep(const Run& run) {
  double sum = 0;
  for (const StepParts& p : run.measured) sum += p.compute;
  return sum;
}

void PrintSummary(const Run& single, const std::vector<Run>& runs) {
  Table table({"schedule", "stages", "steps", "tokens/s", "x 1 stage", "compute x",
               "measured bubble", "simulated bubble", "difference", "replayed", "vs replayed",
               "async sends", "report bubble"});
  const double m = static_cast<double>(single.program.microbatches);
  std::vector<const Run*> all = {&single};
  for (const Run& r : runs) all.push_back(&r);
  for (const Run* run : all) {
    const double measured = BubbleOf(run->measured);
    const double simulated = run->simulated.bubble;
    table.AddRow(
        {run->schedule.name, std::to_string(run->stages),
         fmt::format("{}+{}", run->figures.losses.size() - run->throughput.steps_measured,
                     run->throughput.steps_measured),
         fmt::format("{:.0f}", run->throughput.tokens_per_s),
         fmt::format("{:.2f}x", run->throughput.tokens_per_s / single.throughput.tokens_per_s),
         fmt::format("{:.2f}", ComputePerStep(*run) / ComputePerStep(single)), Percent(measured),
         Percent(simulated),
         // One stage has no pipeline bubble to compare: its few tenths of a percent are data.
         run->stages > 1 && simulated > 0
             ? fmt::format("{:+.1f}%", 100 * (measured - simulated) / simulated)
             : "-",
         Percent(run->replayed),
         run->stages > 1 && run->replayed > 0
             ? fmt::format("{:+.1f}%", 100 * (measured - run->replayed) / run->replayed)
             : "-",
         Percent(run->simulated.async_bubble), Percent(run->report_bubble)});
  }
  std::cout << table.ToString();
  const double p = runs.empty() ? 1 : runs.front().stages;
  std::cout << fmt::format(
      "ideal P·m/(m+P-1) = {:.2f}x; compute x = the stages' F/B/I/W time per step / the 1-stage "
      "run's; simulated: sends complete before the next compute as in the run (rendezvous); "
      "async sends: Simulate()'s never-blocking sends; difference = (measured - simulated) / "
      "simulated, the goal within ±10% for 1f1b and zb-h1; replayed: the simulator fed every "
      "measured action's own duration (not its kind's mean), so that vs replayed is what the "
      "runtime adds to the schedule's own waits\n\n",
      p * m / (m + p - 1));
}

void PrintCosts(const std::vector<Run>& runs) {
  Table table({"schedule", "virtual stage", "F ms", "B ms", "I ms", "W ms", "post ms", "latency ms",
               "samples"});
  for (const Run& run : runs) {
    for (const auto& [j, c] : run.costs.costs.per_virtual_stage) {
      table.AddRow({j == 0 ? run.schedule.name : "", std::to_string(j), Ms(c.forward),
                    Ms(c.backward), Ms(c.backward_input), Ms(c.backward_weight),
                    fmt::format("{:.3f}", c.post), fmt::format("{:.2f}", c.communication),
                    std::to_string(run.costs.latency_samples)});
    }
  }
  std::cout << "costs fed to the simulator (means over the measured steps; post: the stage's "
               "time in no span per SEND or RECV):\n"
            << table.ToString() << "\n";
}

void PrintBreakdown(const std::vector<Run>& runs) {
  Table table({"schedule", "stage", "", "step", "compute", "update", "RECV_F", "RECV_B", "SEND",
               "step start", "exchange", "no span", "between"});
  for (const Run& run : runs) {
    for (int r = 0; r < run.stages; ++r) {
      const size_t i = static_cast<size_t>(r);
      const StepParts& m = run.measured[i];
      const StepParts& s = run.simulated.parts[i];
      const auto row = [&](const char* what, const StepParts& x, bool first) {
        table.AddRow({first && r == 0 ? run.schedule.name : "", first ? std::to_string(r) : "",
                      what, Ms(x.step), Ms(x.compute), Ms(x.update), Ms(x.recv_forward),
                      Ms(x.recv_backward), Ms(x.send), Ms(x.step_start), Ms(x.exchange),
                      Ms(x.uncovered), first ? Ms(run.costs.between[i]) : ""});
      };
      StepParts d;
      d.step = m.step - s.step;
      d.compute = m.compute - s.compute;
      d.update = m.update - s.update;
      d.recv_forward = m.recv_forward - s.recv_forward;
      d.recv_backward = m.recv_backward - s.recv_backward;
      d.send = m.send - s.send;
      d.step_start = m.step_start - s.step_start;
      d.exchange = m.exchange - s.exchange;
      d.uncovered = m.uncovered - s.uncovered;
      row("measured", m, true);
      row("simulated", s, false);
      row("difference", d, false);
    }
  }
  std::cout << "where the step went, ms per step (means over the measured steps):\n"
            << table.ToString();
}

int Main(const Options& options) {
  const Config config =
      LoadConfig(options.config, {fmt::format("train.micro_batches={}", options.microbatches)});
  TempDir work("baton_pipeline_bench");
  const std::string work_dir = work.path();
  std::cout << fmt::format(
      "pipeline_bench: {}, 1 vs {} stages, m = {}, 1 thread per process, {} steps ({})\n",
      std::filesystem::path(options.config).filename().string(), options.stages,
      options.microbatches, options.steps, LoadAverage());
  const std::vector<Candidate> schedules =
      options.schedules.empty() ? AcceptedCandidates(options) : ParseSchedules(options.schedules);

  // Alternate the runs so that a change in the machine's load hits all alike; keep each one's
  // fastest repeat.
  std::optional<Run> best_single;
  std::vector<std::optional<Run>> best(schedules.size());
  const auto keep_faster = [](std::optional<Run>& best_run, Run run) {
    if (!best_run || run.throughput.tokens_per_s > best_run->throughput.tokens_per_s) {
      best_run = std::move(run);
    }
  };
  for (int repeat = 0; repeat < options.repeats; ++repeat) {
    Run single = RunSchedule(options, config, {"1f1b", 1}, 1, repeat, work_dir);
    CheckLossesSane(single.figures.losses, config.model.vocab_size, "1 stage");
    if (best_single) CheckSame(*best_single, single, config.model.vocab_size);
    std::string line =
        fmt::format("  repeat {}: 1 stage {:.0f}", repeat + 1, single.throughput.tokens_per_s);
    for (size_t k = 0; k < schedules.size(); ++k) {
      Run run = RunSchedule(options, config, schedules[k], options.stages, repeat, work_dir);
      CheckSame(single, run, config.model.vocab_size);
      line += fmt::format(", {} {:.0f}", schedules[k].name, run.throughput.tokens_per_s);
      keep_faster(best[k], std::move(run));
    }
    std::cout << line << " tokens/s (" << LoadAverage() << ")\n" << std::flush;
    keep_faster(best_single, std::move(single));
  }
  std::cout << fmt::format(
      "checks passed: losses finite, first near ln(vocab); every schedule at {} stages "
      "bit-identical to 1 stage (every step's loss, param_checksum {})\n\n",
      options.stages, best_single->figures.param_checksum);

  std::vector<Run> runs;
  for (std::optional<Run>& run : best) runs.push_back(std::move(*run));
  PrintSummary(*best_single, runs);
  PrintCosts(runs);
  PrintBreakdown(runs);
  std::cout << "(steps: warm-up + measured; best of " << options.repeats << " repeat(s); "
            << LoadAverage() << ")\n";
  if (options.keep) {
    work.Keep();
    std::cout << "reports, traces and logs kept in " << work_dir << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace baton::bench

int main(int argc, char** argv) {
  baton::bench::Options options;
  CLI::App app{
      "Baton pipeline schedules side by side: 1 stage vs P stages of real processes, "
      "measured and simulated bubble (bench/README.md)"};
  app.add_option("--baton", options.baton, "the baton binary");
  app.add_option("--config", options.config, "model config (YAML)");
  app.add_option("--schedules", options.schedules,
                 "NAME[:CHUNKS],... (default: each of gpipe, 1f1b, zb-h1, zb-v:2, dualpipev:2 "
                 "that baton run accepts)");
  app.add_option("--stages", options.stages, "pipeline stages to compare with 1")
      ->check(CLI::Range(2, 64));
  app.add_option("--microbatches", options.microbatches, "micro-batches per step (m)");
  app.add_option("--steps", options.steps,
                 "steps per run; step 1 is not measured, the last 8 are traced")
      ->check(CLI::Range(3, 100000));
  app.add_option("--repeats", options.repeats, "runs of each, alternating; the fastest counts")
      ->check(CLI::Range(1, 100));
  app.add_flag("--keep", options.keep, "keep the reports, traces and logs");
  app.add_option("--set", options.sets,
                 "section.key=value for every run (e.g. device.pin_threads=true)");
  CLI11_PARSE(app, argc, argv);
  try {
    return baton::bench::Main(options);
  } catch (const std::exception& e) {
    std::cerr << "pipeline_bench FAILED: " << e.what() << "\n";
    return 1;
  }
}
