// train_bench: single-process training throughput of gpt-tiny and gpt-small-cpu at 1 and 2
// threads (`device.threads`) in fp32 and bf16, and model FLOPs utilisation against the GEMM peak
// measured in the same run, at the model's own MLP up-projection shape, the same thread count and
// the run's dtype.
//
// The runs go through RunInProcess (planner/in_process.h): the real trainer and engine, one
// rank, no coordinator. Every printed figure is defined in bench/README.md ("train_bench").
// Before printing, it checks that every loss is finite, the first is near ln(vocab), and the
// runs at every thread count are bit-identical to the first of their dtype (losses and
// param_checksum: the CPU kernels' results do not depend on the thread count), and every bf16
// loss is within 2% of fp32's at the same step. A failed check exits 1.
//
// With --repeats R every run is made R times, round robin (so a busy spell of a shared machine
// falls on all of them alike); each keeps its fastest repeat's tokens/s and the fastest GEMM peak
// measured around any of its repeats, and every repeat must compute the same bits.
//
//   train_bench [--models gpt-tiny,gpt-small-cpu] [--threads 1,2] [--dtypes fp32,bf16]
//               [--steps N] [--repeats R] [--json FILE]
//               [--set section.key=value ...]   (e.g. --set model.attention=materialized)
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "config/config.h"
#include "core/error.h"
#include "core/files.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_peak.h"
#include "model/cost.h"
#include "planner/in_process.h"
#include "planner/planner.h"

