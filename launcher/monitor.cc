#include "launcher/monitor.h"

#include <fmt/ranges.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "core/stop_signals.h"
#include "core/units.h"

namespace baton {
namespace {
// "45s", "12m05s", "3h07m".
std::string Duration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
}

double Metric(const WorkerReport& report, const std::string& key) {
  const auto it = report.metrics.find(key);
  return it == report.metrics.end() ? std::nan("") : it->second;
}
}  // namespace

std::optional<std::string> TensorGroupsAcrossHosts(const std::vector<RankState>& ranks,
                                                   const ParallelLayout& layout) {
  const int tensor = layout.tensor();
  if (tensor <= 1) return std::nullopt;
  if (static_cast<int>(ranks.size()) != layout.world_size()) return std::nullopt;
  for (const RankState& r : ranks) {
    if (!r.joined) return std::nullopt;
  }
  std::vector<std::string> split;
  for (const std::vector<int>& group : layout.Groups(Axis::kTensor)) {
    std::vector<std::string> hosts;
    for (int r : group) {
      const std::string& host = ranks[static_cast<size_t>(r)].host;
      if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
    }
    if (hosts.size() > 1) {
      split.push_back(
          fmt::format("ranks {}-{} on {}", group.front(), group.back(), fmt::join(hosts, ", ")));
    }
  }
  if (split.empty()) return std::nullopt;
  return fmt::format(
      "{} of the job's tensor-parallel groups span hosts ({}): their ranks sum activations at "
      "every layer of every micro-batch, over the network. Start each node's ranks in runs of {} "
      "consecutive ranks (parallel.tensor), e.g. a multiple of {} ranks per node",
      split.size(), fmt::join(split, "; "), tensor, tensor);
}

JobMonitor::JobMonitor(CoordinatorServer& server, ChildProcesses* children, MonitorOptions options,
                       MetricsLog* metrics)
    : server_(server),
      children_(children),
      options_(options),
      metrics_(metrics),
      assembler_(options.layout, options.head_rank, options.attempt),
      log_(spdlog::default_logger()) {}

std::optional<std::string> JobMonitor::Run() {
  uint64_t seen = 0;
  while (true) {
    seen = server_.WaitForUpdate(seen, std::chrono::milliseconds(100));
    if (!StopRequested() && OutputClosed()) {
      RequestStop();  // logged below; the log may have nowhere to go
      log_->warn("the launcher's output was closed (a pipe whose reader exited): stopping");
    }
    if (children_ != nullptr && !stop_forwarded_ && StopRequested()) {
      log_->warn("stop requested: every stage finishes its step and writes a checkpoint");
      children_->SignalAll(SIGTERM);
      stop_forwarded_ = true;
    }
    const std::vector<RankState> ranks = server_.Ranks();
    if (!hosts_checked_ &&
        std::all_of(ranks.begin(), ranks.end(), [](const RankState& r) { return r.joined; })) {
      hosts_checked_ = true;
      if (auto across = TensorGroupsAcrossHosts(ranks, options_.layout)) log_->warn("{}", *across);
    }
    if (auto failure = CheckFailure(ranks)) {
      LogNewSteps(/*flush=*/true);
      return failure;
    }
    // Done is decided before the last reports are taken: a rank reports its last step before
    // it reports done, so nothing comes after.
    const bool children_done = children_ == nullptr || exited_ok_ == options_.layout.world_size();
    const bool done = server_.AllDone() && children_done;
    LogNewSteps(/*flush=*/done);
    if (done) return std::nullopt;
  }
}

void JobMonitor::LogNewSteps(bool flush) {
  for (const JobStep& step : assembler_.Add(server_.TakeStepReports())) LogStep(step);
  if (flush) {
    for (const JobStep& step : assembler_.Flush()) LogStep(step);
  }
}

