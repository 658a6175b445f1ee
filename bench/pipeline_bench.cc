// pipeline_bench: 1 stage vs P stages (default 2) of real processes, `baton run` with 1F1B,
// m micro-batches (default 8) and one thread per process, on gpt-small-cpu. Prints tokens/s of
// both, their ratio beside the ideal P·m/(m+P−1) (2·8/9 ≈ 1.78× for 2 stages on 2 cores), and
// each stage's busy and bubble fractions. Every figure is defined in bench/README.md
// ("pipeline_bench").
//
// Checks before printing: every loss finite, the first near ln(vocab), and the P-stage run
// bit-identical to the 1-stage run (every step's loss and the param_checksum: DESIGN.md's first
// invariant). A failed check exits 1.
//
//   pipeline_bench [--stages 2] [--microbatches 8] [--steps 6] [--repeats 1] [--baton PATH]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "config/config.h"
#include "core/error.h"
#include "core/temp_dir.h"

namespace baton::bench {
namespace {

struct Options {
  std::string baton = BATON_BINARY;
  std::string config = BATON_SOURCE_DIR "/configs/gpt-small-cpu.yaml";
  int stages = 2;
  int microbatches = 8;
  int64_t steps = 6;
  int repeats = 1;
  bool keep = false;
};

struct Run {
  int stages = 1;
  ReportFigures figures;
  Throughput throughput;
};

Run RunStages(const Options& options, const Config& config, int stages, int repeat,
              const std::string& work_dir) {
  Run run;
  run.stages = stages;
  const nlohmann::json report =
      RunBaton(options.baton, options.config,
               {fmt::format("parallel.stages={}", stages), "parallel.schedule=1f1b",
                "parallel.checkpoint=none", "precision.dtype=fp32", "device.threads=1",
                fmt::format("train.micro_batches={}", options.microbatches),
                fmt::format("train.steps={}", options.steps)},
               work_dir, fmt::format("stages{}_run{}", stages, repeat));
  run.figures = ReadReport(report);
  BATON_CHECK(static_cast<int>(run.figures.stages.size()) == stages, "{} stages reported, not {}",
              run.figures.stages.size(), stages);
  run.throughput = MeasureThroughput(TokensPerStep(config), run.figures.step_seconds);
  return run;
}

void CheckSame(const Run& reference, const Run& run, int64_t vocab_size) {
  const std::string what = fmt::format("{} stage(s)", run.stages);
  CheckLossesSane(run.figures.losses, vocab_size, what);
  CheckIdentical(reference.figures.losses, run.figures.losses,
                 fmt::format("{} vs {} stage(s)", reference.stages, run.stages));
  BATON_CHECK(reference.figures.param_checksum == run.figures.param_checksum,
              "param_checksum {} at {} stage(s) vs {} at {}", reference.figures.param_checksum,
              reference.stages, run.figures.param_checksum, run.stages);
}

int Main(const Options& options) {
  const Config config =
      LoadConfig(options.config, {fmt::format("train.micro_batches={}", options.microbatches)});
  TempDir work("baton_pipeline_bench");
  const std::string work_dir = work.path();
  std::cout << fmt::format(
      "pipeline_bench: {}, 1 vs {} stages, 1f1b, m = {}, 1 thread per process, {} steps ({})\n",
      std::filesystem::path(options.config).filename().string(), options.stages,
      options.microbatches, options.steps, LoadAverage());

  // Alternate the two so that a change in the machine's load hits both alike; keep each one's
  // fastest repeat.
  Run best_single, best_pipeline;
  for (int repeat = 0; repeat < options.repeats; ++repeat) {
    Run single = RunStages(options, config, 1, repeat, work_dir);
    Run pipeline = RunStages(options, config, options.stages, repeat, work_dir);
    const Run& reference = repeat == 0 ? single : best_single;
    CheckSame(reference, single, config.model.vocab_size);
    CheckSame(reference, pipeline, config.model.vocab_size);
    std::cout << fmt::format("  repeat {}: {:.0f} vs {:.0f} tokens/s\n", repeat + 1,
                             single.throughput.tokens_per_s, pipeline.throughput.tokens_per_s)
              << std::flush;
    if (repeat == 0 || single.throughput.tokens_per_s > best_single.throughput.tokens_per_s) {
      best_single = std::move(single);
    }
    if (repeat == 0 || pipeline.throughput.tokens_per_s > best_pipeline.throughput.tokens_per_s) {
      best_pipeline = std::move(pipeline);
    }
  }
  std::cout << fmt::format(
      "checks passed: losses finite, first near ln(vocab); {} stages bit-identical to 1 (every "
      "step's loss, param_checksum {})\n\n",
      options.stages, best_single.figures.param_checksum);

  Table table({"stages", "steps", "tokens/s", "stage", "layers", "busy", "bubble"});
  for (const Run* run : {&best_single, &best_pipeline}) {
    for (const StageFigures& s : run->figures.stages) {
      const bool first = s.stage == 0;
      table.AddRow(
          {first ? std::to_string(run->stages) : "",
           first ? fmt::format("{}+{}", run->figures.losses.size() - run->throughput.steps_measured,
                               run->throughput.steps_measured)
                 : "",
           first ? fmt::format("{:.0f}", run->throughput.tokens_per_s) : "",
           std::to_string(s.stage), fmt::format("{}-{}", s.layers[0], s.layers[1]),
           fmt::format("{:.1f}%", 100 * s.busy_fraction),
           fmt::format("{:.1f}%", 100 * s.bubble_fraction)});
    }
  }
  std::cout << table.ToString();
  const double p = options.stages;
  const double m = options.microbatches;
  const double ideal = p * m / (m + p - 1);
  const double speedup =
      best_pipeline.throughput.tokens_per_s / best_single.throughput.tokens_per_s;
  std::cout << fmt::format(
      "speedup {} stages / 1 stage = {:.2f}x; ideal P·m/(m+P-1) = {:.2f}x; {:.0f}% of ideal "
      "(target >= 1.6x for 2 stages, m = 8)\n",
      options.stages, speedup, ideal, 100 * speedup / ideal);
  std::cout << "(steps: warm-up + measured; best of " << options.repeats << " repeat(s); "
            << LoadAverage() << ")\n";
  if (options.keep) {
    work.Keep();
    std::cout << "reports and logs kept in " << work_dir << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace baton::bench

int main(int argc, char** argv) {
  baton::bench::Options options;
  CLI::App app{"Baton pipeline speedup: 1 stage vs P stages of real processes (bench/README.md)"};
  app.add_option("--baton", options.baton, "the baton binary");
  app.add_option("--config", options.config, "model config (YAML)");
  app.add_option("--stages", options.stages, "pipeline stages to compare with 1")
      ->check(CLI::Range(2, 64));
  app.add_option("--microbatches", options.microbatches, "micro-batches per step (m)");
  app.add_option("--steps", options.steps, "steps per run; step 1 is not measured")
      ->check(CLI::Range(2, 100000));
  app.add_option("--repeats", options.repeats, "runs of each, alternating; the fastest counts")
      ->check(CLI::Range(1, 100));
  app.add_flag("--keep", options.keep, "keep the reports and logs");
  CLI11_PARSE(app, argc, argv);
  try {
    return baton::bench::Main(options);
  } catch (const std::exception& e) {
    std::cerr << "pipeline_bench FAILED: " << e.what() << "\n";
    return 1;
  }
}
