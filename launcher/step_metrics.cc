#include "launcher/step_metrics.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>

#include "core/error.h"
#include "core/files.h"
#include "core/units.h"

namespace baton {
namespace {

using nlohmann::json;

double Metric(const std::map<std::string, double>& values, const std::string& key) {
  const auto it = values.find(key);
  return it == values.end() ? std::nan("") : it->second;
}

// "2024-05-01T12:34:56.789Z"
std::string IsoUtc(std::chrono::system_clock::time_point time) {
  const auto since_epoch = time.time_since_epoch();
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch - seconds);
  const std::time_t t = static_cast<std::time_t>(seconds.count());
  std::tm utc{};
  gmtime_r(&t, &utc);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", utc.tm_year + 1900,
                     utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                     millis.count());
}

}  // namespace

StepAssembler::StepAssembler(const ParallelLayout& layout, int head_rank, int attempt)
    : layout_(layout), head_rank_(head_rank), attempt_(attempt) {}

std::vector<JobStep> StepAssembler::Add(const std::vector<WorkerReport>& reports) {
  for (const WorkerReport& r : reports) {
    Pending& p = pending_[r.step];
    p.step.step = r.step;
    p.step.attempt = attempt_;
    p.step.memory_peak[r.rank] = r.memory_peak;
    p.step.rank_keys[r.rank] = layout_.MetricsKey(r.rank);
    for (auto it = r.metrics.lower_bound("experts/");
         it != r.metrics.end() && it->first.starts_with("experts/"); ++it) {
      p.step.experts[it->first] += it->second;
    }
    p.reported.insert(r.rank);
    if (r.rank == head_rank_) {
      p.step.head = r;
      p.has_head = true;
    }
  }
  // Every rank reports its steps in order, so a complete step has no incomplete one before it.
  std::vector<JobStep> complete;
  while (!pending_.empty()) {
    Pending& first = pending_.begin()->second;
    if (!first.has_head || static_cast<int>(first.reported.size()) < layout_.world_size()) break;
    complete.push_back(std::move(first.step));
    pending_.erase(pending_.begin());
  }
  return complete;
}

std::vector<JobStep> StepAssembler::Flush() {
  std::vector<JobStep> out;
  for (auto& [step, p] : pending_) {
    if (p.has_head) out.push_back(std::move(p.step));
  }
  pending_.clear();
  return out;
}

namespace {

// What the head rank reported for a step: the figures the report and metrics.jsonl share.
json HeadFields(const JobStep& step) {
  const WorkerReport& h = step.head;
  json j = {{"step", step.step},
            {"loss", h.loss},
            {"lr", Metric(h.metrics, "lr")},
            {"grad_norm", Metric(h.metrics, "grad_norm")},
            {"tokens_per_s", Metric(h.metrics, "tokens_per_s")},
            {"loss_scale", Metric(h.metrics, "loss_scale")},
            {"skipped", Metric(h.metrics, "skipped") > 0.0}};
  // Steps after which the held-out data was evaluated (train.eval_every) carry its loss.
  if (h.metrics.count("eval_loss") > 0) j["eval_loss"] = h.metrics.at("eval_loss");
  return j;
}

}  // namespace

json ExpertsJson(const JobStep& step) {
  json out = json::object();
  for (const auto& [key, value] : step.experts) {  // "experts/<layer>/<figure>[/<expert>]"
    const size_t layer_end = key.find('/', 8);
    if (layer_end == std::string::npos) continue;
    json& layer = out[key.substr(8, layer_end - 8)];
    const std::string figure = key.substr(layer_end + 1);
    if (figure.starts_with("load/")) {
      const size_t e = std::stoul(figure.substr(5));
      json& loads = layer["tokens_per_expert"];
      while (loads.size() <= e) loads.push_back(0);
      loads[e] = static_cast<int64_t>(value);
    } else {
      layer[figure] = value;
    }
  }
  for (auto& [name, layer] : out.items()) {
    const double microbatches = layer.value("microbatches", 0.0);
    for (const char* loss : {"aux_loss", "z_loss"}) {
      layer[loss] = microbatches > 0 ? layer.value(loss, 0.0) / microbatches : 0.0;
    }
    layer.erase("microbatches");
    layer["tokens"] = static_cast<int64_t>(layer.value("tokens", 0.0));
    layer["dropped"] = static_cast<int64_t>(layer.value("dropped", 0.0));
    double total = 0, busiest = 0;
    const json loads = layer.value("tokens_per_expert", json::array());
    for (const json& load : loads) {
      total += load.get<double>();
      busiest = std::max(busiest, load.get<double>());
    }
    layer["max_over_mean"] =
        total > 0 ? busiest / (total / static_cast<double>(loads.size())) : 0.0;
  }
  return out;
}

