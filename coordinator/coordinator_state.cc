// The coordinator's state machine (see coordinator_state.h).
#include "coordinator/coordinator_state.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/error.h"
#include "core/units.h"

namespace baton {
namespace {

using grpc::Status;
using grpc::StatusCode;

constexpr auto kPollInterval = std::chrono::milliseconds(100);

std::string JoinRanks(const std::vector<int>& ranks) {
  return fmt::format("{}", fmt::join(ranks, ", "));
}

}  // namespace

CoordinatorState::CoordinatorState(const CoordinatorOptions& options)
    : options_(options), plan_(options.plan), ranks_(std::max(options.world_size, 0)) {
  BATON_CHECK(options.world_size > 0, "world size must be positive, got {}", options.world_size);
  BATON_CHECK(!options.token.empty(), "the coordinator needs a job token");
}

bool CoordinatorState::TokenMatches(std::string_view token) const {
  // Constant-time comparison: the token is a secret.
  const std::string& expected = options_.token;
  if (token.size() != expected.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < token.size(); ++i) diff |= token[i] ^ expected[i];
  return diff == 0;
}

void CoordinatorState::ChangedLocked() {
  ++version_;
  changed_.notify_all();
}

std::string CoordinatorState::DescribeLocked(int rank) const {
  if (!ranks_[rank].has_report) return DescribeRank(rank, -1);
  const WorkerReport& report = ranks_[rank].report;
  return DescribeRank(rank, report.stage, report.replica, report.tensor);
}

Status CoordinatorState::CheckRankLocked(int rank) const {
  if (rank < 0 || rank >= options_.world_size) {
    return Status(
        StatusCode::INVALID_ARGUMENT,
        fmt::format("rank {} is outside the world of {} ranks", rank, options_.world_size));
  }
  return Status::OK;
}

Status CoordinatorState::Join(const JoinInfo& info, std::string* plan) {
  std::lock_guard lock(mutex_);
  if (info.job_id != options_.job_id) {
    return Status(StatusCode::FAILED_PRECONDITION,
                  fmt::format("rank {} asked to join job '{}' but this coordinator runs job '{}' "
                              "(a worker of another job?)",
                              info.rank, info.job_id, options_.job_id));
  }
  if (info.world_size != options_.world_size) {
    return Status(StatusCode::INVALID_ARGUMENT,
                  fmt::format("rank {} expects a world of {} ranks but the job has {}", info.rank,
                              info.world_size, options_.world_size));
  }
  if (Status status = CheckRankLocked(info.rank); !status.ok()) return status;
  if (info.attempt != attempt_) {
    return Status(StatusCode::FAILED_PRECONDITION,
                  fmt::format("rank {} was started for attempt {} but the job is at attempt {} "
                              "(a worker of another attempt?)",
                              info.rank, info.attempt, attempt_));
  }
  if (aborted_) return Status(StatusCode::ABORTED, "job aborted: " + abort_reason_);
  Rank& entry = ranks_[info.rank];
  if (entry.joined) {
    return Status(StatusCode::ALREADY_EXISTS,
                  fmt::format("rank {} already joined (host {}, pid {}); this join came from host "
                              "{}, pid {}",
                              info.rank, entry.info.host, entry.info.pid, info.host, info.pid));
  }
  entry = Rank{};
  entry.info = info;
  entry.joined = true;
  entry.last_heard = Clock::now();
  *plan = plan_;
  spdlog::debug("coordinator: rank {} joined from {} pid {} ({})", info.rank, info.host, info.pid,
                info.device);
  ChangedLocked();
  return Status::OK;
}

Status CoordinatorState::KvSet(const std::string& key, const std::string& value) {
  std::lock_guard lock(mutex_);
  kv_[key] = value;
  ChangedLocked();
  return Status::OK;
}

Status CoordinatorState::WaitLocked(std::unique_lock<std::mutex>& lock, Clock::time_point deadline,
                                    const Cancelled& cancelled, const std::function<bool()>& done,
                                    const std::function<std::string()>& what) {
  const int attempt = attempt_;
  while (true) {
    if (attempt_ != attempt) return Status(StatusCode::ABORTED, "the job was reset for a restart");
    if (done()) break;
    if (aborted_) return Status(StatusCode::ABORTED, "job aborted: " + abort_reason_);
    if (shutting_down_) return Status(StatusCode::UNAVAILABLE, "the coordinator is shutting down");
    if (cancelled && cancelled()) return Status(StatusCode::CANCELLED, "the call was cancelled");
    auto now = Clock::now();
    if (now >= deadline) return Status(StatusCode::DEADLINE_EXCEEDED, what());
    changed_.wait_until(lock, std::min(deadline, now + kPollInterval));
  }
  return Status::OK;
}

Status CoordinatorState::KvGet(const std::string& key, Clock::time_point deadline,
                               const Cancelled& cancelled, std::string* value) {
  std::unique_lock lock(mutex_);
  auto start = Clock::now();
  Status status = WaitLocked(
      lock, deadline, cancelled, [&] { return kv_.count(key) > 0; },
      [&] {
        return fmt::format("key '{}' was not set within {:.1f} s", key,
                           Seconds(Clock::now() - start));
      });
  if (status.ok()) *value = kv_.at(key);
  return status;
}

Status CoordinatorState::KvWait(const std::vector<std::string>& keys, Clock::time_point deadline,
                                const Cancelled& cancelled) {
  std::unique_lock lock(mutex_);
  auto start = Clock::now();
  auto missing = [&] {
    std::vector<std::string> out;
    for (const auto& key : keys) {
      if (!kv_.count(key)) out.push_back(key);
    }
    return out;
  };
  return WaitLocked(
      lock, deadline, cancelled, [&] { return missing().empty(); },
      [&] {
        return fmt::format("keys {} were not set within {:.1f} s", fmt::join(missing(), ", "),
                           Seconds(Clock::now() - start));
      });
}

Status CoordinatorState::Barrier(const std::string& name, int rank, Clock::time_point deadline,
                                 const Cancelled& cancelled) {
  std::unique_lock lock(mutex_);
  if (Status status = CheckRankLocked(rank); !status.ok()) return status;
  std::shared_ptr<BarrierState>& slot = barriers_[name];
  if (!slot) slot = std::make_shared<BarrierState>();
  std::shared_ptr<BarrierState> held = slot;  // survives a Reset() while waiting
  BarrierState& barrier = *held;
  if (!barrier.arrived.insert(rank).second) {
    return Status(StatusCode::INVALID_ARGUMENT,
                  fmt::format("rank {} entered barrier '{}' twice", rank, name));
  }
  if (static_cast<int>(barrier.arrived.size()) == options_.world_size) {
    barrier.generation++;
    barrier.arrived.clear();
    ChangedLocked();
    return Status::OK;
  }
  const uint64_t generation = barrier.generation;
  auto start = Clock::now();
  auto missing = [&] {
    std::vector<int> out;
    for (int r = 0; r < options_.world_size; ++r) {
      if (!barrier.arrived.count(r)) out.push_back(r);
    }
    return out;
  };
  Status status = WaitLocked(
      lock, deadline, cancelled, [&] { return barrier.generation != generation; },
      [&] {
        return fmt::format("barrier '{}' timed out after {:.1f} s waiting for ranks {}", name,
                           Seconds(Clock::now() - start), JoinRanks(missing()));
      });
  // Leaving without completing: withdraw, so the next attempt of this barrier counts right.
  if (!status.ok() && barrier.generation == generation) barrier.arrived.erase(rank);
  return status;
}

Status CoordinatorState::Report(const WorkerReport& report, std::string* abort_reason) {
  std::lock_guard lock(mutex_);
  if (Status status = CheckRankLocked(report.rank); !status.ok()) return status;
  Rank& entry = ranks_[report.rank];
  if (!entry.joined) {
    return Status(StatusCode::FAILED_PRECONDITION,
                  fmt::format("rank {} reported before joining", report.rank));
  }
  entry.last_heard = Clock::now();
  // A rank's first done or failed report is its last word for this attempt: a heartbeat or step
  // report that was in flight when it finished cannot turn it back to running (and then dead when
  // its process leaves).
  if (entry.has_report && entry.report.status != WorkerStatus::kRunning) {
    *abort_reason = aborted_ ? abort_reason_ : "";
    return Status::OK;
  }
  entry.report = report;
  entry.has_report = true;
  if (!report.metrics.empty()) entry.stepped = true;
  if (options_.keep_step_reports && report.status == WorkerStatus::kRunning &&
      report.step > entry.last_kept_step) {
    entry.last_kept_step = report.step;
    step_reports_.push_back(report);
  }
  if (report.status == WorkerStatus::kFailed && !aborted_) {
    AbortLocked(fmt::format("{} failed: {}",
                            DescribeRank(report.rank, report.stage, report.replica, report.tensor),
                            report.error.empty() ? "(no error text)" : report.error),
                report.rank);
  }
  ChangedLocked();
  *abort_reason = aborted_ ? abort_reason_ : "";
  return Status::OK;
}

Status CoordinatorState::WatchRank(int rank, const Cancelled& cancelled, bool* abort,
                                   std::string* reason) {
  std::unique_lock lock(mutex_);
  if (Status status = CheckRankLocked(rank); !status.ok()) return status;
  if (!ranks_[rank].joined) {
    return Status(StatusCode::FAILED_PRECONDITION,
                  fmt::format("rank {} must join before watching", rank));
  }
  const int attempt = attempt_;
  ranks_[rank].watches++;
  ChangedLocked();
  while (!aborted_ && !shutting_down_ && attempt_ == attempt && !cancelled()) {
    changed_.wait_for(lock, kPollInterval);
  }
  if (attempt_ == attempt) ranks_[rank].watches--;
  ChangedLocked();
  *abort = aborted_ && attempt_ == attempt;
  if (attempt_ != attempt) {
    *reason = "the job was reset for a restart";
  } else if (aborted_) {
    *reason = abort_reason_;
  } else if (shutting_down_) {
    *reason = "the coordinator is shutting down";
  } else {
    reason->clear();
    const Rank& entry = ranks_[rank];
    bool running = entry.joined && !entry.dead &&
                   (!entry.has_report || entry.report.status == WorkerStatus::kRunning);
    if (running && options_.abort_on_disconnect) {
      DeclareDeadLocked(rank, "lost its connection to the coordinator (did the process die?)");
    }
  }
  return Status::OK;
}

Status CoordinatorState::AwaitAbort(int rank, int attempt, Clock::time_point deadline,
                                    const Cancelled& cancelled, bool* aborted,
                                    std::string* reason) {
  std::unique_lock lock(mutex_);
  if (Status status = CheckRankLocked(rank); !status.ok()) return status;
  const auto exit_reported = [&] {
    return attempt_ == attempt &&
           std::any_of(exits_.begin(), exits_.end(), [&](const auto& e) { return e.rank == rank; });
  };
  // A failed end aborts the attempt; a successful one comes after every worker reported done.
  const auto over = [&] { return attempt_ != attempt || aborted_ || shutting_down_; };
  while (!over() && !exit_reported() && !(cancelled && cancelled()) && Clock::now() < deadline) {
    changed_.wait_until(lock, std::min(deadline, Clock::now() + kPollInterval));
  }
  *aborted = over();
  reason->clear();
  if (attempt_ != attempt) {
    *reason = fmt::format("attempt {} is over: the job is at attempt {}", attempt, attempt_);
  } else if (aborted_) {
    *reason = abort_reason_;
  } else if (shutting_down_) {
    *reason = "the coordinator is shutting down";
  }
  return Status::OK;
}

Status CoordinatorState::WorkerExited(int attempt, const WorkerExit& exit,
                                      Clock::time_point deadline, const Cancelled& cancelled,
                                      JobNext* next) {
  std::unique_lock lock(mutex_);
  if (Status status = CheckRankLocked(exit.rank); !status.ok()) return status;
  // Recorded once per rank and attempt (an agent asks again while the answer is pending); an
  // exit of an earlier attempt is old news.
  const bool known = std::any_of(exits_.begin(), exits_.end(),
                                 [&](const WorkerExit& e) { return e.rank == exit.rank; });
  if (attempt == attempt_ && !known) {
    exits_.push_back(exit);
    if (!exit.ok()) {
      AbortLocked(fmt::format("{} worker process {}", DescribeLocked(exit.rank), exit.Describe()),
                  exit.rank);
    }
    ChangedLocked();
  }
  while (attempt_ == attempt && !ended_ && !shutting_down_ && !(cancelled && cancelled()) &&
         Clock::now() < deadline) {
    changed_.wait_until(lock, std::min(deadline, Clock::now() + kPollInterval));
  }
  *next = JobNext{};
  if (ended_) {
    next->kind = JobNext::Kind::kEnd;
    next->succeeded = succeeded_;
    next->reason = end_reason_;
    told_end_.insert(exit.rank);
    ChangedLocked();
  } else if (attempt_ != attempt) {
    next->kind = JobNext::Kind::kRestart;
    next->attempt = attempt_;
  } else if (shutting_down_) {
    return Status(StatusCode::UNAVAILABLE, "the coordinator is shutting down");
  }
  return Status::OK;
}

std::vector<WorkerExit> CoordinatorState::WorkerExits() const {
  std::lock_guard lock(mutex_);
  return exits_;
}

std::vector<int> CoordinatorState::WaitForWorkerExits(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  const auto missing = [&] {
    std::vector<int> out;
    for (int r = 0; r < options_.world_size; ++r) {
      if (std::none_of(exits_.begin(), exits_.end(),
                       [&](const WorkerExit& e) { return e.rank == r; })) {
        out.push_back(r);
      }
    }
    return out;
  };
  changed_.wait_for(lock, timeout, [&] { return missing().empty() || ended_ || shutting_down_; });
  return missing();
}

void CoordinatorState::EndJob(bool succeeded, const std::string& reason) {
  std::lock_guard lock(mutex_);
  if (ended_) return;
  ended_ = true;
  succeeded_ = succeeded;
  end_reason_ = reason;
  if (!succeeded) AbortLocked(reason);
  ChangedLocked();
}

bool CoordinatorState::ended() const {
  std::lock_guard lock(mutex_);
  return ended_;
}

bool CoordinatorState::WaitForAgentsToLearnTheEnd(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] {
    return static_cast<int>(told_end_.size()) == options_.world_size || shutting_down_;
  });
}

