// train_bench: single-process training throughput of gpt-tiny and gpt-small-cpu at 1 and 2
// threads (`device.threads`), and model FLOPs utilisation against the GEMM peak measured in the
// same run, at the model's own MLP up-projection shape and the same thread count.
//
// The runs go through RunInProcess (planner/in_process.h): the real trainer and engine, one
// rank, no coordinator. Every printed figure is defined in bench/README.md ("train_bench").
// Before printing, it checks that every loss is finite, the first is near ln(vocab), and the
// runs at every thread count are bit-identical to the first (losses and param_checksum: the CPU
// kernels' results do not depend on the thread count). A failed check exits 1.
//
//   train_bench [--models gpt-tiny,gpt-small-cpu] [--threads 1,2] [--steps N] [--json FILE]
//               [--set section.key=value ...]   (e.g. --set model.attention=materialized)
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "config/config.h"
#include "core/error.h"
#include "kernels/cpu/gemm_peak.h"
#include "model/cost.h"
#include "planner/in_process.h"
#include "planner/plan.h"

namespace baton::bench {
namespace {

using nlohmann::json;

struct Options {
  std::string config_dir = BATON_SOURCE_DIR "/configs";
  std::vector<std::string> models = {"gpt-tiny", "gpt-small-cpu"};
  std::vector<int> threads = {1, 2};
  std::vector<std::string> overrides;  // --set, applied after the fixed settings below
  int64_t steps = 0;                   // 0: per model, kDefaultSteps
  int gemm_repeats = 10;
  std::string json_path;
};

// Enough measured steps for a stable mean at a few seconds per model on 2 cores.
int64_t DefaultSteps(const std::string& model) { return model == "gpt-tiny" ? 12 : 5; }

struct RunResult {
  std::string model;
  Config config;
  int threads = 1;
  int64_t gemm_m = 0, gemm_n = 0, gemm_k = 0;
  double gemm_peak_gflops = 0;
  Throughput throughput;
  double model_flops_per_token = 0;
  double mfu = 0;
  std::vector<double> losses;
  std::vector<double> step_seconds;
  std::string param_checksum;
};

RunResult RunOne(const Options& options, const std::string& model, int threads) {
  const int64_t steps = options.steps > 0 ? options.steps : DefaultSteps(model);
  RunResult r;
  r.model = model;
  r.threads = threads;
  // One stage, fp32, no recompute: the model's own training step, nothing else.
  std::vector<std::string> settings = {
      "parallel.stages=1", "parallel.checkpoint=none", "precision.dtype=fp32",
      fmt::format("device.threads={}", threads), fmt::format("train.steps={}", steps)};
  settings.insert(settings.end(), options.overrides.begin(), options.overrides.end());
  r.config = LoadConfig(options.config_dir + "/" + model + ".yaml", settings);
  const Plan plan = MakePlan(r.config);
  const int64_t seq_len = SequenceLength(r.config);

  // The GEMM peak: the model's MLP up-projection of one micro-batch, (b*T, C) x (C, 4C).
  r.gemm_m = MicroBatchSize(r.config) * seq_len;
  r.gemm_k = r.config.model.width;
  r.gemm_n = 4 * r.config.model.width;
  r.gemm_peak_gflops =
      MeasureSgemmGflops(static_cast<int>(r.gemm_m), static_cast<int>(r.gemm_n),
                         static_cast<int>(r.gemm_k), options.gemm_repeats, threads);

  const InProcessResult result = RunInProcess(plan);
  BATON_CHECK(result.ranks.size() == 1, "{} ranks for a 1-stage plan", result.ranks.size());
  for (const StepRecord& s : result.ranks[0].steps) {
    r.losses.push_back(s.loss);
    r.step_seconds.push_back(s.step_s);
  }
  r.param_checksum = result.param_checksum;
  r.throughput = MeasureThroughput(TokensPerStep(r.config), r.step_seconds);
  r.model_flops_per_token = ModelFlopsPerToken(plan.graph, plan.dims, seq_len);
  r.mfu = Mfu(r.throughput.tokens_per_s, r.model_flops_per_token, r.gemm_peak_gflops);
  return r;
}

// The checks before any figure: sane losses, and every thread count computing the same bits.
void Check(const std::vector<RunResult>& runs) {
  for (const RunResult& r : runs) {
    const std::string what = fmt::format("{} at {} thread(s)", r.model, r.threads);
    CheckLossesSane(r.losses, r.config.model.vocab_size, what);
    for (const RunResult& first : runs) {
      if (first.model != r.model) continue;
      CheckIdentical(first.losses, r.losses,
                     fmt::format("{}: {} vs {} thread(s)", r.model, first.threads, r.threads));
      BATON_CHECK(first.param_checksum == r.param_checksum,
                  "{}: param_checksum {} at {} thread(s) vs {} at {}", r.model,
                  first.param_checksum, first.threads, r.param_checksum, r.threads);
      break;
    }
  }
}

json ToJson(const RunResult& r) {
  return {{"model", r.model},
          {"config", baton::ToJson(r.config)},
          {"threads", r.threads},
          {"steps", r.losses.size()},
          {"steps_measured", r.throughput.steps_measured},
          {"tokens_per_step", TokensPerStep(r.config)},
          {"tokens_per_s", r.throughput.tokens_per_s},
          {"model_flops_per_token", r.model_flops_per_token},
          {"model_gflops_per_s", r.throughput.tokens_per_s * r.model_flops_per_token / 1e9},
          {"gemm_shape", {r.gemm_m, r.gemm_n, r.gemm_k}},
          {"gemm_peak_gflops", r.gemm_peak_gflops},
          {"mfu", r.mfu},
          {"losses", r.losses},
          {"step_s", r.step_seconds},
          {"param_checksum", r.param_checksum}};
}

int Main(const Options& options) {
  std::cout << "train_bench: single-process training, fp32, no recompute (" << LoadAverage()
            << ")\n";
  std::vector<RunResult> runs;
  for (const std::string& model : options.models) {
    for (int threads : options.threads) {
      runs.push_back(RunOne(options, model, threads));
      const RunResult& r = runs.back();
      std::cout << fmt::format("  ran {} at {} thread(s): {} steps, {:.0f} tokens/s\n", r.model,
                               r.threads, r.losses.size(), r.throughput.tokens_per_s)
                << std::flush;
    }
  }
  Check(runs);
  std::cout << "checks passed: losses finite, first near ln(vocab); every thread count "
               "bit-identical (losses, param_checksum)\n\n";

  Table table({"model", "threads", "steps", "tokens/s", "model GFLOP/s", "GEMM shape m·n·k",
               "GEMM peak GFLOP/s", "MFU", "first loss", "last loss"});
  for (const RunResult& r : runs) {
    table.AddRow({r.model, std::to_string(r.threads),
                  fmt::format("{}+{}", r.losses.size() - r.throughput.steps_measured,
                              r.throughput.steps_measured),
                  fmt::format("{:.0f}", r.throughput.tokens_per_s),
                  fmt::format("{:.1f}", r.throughput.tokens_per_s * r.model_flops_per_token / 1e9),
                  fmt::format("{}·{}·{}", r.gemm_m, r.gemm_n, r.gemm_k),
                  fmt::format("{:.1f}", r.gemm_peak_gflops), fmt::format("{:.1f}%", 100 * r.mfu),
                  fmt::format("{:.4f}", r.losses.front()), fmt::format("{:.4f}", r.losses.back())});
  }
  std::cout << table.ToString() << "(steps: warm-up + measured; " << LoadAverage() << ")\n";

  if (!options.json_path.empty()) {
    json out = {{"bench", "train_bench"}, {"load", LoadAverage()}, {"runs", json::array()}};
    for (const RunResult& r : runs) out["runs"].push_back(ToJson(r));
    std::ofstream file(options.json_path);
    file << out.dump(2) << "\n";
    BATON_CHECK(file.good(), "cannot write {}", options.json_path);
  }
  return 0;
}

}  // namespace
}  // namespace baton::bench

int main(int argc, char** argv) {
  baton::bench::Options options;
  CLI::App app{"Baton single-process training throughput and MFU (bench/README.md)"};
  app.add_option("--config-dir", options.config_dir, "folder holding <model>.yaml");
  app.add_option("--models", options.models, "configs to run")->delimiter(',');
  app.add_option("--threads", options.threads, "device.threads values")->delimiter(',');
  app.add_option("--steps", options.steps,
                 "steps per run, step 1 unmeasured (0: 12 tiny, 5 small)");
  app.add_option("--gemm-repeats", options.gemm_repeats, "timed GEMM calls for the peak");
  app.add_option("--json", options.json_path, "also write the figures and losses here");
  app.add_option("--set", options.overrides, "override a config field: section.key=value");
  CLI11_PARSE(app, argc, argv);
  try {
    return baton::bench::Main(options);
  } catch (const std::exception& e) {
    std::cerr << "train_bench FAILED: " << e.what() << "\n";
    return 1;
  }
}
