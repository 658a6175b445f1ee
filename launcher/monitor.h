// Watches a running job through the coordinator: assembles every step from the ranks' per-step
// reports (the coordinator must keep them: CoordinatorOptions::keep_step_reports), appends each
// to metrics.jsonl as it completes, prints one merged progress line per logged step, and notices
// failure — a worker that reported an error, was declared dead, or whose process exited (seen by
// the local launcher, or reported by the rank's agent under mpirun / srun) — naming the stage and
// what it was doing.
#pragma once

#include <spdlog/logger.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/coordinator_server.h"
#include "core/units.h"
#include "job/process.h"
#include "launcher/step_metrics.h"
#include "plan/parallel_layout.h"

namespace baton {

struct MonitorOptions {
  ParallelLayout layout;  // every rank of the job: stages x tensor ranks x replicas
  int head_rank = 0;      // the rank whose reports carry the loss
  int64_t total_steps = 0;
  int64_t log_every = 10;
  int attempt = 0;  // restarts so far (--max-restarts), recorded with every step
  // After a failure, how long to wait for the exit of the worker that caused it (it ends as soon
  // as a cause has exited, or every worker).
  std::chrono::milliseconds cause_wait{2000};
};

// Tensor parallelism's groups are consecutive ranks (ParallelLayout), and they sum activations
// every layer and micro-batch: they belong on one node. Once every rank has joined, the groups
// whose ranks report different hosts, as a warning naming them and the hosts; nullopt when each
// group is on one host (or the layout has no tensor ranks, or a rank has not joined).
std::optional<std::string> TensorGroupsAcrossHosts(const std::vector<RankState>& ranks,
                                                   const ParallelLayout& layout);

class JobMonitor {
 public:
  // `children` may be null (mpirun / srun: the agents report their workers' exits to the
  // coordinator instead); `metrics` may be null (no metrics.jsonl). Both must outlive the monitor.
  JobMonitor(CoordinatorServer& server, ChildProcesses* children, MonitorOptions options,
             MetricsLog* metrics);

  // Blocks until every worker is done (returns nullopt) or the job fails (returns what failed,
  // with the rank table). Every step reported before it returns is logged.
  std::optional<std::string> Run();

  // The steps of this attempt, as the run report's `steps` entries (ReportStepJson), in order.
  const std::vector<nlohmann::json>& report_steps() const { return report_steps_; }

 private:
  // Takes the coordinator's new step reports and logs the steps they complete (every step with
  // the head's report, complete or not, when `flush`).
  void LogNewSteps(bool flush);
  void LogStep(const JobStep& step);
  void MaybePrintProgress(const JobStep& step);
  std::optional<std::string> CheckFailure(const std::vector<RankState>& ranks);
  // The worker exits that name the job's failure, described, once one of them is a cause (killed
  // by a signal, or died without reporting an error), every worker has exited, or `grace` is
  // over with one of them in; else nullopt. Counts those that exited well.
  std::optional<std::string> DeadChild(std::chrono::milliseconds grace);
  // Whether some failed exit is a cause, not a consequence of a peer's failure.
  bool CauseExited(const std::vector<RankState>& ranks) const;
  std::string DescribeDeadChild();
  // FormatRankTable with each exited rank's exit.
  std::string RankTable(const std::vector<RankState>& ranks) const;
  // Worker exits not seen before: reaped children, or the exits the agents reported.
  std::vector<WorkerExit> NewExits();

  CoordinatorServer& server_;
  ChildProcesses* children_;
  MonitorOptions options_;
  MetricsLog* metrics_;
  StepAssembler assembler_;
  ExpertCollapseWatch collapse_watch_;
  std::vector<nlohmann::json> report_steps_;
  std::shared_ptr<spdlog::logger> log_;
  bool hosts_checked_ = false;  // TensorGroupsAcrossHosts, once every rank has joined
  Clock::time_point start_ = Clock::now();
  int64_t first_step_ = 0;  // the first step this attempt printed, and when
  Clock::time_point first_step_time_;
  int64_t printed_step_ = 0;
  bool stop_forwarded_ = false;
  int exited_ok_ = 0;
  std::vector<WorkerExit> failed_;    // abnormal exits seen, in order
  std::map<int, std::string> exits_;  // rank -> how its worker exited, for the rank table
  size_t reported_exits_seen_ = 0;
};

}  // namespace baton