int CoordinatorState::attempt() const {
  std::lock_guard lock(mutex_);
  return attempt_;
}

void CoordinatorState::AbortLocked(const std::string& reason, int rank) {
  if (aborted_) return;
  aborted_ = true;
  abort_reason_ = reason;
  abort_rank_ = rank;
  spdlog::warn("coordinator: aborting the job: {}", reason);
  ChangedLocked();
}

void CoordinatorState::Abort(const std::string& reason) {
  std::lock_guard lock(mutex_);
  AbortLocked(reason);
}

bool CoordinatorState::aborted() const {
  std::lock_guard lock(mutex_);
  return aborted_;
}

std::string CoordinatorState::abort_reason() const {
  std::lock_guard lock(mutex_);
  return abort_reason_;
}

int CoordinatorState::abort_rank() const {
  std::lock_guard lock(mutex_);
  return abort_rank_;
}

void CoordinatorState::DeclareDeadLocked(int rank, const std::string& why) {
  Rank& entry = ranks_[rank];
  entry.dead = true;
  std::string reason = fmt::format("{} {}", DescribeLocked(rank), why);
  if (entry.has_report && entry.report.blocked) {
    reason += fmt::format(" (last blocked on {})", entry.report.blocked->ToString());
  }
  AbortLocked(reason, rank);
  ChangedLocked();
}

