// Shared pieces of the training benchmarks (train_bench, pipeline_bench, memory_bench): the
// figures bench/README.md defines, computed from step times or a `baton run --report` JSON; the
// correctness checks every benchmark runs before it prints a figure; a runner for the real
// `baton` binary (on the process harness the integration tests use, tests/baton_process.h);
// plain-text tables.
//
// Everything here is a pure function of its arguments except RunBaton (processes
// and files). Checks throw baton::Error with what differed; a benchmark's main() turns that into
// a non-zero exit.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"

namespace baton::bench {

// ---- figures (bench/README.md, "Training figures")

// Tokens one optimizer step trains on: train.batch_size x the sequence length.
double TokensPerStep(const Config& config);

// tokens/s = tokens_per_step x S / (sum of step_s over the S measured steps), the measured steps
// being all but the first `warmup_steps` (step 1 pays for first-touch page faults and the thread
// pool's start).
struct Throughput {
  int64_t steps_measured = 0;
  double measured_s = 0;
  double tokens_per_s = 0;
};
// Throws when there are no more than `warmup_steps` steps or a step time is not positive.
Throughput MeasureThroughput(double tokens_per_step, const std::vector<double>& step_seconds,
                             int warmup_steps = 1);

// Model FLOPs utilisation: tokens/s x model FLOPs per token / (GEMM peak GFLOP/s x 1e9).
double Mfu(double tokens_per_s, double model_flops_per_token, double gemm_peak_gflops);

// ---- one `baton run --report` JSON

struct StageFigures {
  int stage = 0;
  std::vector<int> layers;              // first and last graph index
  std::map<std::string, int64_t> peak;  // memory.peak: bytes per category, and "total"
  double busy_fraction = 0;             // compute / wall of the stage's step loop
  double bubble_fraction = 0;           // 1 - busy_fraction
};

struct ReportFigures {
  std::vector<double> losses;        // per step, from the stage holding the head
  std::vector<double> step_seconds;  // per step, that stage's step_s
  int64_t skipped_steps = 0;         // fp16 overflow: steps with no update
  std::string param_checksum;
  std::vector<StageFigures> stages;
};

// Reads the fields the benchmarks use; throws when one is missing.
ReportFigures ReadReport(const nlohmann::json& report);

// ---- checks

// Throws unless every loss is finite and the first is within `tolerance` of ln(vocab_size), what
// a freshly initialised model gives.
void CheckLossesSane(const std::vector<double>& losses, int64_t vocab_size, const std::string& what,
                     double tolerance = 1.0);

// Throws, naming the first step that differs, unless a and b are bitwise equal step by step.
void CheckIdentical(const std::vector<double>& a, const std::vector<double>& b,
                    const std::string& what);

// max over steps of |a - b| / max(|a|, 1); the vectors must have the same size.
double MaxRelativeDifference(const std::vector<double>& a, const std::vector<double>& b);

// ---- running the real binary

// Runs `baton run CONFIG --set k=v... --set output.dir=WORK/NAME --report WORK/NAME.json`, its
// output going to WORK/NAME.log, and returns the parsed report. Throws (with the log's last
// lines) when baton exits non-zero.
nlohmann::json RunBaton(const std::string& baton, const std::string& config_path,
                        const std::vector<std::string>& overrides, const std::string& work_dir,
                        const std::string& name);

// ---- output

// Columns padded to their widest cell; the first column left-aligned, the others right-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> header);
  void AddRow(std::vector<std::string> row);
  std::string ToString() const;

 private:
  std::vector<std::vector<std::string>> rows_;  // rows_[0] is the header
};

// "load average 3.26 4.84 5.98 on 2 CPUs" (/proc/loadavg): printed beside every timing, since a
// busy machine slows every figure.
std::string LoadAverage();

// Bytes as MiB with one decimal ("100.5").
std::string Mib(int64_t bytes);

}  // namespace baton::bench