std::vector<std::string> ExpertCollapseWatch::Update(const JobStep& step) {
  std::vector<std::string> collapsed;
  const json experts = ExpertsJson(step);
  for (const auto& [name, layer] : experts.items()) {
    const double tokens = layer.at("tokens").get<double>();
    double busiest = 0;
    for (const json& load : layer.value("tokens_per_expert", json::array())) {
      busiest = std::max(busiest, load.get<double>());
    }
    int& streak = streak_[name];
    streak = tokens > 0 && busiest > kCollapseShare * tokens ? streak + 1 : 0;
    if (streak >= kCollapseSteps && warned_.insert(name).second) collapsed.push_back(name);
  }
  return collapsed;
}

json ReportStepJson(const JobStep& step) {
  const WorkerReport& h = step.head;
  json j = HeadFields(step);
  j["step_s"] = Metric(h.timings_s, "step");
  j["compute_s"] = Metric(h.timings_s, "compute");
  j["wait_s"] = Metric(h.timings_s, "wait");
  if (h.timings_s.count("allreduce") > 0) j["allreduce_s"] = h.timings_s.at("allreduce");
  // Tensor parallelism: what the head rank summed over its tensor group, and how long it took.
  if (h.metrics.count("tensor_bytes") > 0) j["tensor_bytes"] = h.metrics.at("tensor_bytes");
  if (h.timings_s.count("tensor") > 0) j["tensor_s"] = h.timings_s.at("tensor");
  // Expert parallelism: what the head rank's experts' all-to-alls sent, and how long they took.
  if (h.metrics.count("alltoall_bytes") > 0) j["alltoall_bytes"] = h.metrics.at("alltoall_bytes");
  if (h.timings_s.count("alltoall") > 0) j["alltoall_s"] = h.timings_s.at("alltoall");
  // Steps that saved a checkpoint: what the save cost the step (output.async_checkpoint: the
  // copy into host buffers, and any wait for the previous write).
  if (h.timings_s.count("checkpoint") > 0) j["checkpoint_s"] = h.timings_s.at("checkpoint");
  if (!step.experts.empty()) j["experts"] = ExpertsJson(step);
  j["memory_peak"] = h.memory_peak;
  return j;
}

json MetricsLine(const JobStep& step, std::chrono::system_clock::time_point time,
                 double elapsed_s) {
  json memory = json::object();
  for (const auto& [rank, peaks] : step.memory_peak) {
    const auto key = step.rank_keys.find(rank);
    memory[key != step.rank_keys.end() ? key->second : fmt::format("stage{}", rank)] = peaks;
  }
  json j = HeadFields(step);
  j["attempt"] = step.attempt;
  j["time"] = IsoUtc(time);
  j["elapsed_s"] = elapsed_s;
  if (!step.experts.empty()) j["experts"] = ExpertsJson(step);
  j["memory_peak"] = memory;
  return j;
}

MetricsLog::MetricsLog(const std::string& dir, bool append, bool tensorboard)
    : path_(dir + "/metrics.jsonl"), start_(Clock::now()) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  BATON_CHECK(!error, "cannot create the output directory {}: {}", dir, error.message());
  // Never through a planted link: a fresh run replaces what is there, a resumed one appends only
  // to a regular file of its own (core/files.h).
  fd_ = OpenOutputFile(path_, append ? OutputMode::kAppend : OutputMode::kReplace);
  if (tensorboard) tensorboard_ = std::make_unique<TensorBoardLog>(dir + "/tensorboard");
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) close(fd_);
}

void MetricsLog::Write(const JobStep& step) {
  const double elapsed_s = Seconds(Clock::now() - start_);
  const std::string line = MetricsLine(step, std::chrono::system_clock::now(), elapsed_s)
                               .dump(-1, ' ', false, json::error_handler_t::replace) +
                           "\n";
  // O_APPEND: each write lands at the end as one piece; WriteAll loops only for a short write.
  WriteAll(fd_, line.data(), line.size(), path_);
  if (tensorboard_) tensorboard_->Write(step);
}

}  // namespace baton