void CoordinatorState::CheckLiveness() {
  if (options_.heartbeat_timeout_s <= 0) return;
  std::lock_guard lock(mutex_);
  if (shutting_down_ || aborted_) return;  // after an abort, silence is expected
  auto now = Clock::now();
  for (int rank = 0; rank < options_.world_size; ++rank) {
    const Rank& entry = ranks_[rank];
    if (!entry.joined || entry.dead) continue;
    if (entry.has_report && entry.report.status != WorkerStatus::kRunning) continue;
    const double silent_s = Seconds(now - entry.last_heard);
    const double bound = entry.stepped
                             ? options_.heartbeat_timeout_s
                             : std::max(options_.heartbeat_timeout_s, options_.startup_silence_s);
    if (silent_s > bound) {
      DeclareDeadLocked(
          rank, fmt::format("sent no heartbeat for {:.1f} s (timeout {:.1f} s{})", silent_s, bound,
                            entry.stepped ? "" : ", while starting"));
    }
  }
}

void CoordinatorState::WaitForAllJoined(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  auto missing = [&] {
    std::vector<int> out;
    for (int r = 0; r < options_.world_size; ++r) {
      if (!ranks_[r].joined) out.push_back(r);
    }
    return out;
  };
  Status status = WaitLocked(
      lock, Clock::now() + timeout, nullptr, [&] { return missing().empty(); },
      [&] {
        return fmt::format("ranks {} did not join within {:.1f} s", JoinRanks(missing()),
                           Seconds(timeout));
      });
  if (!status.ok()) BATON_FAIL("waiting for workers to join: {}", status.error_message());
}