void JobMonitor::LogStep(const JobStep& step) {
  if (metrics_ != nullptr) metrics_->Write(step);
  report_steps_.push_back(ReportStepJson(step));
  for (const std::string& layer : collapse_watch_.Update(step)) {
    log_->warn(
        "step {}: {}'s router has collapsed: one expert has taken over {:.0f}% of its tokens for "
        "{} steps (metrics.jsonl \"experts\"; a larger model.moe.aux_loss_coef balances them)",
        step.step, layer, ExpertCollapseWatch::kCollapseShare * 100,
        ExpertCollapseWatch::kCollapseSteps);
  }
  MaybePrintProgress(step);
}

std::vector<WorkerExit> JobMonitor::NewExits() {
  std::vector<WorkerExit> exits;
  if (children_ != nullptr) {
    while (std::optional<WorkerExit> exit = children_->Poll()) exits.push_back(*exit);
    return exits;
  }
  const std::vector<WorkerExit> reported = server_.WorkerExits();
  if (reported.size() > reported_exits_seen_) {
    exits.assign(reported.begin() + static_cast<std::ptrdiff_t>(reported_exits_seen_),
                 reported.end());
  }
  reported_exits_seen_ = reported.size();
  return exits;
}

namespace {

const RankState* ReportedFailure(const std::vector<RankState>& ranks, int rank) {
  for (const RankState& r : ranks) {
    if (r.rank == rank && r.has_report && r.report.status == WorkerStatus::kFailed) return &r;
  }
  return nullptr;
}

// 0: killed by a signal; 1: died without reporting an error (both causes); 2: reported its own
// failure, often a peer's consequence ("connection reset", "job aborted").
int Priority(const WorkerExit& e, const std::vector<RankState>& ranks) {
  if (e.signal != 0) return 0;
  return ReportedFailure(ranks, e.rank) == nullptr ? 1 : 2;
}

}  // namespace

bool JobMonitor::CauseExited(const std::vector<RankState>& ranks) const {
  return std::any_of(failed_.begin(), failed_.end(),
                     [&](const WorkerExit& e) { return Priority(e, ranks) < 2; });
}

