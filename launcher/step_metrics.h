// The job's steps as the launcher sees them while training runs: every rank's per-step report
// (CoordinatorServer::TakeStepReports) assembled into one record per step, appended to
// `metrics.jsonl` the moment the step is complete, and kept for the run report's `steps`.
//
// Who writes metrics.jsonl: the process that hosts the coordinator and runs the JobMonitor (the
// launcher of a local run; rank 0 under mpirun / srun), so it lands beside the report under every
// launch mode. Formats: docs/outputs.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "coordinator/coordinator_types.h"
#include "core/units.h"
#include "launcher/tensorboard.h"
#include "plan/parallel_layout.h"

namespace baton {

// One step of the job: the head rank's report (loss, lr, grad norm, timings, its memory) and
// every rank's ledger peaks as reported at the end of that step.
struct JobStep {
  int64_t step = 0;
  int attempt = 0;  // 0 for the first attempt of this run, n after the n-th --max-restarts restart
  WorkerReport head;
  std::map<int, std::map<std::string, int64_t>> memory_peak;  // rank -> peaks by category
  // rank -> its key in metrics.jsonl's memory_peak: "stage1", or with data-parallel replicas or
  // tensor ranks "stage1_replica0", "stage1_tensor1", "stage1_replica0_tensor1".
  std::map<int, std::string> rank_keys;
  // Experts (model.moe): every rank's "experts/<layer>/<figure>" metrics, summed over the ranks
  // (the replicas of a layer's stage); ExpertsJson reads them.
  std::map<std::string, double> experts;
};

// The step's experts per MoE layer, for metrics.jsonl and report.json: {"block.3": {"tokens",
// "tokens_per_expert" [E], "max_over_mean" (the busiest expert's load over the mean load),
// "dropped", "aux_loss", "z_loss" (the unweighted router losses, means over the micro-batches)}};
// empty without experts.
nlohmann::json ExpertsJson(const JobStep& step);

// Warns about a collapsed router: an MoE layer one expert of which takes more than
// kCollapseShare of the layer's tokens in kCollapseSteps consecutive steps. Each layer is named
// once per run.
class ExpertCollapseWatch {
 public:
  static constexpr double kCollapseShare = 0.9;
  static constexpr int kCollapseSteps = 10;
  // The layers that have just collapsed with this step (each returned once).
  std::vector<std::string> Update(const JobStep& step);

 private:
  std::map<std::string, int> streak_;
  std::set<std::string> warned_;
};

// Collects per-step reports (a rank's reports arrive in step order) into steps. A step is
// complete once every rank reported it; complete steps come out in step order.
// Not thread-safe.
class StepAssembler {
 public:
  // `layout`: the job's ranks (each step waits for all of them) and their metrics keys.
  StepAssembler(const ParallelLayout& layout, int head_rank, int attempt);

  // Adds reports; returns the steps they completed, in order.
  std::vector<JobStep> Add(const std::vector<WorkerReport>& reports);
  // The steps the head reported that still wait for other ranks (at the end of an attempt that
  // failed: a rank died before reporting them), in order; their missing ranks stay missing.
  std::vector<JobStep> Flush();

 private:
  struct Pending {
    JobStep step;
    bool has_head = false;
    std::set<int> reported;  // ranks
  };
  ParallelLayout layout_;
  int head_rank_;
  int attempt_;
  std::map<int64_t, Pending> pending_;  // by step
};

// The run report's entry for one step (the head rank's figures; keys as in docs/outputs.md, "The
// report").
nlohmann::json ReportStepJson(const JobStep& step);

// One metrics.jsonl line: the step, its attempt, the wall-clock `time` (UTC, ISO 8601, when the
// launcher received the step's last report) and `elapsed_s` since the run started.
nlohmann::json MetricsLine(const JobStep& step, std::chrono::system_clock::time_point time,
                           double elapsed_s);

// `DIR/metrics.jsonl`, written one line per step with a single write(2) each, so a process
// killed at any moment leaves every line written before (no fsync: a machine crash may lose the
// last lines the kernel had not written out). Owns the file descriptor; not copyable.
class MetricsLog {
 public:
  // Creates DIR if needed. A fresh run (`append` false) starts the file empty; a resumed run
  // appends to it. Throws naming the path when it cannot be opened.
  // With `tensorboard`, every step also goes to TensorBoard event files in DIR/tensorboard
  // (launcher/tensorboard.h; a resumed run starts a new file there).
  MetricsLog(const std::string& dir, bool append, bool tensorboard = false);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void Write(const JobStep& step);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  Clock::time_point start_;
  std::unique_ptr<TensorBoardLog> tensorboard_;
};

}  // namespace baton