std::vector<RankState> CoordinatorState::Ranks() const {
  std::lock_guard lock(mutex_);
  auto now = Clock::now();
  std::vector<RankState> out;
  for (int rank = 0; rank < options_.world_size; ++rank) {
    const Rank& entry = ranks_[rank];
    RankState state;
    state.rank = rank;
    state.joined = entry.joined;
    state.host = entry.info.host;
    state.pid = entry.info.pid;
    state.device = entry.info.device;
    state.has_report = entry.has_report;
    state.report = entry.report;
    state.seconds_since_heard = entry.joined ? Seconds(now - entry.last_heard) : 0;
    state.dead = entry.dead;
    state.watching = entry.watches > 0;
    out.push_back(std::move(state));
  }
  return out;
}

uint64_t CoordinatorState::WaitForUpdate(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return version_ > seen || shutting_down_; });
  return version_;
}

bool CoordinatorState::AllDone() const {
  std::lock_guard lock(mutex_);
  return std::all_of(ranks_.begin(), ranks_.end(), [](const Rank& entry) {
    return entry.has_report && entry.report.status == WorkerStatus::kDone;
  });
}

std::vector<WorkerReport> CoordinatorState::TakeStepReports() {
  std::lock_guard lock(mutex_);
  std::vector<WorkerReport> taken;
  taken.swap(step_reports_);
  return taken;
}

void CoordinatorState::Reset(const std::string& plan) {
  std::lock_guard lock(mutex_);
  plan_ = plan;
  ranks_.assign(options_.world_size, Rank{});
  kv_.clear();
  barriers_.clear();
  step_reports_.clear();
  aborted_ = false;
  abort_reason_.clear();
  abort_rank_ = -1;
  exits_.clear();
  attempt_++;
  ChangedLocked();
}

void CoordinatorState::Shutdown() {
  std::lock_guard lock(mutex_);
  shutting_down_ = true;
  ChangedLocked();
}

}  // namespace baton