std::optional<std::string> JobMonitor::DeadChild(std::chrono::milliseconds grace) {
  const auto deadline = Clock::now() + grace;
  while (true) {
    for (const WorkerExit& exit : NewExits()) {
      if (exit.ok()) {
        ++exited_ok_;
      } else {
        failed_.push_back(exit);
        exits_[exit.rank] = exit.Describe();
      }
    }
    if (!failed_.empty()) {
      // A peer's failure can be in before the exit of the worker whose death caused it (it died
      // first, its agent or the launcher saw it later): wait for a cause while others may come.
      const bool all_exited =
          exited_ok_ + static_cast<int>(failed_.size()) >= options_.layout.world_size();
      if (all_exited || CauseExited(server_.Ranks()) || Clock::now() >= deadline) {
        return DescribeDeadChild();
      }
    }
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// When one worker dies, its peers fail too ("connection reset", "job aborted") and may exit
// before the launcher looks: the cause is the one killed by a signal, else one that died without
// reporting an error, else the rank whose failure aborted the job first (the coordinator saw it
// first; it may not have exited yet), else the first that reported its own.
std::string JobMonitor::DescribeDeadChild() {
  const std::vector<RankState> ranks = server_.Ranks();  // fresher than the caller's
  const WorkerExit* cause = &failed_.front();
  for (const WorkerExit& e : failed_) {
    if (Priority(e, ranks) < Priority(*cause, ranks)) cause = &e;
  }
  if (Priority(*cause, ranks) == 2) {
    if (const RankState* first = ReportedFailure(ranks, server_.abort_rank())) {
      const auto exit = std::find_if(failed_.begin(), failed_.end(),
                                     [&](const WorkerExit& e) { return e.rank == first->rank; });
      const std::string how = exit == failed_.end() ? "still exiting" : exit->Describe();
      return fmt::format("{} failed ({}): {}\n{}", options_.layout.Who(first->rank), how,
                         first->report.error, RankTable(ranks));
    }
  }
  if (const RankState* r = ReportedFailure(ranks, cause->rank)) {
    return fmt::format("{} failed ({}): {}\n{}", options_.layout.Who(r->rank), cause->Describe(),
                       r->report.error, RankTable(ranks));
  }
  std::string doing = "not started";
  for (const RankState& r : ranks) {
    if (r.rank != cause->rank || !r.has_report) continue;
    doing = r.report.blocked ? "blocked on " + r.report.blocked->ToString()
                             : fmt::format("last finished step {}", r.report.step);
  }
  return fmt::format("{} worker process {} ({})\n{}", options_.layout.Who(cause->rank),
                     cause->Describe(), doing, RankTable(ranks));
}

std::string JobMonitor::RankTable(const std::vector<RankState>& ranks) const {
  return FormatRankTable(ranks, exits_);
}

std::optional<std::string> JobMonitor::CheckFailure(const std::vector<RankState>& ranks) {
  if (auto dead = DeadChild(std::chrono::milliseconds(0))) {
    // In at once only if it names a cause (or every worker is gone); else wait for one below.
    if (CauseExited(server_.Ranks()) ||
        exited_ok_ + static_cast<int>(failed_.size()) >= options_.layout.world_size()) {
      return dead;
    }
  }
  std::optional<std::string> failure;
  // The rank whose failure aborted the job came first; the others failed because of it.
  const RankState* first = ReportedFailure(ranks, server_.abort_rank());
  for (const RankState& r : ranks) {
    if (first == nullptr && r.has_report && r.report.status == WorkerStatus::kFailed) first = &r;
  }
  if (first != nullptr) {
    failure = fmt::format("{} failed: {}\n{}", options_.layout.Who(first->rank),
                          first->report.error, RankTable(ranks));
  }
  if (!failure && server_.aborted()) {
    failure = fmt::format("job aborted: {}\n{}", server_.abort_reason(), RankTable(ranks));
  }
  if (!failure && failed_.empty()) return std::nullopt;
  // A peer's "connection reset" can reach the coordinator before the launcher sees the child
  // whose death caused it (it is dead by then, just not yet reaped): the dead child is the
  // cause to name. A bound only; the wait ends as soon as a cause has exited.
  if (auto dead = DeadChild(options_.cause_wait)) return dead;
  return failure;
}

// Logged steps: the first of an attempt, each multiple of log_every, each evaluated one, and
// the last.
void JobMonitor::MaybePrintProgress(const JobStep& job_step) {
  const int64_t step = job_step.step;
  const int64_t every = std::max<int64_t>(1, options_.log_every);
  const WorkerReport& report = job_step.head;
  const auto eval = report.metrics.find("eval_loss");
  const bool evaluated = eval != report.metrics.end();
  const bool due = printed_step_ == 0 || step / every > printed_step_ / every ||
                   step == options_.total_steps || evaluated;
  if (step <= printed_step_ || !due) return;
  const auto now = Clock::now();
  if (printed_step_ == 0) {
    first_step_ = step;
    first_step_time_ = now;
  }
  printed_step_ = step;
  // Elapsed since this attempt's monitor started (start-up included); the ETA extrapolates the
  // pace since the attempt's first step, so start-up does not inflate it.
  std::string timing = fmt::format("{} elapsed", Duration(Seconds(now - start_)));
  if (step > first_step_ && step < options_.total_steps) {
    const double per_step =
        Seconds(now - first_step_time_) / static_cast<double>(step - first_step_);
    timing += fmt::format(", ETA {}",
                          Duration(per_step * static_cast<double>(options_.total_steps - step)));
  }
  // Each rank's peak: s<stage>, with r<replica> and t<tensor rank> when there are several.
  std::string memory;
  for (const auto& [rank, peaks] : job_step.memory_peak) {
    const auto total = peaks.find("total");
    if (total == peaks.end()) continue;
    memory += fmt::format(" {}={}", options_.layout.ShortPlace(rank), CompactBytes(total->second));
  }
  const std::string eval_part = evaluated ? fmt::format(" | eval {:.4f}", eval->second) : "";
  log_->info(
      "step {:>5}/{} | loss {:.4f}{} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s | {} | peak{}",
      step, options_.total_steps, report.loss, eval_part, Metric(report, "lr"),
      Metric(report, "grad_norm"), Metric(report, "tokens_per_s"), timing, memory);
}

}  // namespace baton
