// The training benchmarks' shared figures, checks, process runner and tables (bench_util.h).
#include "bench/bench_util.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tests/baton_process.h"

namespace baton::bench {

using nlohmann::json;

double TokensPerStep(const Config& config) {
  return static_cast<double>(config.train.batch_size) * static_cast<double>(SequenceLength(config));
}

Throughput MeasureThroughput(double tokens_per_step, const std::vector<double>& step_seconds,
                             int warmup_steps) {
  BATON_CHECK(static_cast<int64_t>(step_seconds.size()) > warmup_steps,
              "{} steps leave nothing to measure after {} warm-up step(s)", step_seconds.size(),
              warmup_steps);
  Throughput t;
  for (size_t i = static_cast<size_t>(warmup_steps); i < step_seconds.size(); ++i) {
    BATON_CHECK(step_seconds[i] > 0, "step {} took {} s", i + 1, step_seconds[i]);
    t.measured_s += step_seconds[i];
    ++t.steps_measured;
  }
  t.tokens_per_s = tokens_per_step * static_cast<double>(t.steps_measured) / t.measured_s;
  return t;
}

double Mfu(double tokens_per_s, double model_flops_per_token, double gemm_peak_gflops) {
  BATON_CHECK(gemm_peak_gflops > 0, "GEMM peak {} GFLOP/s", gemm_peak_gflops);
  return tokens_per_s * model_flops_per_token / (gemm_peak_gflops * 1e9);
}

ReportFigures ReadReport(const json& report) {
  BATON_CHECK(report.contains("steps") && report["steps"].is_array(), "the report has no steps");
  BATON_CHECK(report.contains("param_checksum"), "the report has no param_checksum");
  BATON_CHECK(report.contains("stages"), "the report has no stages");
  ReportFigures f;
  for (const json& step : report["steps"]) {
    f.losses.push_back(step.at("loss").get<double>());
    f.step_seconds.push_back(step.at("step_s").get<double>());
    if (step.value("skipped", false)) ++f.skipped_steps;
  }
  f.param_checksum = report["param_checksum"].get<std::string>();
  for (const json& s : report["stages"]) {
    StageFigures stage;
    stage.stage = s.at("stage").get<int>();
    stage.layers = s.at("layers").get<std::vector<int>>();
    for (const auto& [key, bytes] : s.at("memory").at("peak").items()) {
      stage.peak[key] = bytes.get<int64_t>();
    }
    stage.busy_fraction = s.at("busy_fraction").get<double>();
    stage.bubble_fraction = s.at("bubble_fraction").get<double>();
    f.stages.push_back(std::move(stage));
  }
  return f;
}

void CheckLossesSane(const std::vector<double>& losses, int64_t vocab_size, const std::string& what,
                     double tolerance) {
  BATON_CHECK(!losses.empty(), "{}: no losses", what);
  for (size_t i = 0; i < losses.size(); ++i) {
    BATON_CHECK(std::isfinite(losses[i]), "{}: step {} has loss {}", what, i + 1, losses[i]);
  }
  const double expected = std::log(static_cast<double>(vocab_size));
  BATON_CHECK(std::abs(losses[0] - expected) <= tolerance,
              "{}: first loss {} is not within {} of ln({}) = {:.4f}", what, losses[0], tolerance,
              vocab_size, expected);
}

void CheckIdentical(const std::vector<double>& a, const std::vector<double>& b,
                    const std::string& what) {
  BATON_CHECK(a.size() == b.size(), "{}: {} steps vs {}", what, a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    BATON_CHECK(std::bit_cast<uint64_t>(a[i]) == std::bit_cast<uint64_t>(b[i]),
                "{}: step {} loss {:.9g} vs {:.9g} (not bit-identical)", what, i + 1, a[i], b[i]);
  }
}

double MaxRelativeDifference(const std::vector<double>& a, const std::vector<double>& b) {
  BATON_CHECK(a.size() == b.size(), "{} steps vs {}", a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(std::abs(a[i]), 1.0));
  }
  return worst;
}

json RunBaton(const std::string& baton, const std::string& config_path,
              const std::vector<std::string>& overrides, const std::string& work_dir,
              const std::string& name) {
  const std::string base = (std::filesystem::path(work_dir) / name).string();
  const std::string report_path = base + ".json";
  const std::string log_path = base + ".log";
  std::vector<std::string> args = {baton, "run", config_path};
  for (const std::string& o : overrides) {
    args.push_back("--set");
    args.push_back(o);
  }
  args.push_back("--set");
  args.push_back("output.dir=" + base);
  args.push_back("--report");
  args.push_back(report_path);
  const int code = testing::RunLogged(args, log_path);
  BATON_CHECK(code == 0, "`baton run {}` ({}) failed (exit {}); its log {} ends:\n{}", config_path,
              name, code, log_path, testing::LastLines(log_path, 15));
  std::ifstream in(report_path);
  BATON_CHECK(in.good(), "{} wrote no report {}", name, report_path);
  return json::parse(in);
}

Table::Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }

void Table::AddRow(std::vector<std::string> row) {
  BATON_CHECK(row.size() == rows_[0].size(), "a row of {} cells in a table of {} columns",
              row.size(), rows_[0].size());
  rows_.push_back(std::move(row));
}

namespace {

// Display width: UTF-8 continuation bytes take no column.
size_t Width(const std::string& s) {
  return static_cast<size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

}  // namespace

std::string Table::ToString() const {
  std::vector<size_t> widths(rows_[0].size(), 0);
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], Width(row[c]));
  }
  std::ostringstream out;
  for (size_t r = 0; r < rows_.size(); ++r) {
    for (size_t c = 0; c < rows_[r].size(); ++c) {
      const std::string pad(widths[c] - Width(rows_[r][c]), ' ');
      if (c > 0) out << "  ";
      out << (c == 0 ? rows_[r][c] + pad : pad + rows_[r][c]);
    }
    out << "\n";
    if (r == 0) {
      size_t total = 0;
      for (size_t w : widths) total += w;
      out << std::string(total + 2 * (widths.size() - 1), '-') << "\n";
    }
  }
  return out.str();
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double one = 0, five = 0, fifteen = 0;
  if (!(in >> one >> five >> fifteen)) return "load average unknown";
  return fmt::format("load average {:.2f} {:.2f} {:.2f} on {} CPUs", one, five, fifteen,
                     sysconf(_SC_NPROCESSORS_ONLN));
}

std::string Mib(int64_t bytes) {
  return fmt::format("{:.1f}", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

}  // namespace baton::bench