namespace baton::bench {
namespace {

using nlohmann::json;

struct Options {
  std::string config_dir = BATON_SOURCE_DIR "/configs";
  std::vector<std::string> models = {"gpt-tiny", "gpt-small-cpu"};
  std::vector<int> threads = {1, 2};
  std::vector<std::string> dtypes = {"fp32", "bf16"};
  std::vector<std::string> overrides;  // --set, applied after the fixed settings below
  int64_t steps = 0;                   // 0: per model, kDefaultSteps
  int gemm_repeats = 10;
  int repeats = 1;
  std::string json_path;
};

// Enough measured steps for a stable mean at a few seconds per model on 2 cores.
int64_t DefaultSteps(const std::string& model) { return model == "gpt-tiny" ? 12 : 5; }

struct RunResult {
  std::string model;
  std::string dtype;
  Config config;
  int threads = 1;
  int64_t activation_peak = 0;  // bytes, the ledger's activation peak over the run
  int64_t gemm_m = 0, gemm_n = 0, gemm_k = 0;
  double gemm_peak_gflops = 0;
  Throughput throughput;
  double model_flops_per_token = 0;
  double mfu = 0;
  std::vector<double> losses;
  std::vector<double> step_seconds;
  std::string param_checksum;
};

RunResult RunOne(const Options& options, const std::string& model, const std::string& dtype,
                 int threads) {
  const int64_t steps = options.steps > 0 ? options.steps : DefaultSteps(model);
  RunResult r;
  r.model = model;
  r.dtype = dtype;
  r.threads = threads;
  // One stage, no recompute: the model's own training step, nothing else.
  std::vector<std::string> settings = {
      "parallel.stages=1", "parallel.checkpoint=none", "precision.dtype=" + dtype,
      fmt::format("device.threads={}", threads), fmt::format("train.steps={}", steps)};
  settings.insert(settings.end(), options.overrides.begin(), options.overrides.end());
  r.config = LoadConfig(options.config_dir + "/" + model + ".yaml", settings);
  const Plan plan = MakePlan(r.config);
  const int64_t seq_len = SequenceLength(r.config);

  // The GEMM peak: the model's MLP up-projection of one micro-batch, (b*T, C) x (C, 4C), in the
  // run's dtype (its 4C columns split into blocks for every thread: gemm.h).
  r.gemm_m = MicroBatchSize(r.config) * seq_len;
  r.gemm_k = r.config.model.width;
  r.gemm_n = 4 * r.config.model.width;
  // Measured just before and just after the run, the faster of the two: a shared machine that
  // was busy for the few milliseconds of one measurement does not inflate the MFU.
  const auto measure_peak = [&] {
    return MeasureGemmGflops(static_cast<int>(r.gemm_m), static_cast<int>(r.gemm_n),
                             static_cast<int>(r.gemm_k), options.gemm_repeats, threads,
                             r.config.precision.dtype);
  };
  const double peak_before = measure_peak();

  const InProcessResult result = RunInProcess(plan);
  r.gemm_peak_gflops = std::max(peak_before, measure_peak());
  BATON_CHECK(result.ranks.size() == 1, "{} ranks for a 1-stage plan", result.ranks.size());
  for (const StepRecord& s : result.ranks[0].steps) {
    r.losses.push_back(s.loss);
    r.step_seconds.push_back(s.step_s);
  }
  r.param_checksum = result.param_checksum;
  r.activation_peak = result.ranks[0].peak[MemCategory::kActivations];
  r.throughput = MeasureThroughput(TokensPerStep(r.config), r.step_seconds);
  r.model_flops_per_token = ModelFlopsPerToken(plan.graph, plan.dims, seq_len);
  r.mfu = Mfu(r.throughput.tokens_per_s, r.model_flops_per_token, r.gemm_peak_gflops);
  return r;
}

// The checks before any figure: sane losses, every thread count computing the same bits within
// a dtype, and bf16 training like fp32 (within 2% at every step).
void Check(const std::vector<RunResult>& runs) {
  for (const RunResult& r : runs) {
    const std::string what = fmt::format("{} {} at {} thread(s)", r.model, r.dtype, r.threads);
    CheckLossesSane(r.losses, r.config.model.vocab_size, what);
    for (const RunResult& first : runs) {
      if (first.model != r.model || first.dtype != r.dtype) continue;
      CheckIdentical(
          first.losses, r.losses,
          fmt::format("{} {}: {} vs {} thread(s)", r.model, r.dtype, first.threads, r.threads));
      BATON_CHECK(first.param_checksum == r.param_checksum,
                  "{} {}: param_checksum {} at {} thread(s) vs {} at {}", r.model, r.dtype,
                  first.param_checksum, first.threads, r.param_checksum, r.threads);
      break;
    }
    if (r.dtype == "fp32") continue;
    for (const RunResult& fp32 : runs) {
      if (fp32.model != r.model || fp32.dtype != "fp32" || fp32.losses.size() != r.losses.size()) {
        continue;
      }
      for (size_t i = 0; i < r.losses.size(); ++i) {
        BATON_CHECK(std::abs(r.losses[i] - fp32.losses[i]) <= 0.02 * std::abs(fp32.losses[i]),
                    "{}: step {} loss {} is not within 2% of fp32's {}", what, i + 1, r.losses[i],
                    fp32.losses[i]);
      }
      break;
    }
  }
}

// Each model's dtype against its fp32 run at the same thread count: tokens/s and activation peak.
std::string Ratios(const std::vector<RunResult>& runs) {
  std::string out;
  for (const RunResult& r : runs) {
    if (r.dtype == "fp32") continue;
    for (const RunResult& fp32 : runs) {
      if (fp32.model != r.model || fp32.dtype != "fp32" || fp32.threads != r.threads) continue;
      out += fmt::format(
          "{} at {} thread(s): {} / fp32 tokens/s {:.2f}x, activation peak {:.2f} / {:.2f} MiB "
          "= {:.2f}x\n",
          r.model, r.threads, r.dtype, r.throughput.tokens_per_s / fp32.throughput.tokens_per_s,
          r.activation_peak / 1048576.0, fp32.activation_peak / 1048576.0,
          static_cast<double>(r.activation_peak) / static_cast<double>(fp32.activation_peak));
    }
  }
  for (const RunResult& r : runs) {
    if (r.threads == 1) continue;
    for (const RunResult& one : runs) {
      if (one.model != r.model || one.dtype != r.dtype || one.threads != 1) continue;
      out += fmt::format("{} {}: {} threads / 1 thread tokens/s {:.2f}x\n", r.model, r.dtype,
                         r.threads, r.throughput.tokens_per_s / one.throughput.tokens_per_s);
    }
  }
  return out;
}

json ToJson(const RunResult& r) {
  return {{"model", r.model},
          {"dtype", r.dtype},
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
          {"activation_peak_bytes", r.activation_peak},
          {"losses", r.losses},
          {"step_s", r.step_seconds},
          {"param_checksum", r.param_checksum}};
}

// Folds a repeat of `kept`'s run into it: the same bits, the faster tokens/s, the faster peak.
void KeepFastest(RunResult& kept, RunResult repeat) {
  BATON_CHECK(repeat.losses == kept.losses && repeat.param_checksum == kept.param_checksum,
              "a repeat of {} {} at {} thread(s) computed other bits (param_checksum {} vs {})",
              kept.model, kept.dtype, kept.threads, repeat.param_checksum, kept.param_checksum);
  const double peak = std::max(kept.gemm_peak_gflops, repeat.gemm_peak_gflops);
  if (repeat.throughput.tokens_per_s > kept.throughput.tokens_per_s) kept = std::move(repeat);
  kept.gemm_peak_gflops = peak;
  kept.mfu = Mfu(kept.throughput.tokens_per_s, kept.model_flops_per_token, peak);
}

int Main(const Options& options) {
  BATON_CHECK(options.repeats >= 1, "--repeats {}: at least 1", options.repeats);
  std::cout << "train_bench: single-process training, no recompute (" << LoadAverage() << ")\n";
  std::cout << "CPU GEMMs: " << cpu::GemmEnginesSummary() << "\n";
  std::vector<RunResult> runs;
  for (int repeat = 0; repeat < options.repeats; ++repeat) {
    size_t index = 0;
    for (const std::string& model : options.models) {
      for (const std::string& dtype : options.dtypes) {
        for (int threads : options.threads) {
          RunResult r = RunOne(options, model, dtype, threads);
          std::cout << fmt::format("  ran {} {} at {} thread(s): {} steps, {:.0f} tokens/s\n",
                                   r.model, r.dtype, r.threads, r.losses.size(),
                                   r.throughput.tokens_per_s)
                    << std::flush;
          if (repeat == 0) {
            runs.push_back(std::move(r));
          } else {
            KeepFastest(runs[index], std::move(r));
          }
          ++index;
        }
      }
    }
  }
  if (options.repeats > 1) {
    std::cout << fmt::format("each run's fastest of {} repeats, all bit-identical\n",
                             options.repeats);
  }
  Check(runs);
  std::cout << "checks passed: losses finite, first near ln(vocab); every thread count "
               "bit-identical (losses, param_checksum); bf16 within 2% of fp32\n\n";

  Table table({"model", "dtype", "threads", "steps", "tokens/s", "model GFLOP/s",
               "GEMM shape m·n·k", "GEMM peak GFLOP/s", "MFU", "activations MiB", "first loss",
               "last loss"});
  for (const RunResult& r : runs) {
    table.AddRow({r.model, r.dtype, std::to_string(r.threads),
                  fmt::format("{}+{}", r.losses.size() - r.throughput.steps_measured,
                              r.throughput.steps_measured),
                  fmt::format("{:.0f}", r.throughput.tokens_per_s),
                  fmt::format("{:.1f}", r.throughput.tokens_per_s * r.model_flops_per_token / 1e9),
                  fmt::format("{}·{}·{}", r.gemm_m, r.gemm_n, r.gemm_k),
                  fmt::format("{:.1f}", r.gemm_peak_gflops), fmt::format("{:.1f}%", 100 * r.mfu),
                  fmt::format("{:.2f}", r.activation_peak / 1048576.0),
                  fmt::format("{:.4f}", r.losses.front()), fmt::format("{:.4f}", r.losses.back())});
  }
  std::cout << table.ToString() << "(steps: warm-up + measured; " << LoadAverage() << ")\n"
            << Ratios(runs);

  if (!options.json_path.empty()) {
    json out = {{"bench", "train_bench"},
                {"load", LoadAverage()},
                {"gemm_engine", cpu::Name(cpu::GemmEngineInUse())},
                {"onednn_version", cpu::OneDnnVersion()},
                {"runs", json::array()}};
    for (const RunResult& r : runs) out["runs"].push_back(ToJson(r));
    WriteFileAtomically(options.json_path, out.dump(2) + "\n");
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
  app.add_option("--dtypes", options.dtypes, "precision.dtype values (fp32 first)")->delimiter(',');
  app.add_option("--steps", options.steps,
                 "steps per run, step 1 unmeasured (0: 12 tiny, 5 small)");
  app.add_option("--gemm-repeats", options.gemm_repeats, "timed GEMM calls for the peak");
  app.add_option("--repeats", options.repeats, "runs of each, round robin; the fastest is kept");
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
