// gpu_bench: the figures `make gpu-check` prints (scripts/gpu-check.sh runs it).
//
//   gpu_bench device [--gemm N] [--repeats R]
//       the GPU, its dense bf16 peak, and the bf16 GEMM rate the CUDA backend reaches (checked)
//   gpu_bench summary REPORT.json [--label TEXT] [--warmup S] [--gpus G] [--peak-tflops P]
//       tokens/s, model FLOP/s, MFU and per-stage peak memory of a `baton run --report` JSON
//   gpu_bench compare-losses REFERENCE.json CANDIDATE.json [--tolerance X] [--require-difference 1]
//       step-by-step losses of two runs (e.g. CPU vs GPU); exit 1 when they differ too much, 3
//       when asked to require a difference and they are bit-identical
//
// Figures are defined in bench/README.md (GPU section) and docs/cuda.md. Exit status: 0 ok,
// 1 a check failed, 2 usage or input error.
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "bench/gpu/device_peak.h"
#include "bench/gpu/run_report.h"
#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"

namespace baton::gpu_bench {
namespace {

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;  // "--gemm" -> "8192"

  std::string Get(const std::string& name, const std::string& fallback) const {
    auto it = options.find(name);
    return it == options.end() ? fallback : it->second;
  }
};

Args Parse(int argc, char** argv) {
  Args args;
  for (int i = 2; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.rfind("--", 0) == 0) {
      BATON_CHECK(i + 1 < argc, "option {} needs a value", word);
      args.options[word] = argv[++i];
    } else {
      args.positional.push_back(word);
    }
  }
  return args;
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  BATON_CHECK(in.good(), "cannot read {}", path);
  return nlohmann::json::parse(in);
}

int Device(const Args& args) {
  const DeviceInfo info = QueryDevice(0);
  fmt::print("device: {} ({} SMs, {} memory)\n", info.name, info.multiprocessors,
             FormatBytes(info.memory_bytes));
  fmt::print("dense bf16 peak: {} ({})\n",
             info.peak_tflops > 0 ? fmt::format("{:.0f} TFLOP/s", info.peak_tflops) : "unknown",
             info.peak_source);
  const int64_t n = std::stoll(args.Get("--gemm", "8192"));
  if (n <= 0) return 0;
  const GemmRate rate = MeasureBf16Gemm(0, n, std::stoi(args.Get("--repeats", "20")));
  fmt::print(
      "bf16 GEMM {}x{}x{} through CudaBackend::Matmul: {:.1f} TFLOP/s{} ; check {} (max "
      "error {:.2g})\n",
      n, n, n, rate.tflops,
      info.peak_tflops > 0 ? fmt::format(" = {:.1f}% of peak", 100 * rate.tflops / info.peak_tflops)
                           : "",
      rate.correct ? "ok" : "FAILED", rate.max_error);
  return rate.correct ? 0 : 1;
}

int Summary(const Args& args) {
  BATON_CHECK(args.positional.size() == 1, "summary takes one report");
  const nlohmann::json report = ReadJson(args.positional[0]);
  const RunFigures f = Summarise(report, std::stoi(args.Get("--warmup", "3")));
  double peak_tflops = std::atof(args.Get("--peak-tflops", "0").c_str());
  std::string device = "device unknown";
  if (peak_tflops <= 0 && cuda::CudaDeviceCount() > 0) {
    const DeviceInfo info = QueryDevice(0);
    peak_tflops = info.peak_tflops;
    device = info.name;
  }
  const int gpus = std::stoi(args.Get("--gpus", "1"));
  const double mfu = Mfu(f.model_flops_per_s, peak_tflops * 1e12, gpus);
  fmt::print(
      "{}: {:.0f} tokens/s, {:.1f} model TFLOP/s, MFU {} ({} GPU x {:.0f} TFLOP/s, {}); "
      "loss {:.4f} -> {:.4f}; {} steps measured after {} warm-up\n",
      args.Get("--label", args.positional[0]), f.tokens_per_s, f.model_flops_per_s / 1e12,
      mfu > 0 ? fmt::format("{:.1f}%", 100 * mfu) : "n/a", gpus, peak_tflops, device, f.first_loss,
      f.last_loss, f.steps_measured, args.Get("--warmup", "3"));
  for (const StagePeak& s : f.stages) {
    std::string parts;
    for (const auto& [category, bytes] : s.by_category) {
      if (bytes > 0)
        parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", category, FormatBytes(bytes));
    }
    fmt::print("  stage {} peak memory (ledger): {} = {}\n", s.stage, FormatBytes(s.total_bytes),
               parts);
  }
  // The run must have trained sensibly: a fresh model starts near ln(vocab).
  const Config config = ConfigOfReport(report);
  const double expected = std::log(static_cast<double>(config.model.vocab_size));
  if (std::abs(f.first_loss - expected) > 1.5) {
    fmt::print("CHECK FAILED: first loss {:.3f} is far from ln(vocab) = {:.3f}\n", f.first_loss,
               expected);
    return 1;
  }
  return 0;
}

int CompareLossesCommand(const Args& args) {
  BATON_CHECK(args.positional.size() == 2, "compare-losses takes two reports");
  const LossComparison c = CompareLosses(ReadJson(args.positional[0]), ReadJson(args.positional[1]),
                                         std::atof(args.Get("--tolerance", "2e-3").c_str()));
  fmt::print("{} vs {}: {}\n", args.positional[0], args.positional[1], c.Describe());
  // A GPU run never reproduces the CPU's bits over many steps (other summation orders): the same
  // bits mean the candidate did not run where it was asked to.
  if (args.Get("--require-difference", "0") == "1" && c.max_relative_diff == 0.0) {
    fmt::print("CHECK FAILED: the losses are bit-identical: did the candidate run on the CPU?\n");
    return 3;
  }
  return c.ok ? 0 : 1;
}

int Main(int argc, char** argv) {
  const std::string usage =
      "usage: gpu_bench device [--gemm N] [--repeats R]\n"
      "       gpu_bench summary REPORT.json [--label TEXT] [--warmup S] [--gpus G] "
      "[--peak-tflops P]\n"
      "       gpu_bench compare-losses REFERENCE.json CANDIDATE.json [--tolerance X] "
      "[--require-difference 1]\n";
  if (argc < 2) {
    fmt::print(stderr, "{}", usage);
    return 2;
  }
  const std::string command = argv[1];
  try {
    const Args args = Parse(argc, argv);
    if (command == "device") return Device(args);
    if (command == "summary") return Summary(args);
    if (command == "compare-losses") return CompareLossesCommand(args);
  } catch (const std::exception& e) {
    fmt::print(stderr, "gpu_bench {}: {}\n", command, e.what());
    return 2;
  }
  fmt::print(stderr, "{}", usage);
  return 2;
}

}  // namespace
}  // namespace baton::gpu_bench

int main(int argc, char** argv) { return baton::gpu_bench::Main(argc, argv); }
