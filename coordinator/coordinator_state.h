// The coordinator's state machine, free of gRPC transport code: joins, the key-value store,
// barriers, reports, liveness and abort. coordinator_server.cc exposes it as the gRPC service.
//
// Blocking calls wait on one condition variable, waking on any change, every 100 ms to poll their
// `cancelled` callback (the client went away), and at their deadline. Thread-safe.
#pragma once

#include <grpcpp/support/status.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "coordinator/coordinator_server.h"
#include "coordinator/coordinator_types.h"
#include "core/units.h"

namespace baton {

class CoordinatorState {
 public:
  using Cancelled = std::function<bool()>;

  explicit CoordinatorState(const CoordinatorOptions& options);

  bool TokenMatches(std::string_view token) const;

  grpc::Status Join(const JoinInfo& info, std::string* plan);
  grpc::Status KvSet(const std::string& key, const std::string& value);
  grpc::Status KvGet(const std::string& key, Clock::time_point deadline, const Cancelled& cancelled,
                     std::string* value);
  grpc::Status KvWait(const std::vector<std::string>& keys, Clock::time_point deadline,
                      const Cancelled& cancelled);
  grpc::Status Barrier(const std::string& name, int rank, Clock::time_point deadline,
                       const Cancelled& cancelled);
  // Records the report (and heartbeat); a kFailed report aborts the job. Sets *abort_reason to
  // the abort reason when the job is aborting, else clears it.
  grpc::Status Report(const WorkerReport& report, std::string* abort_reason);

  // Blocks until the job aborts (returns true, *reason set), the coordinator shuts down (false,
  // *reason set) or `cancelled` (false, reason empty; the stream dropped: a dead worker if it was
  // still running and abort_on_disconnect).
  grpc::Status WatchRank(int rank, const Cancelled& cancelled, bool* abort, std::string* reason);

  // Agents (mpirun / srun): see CoordinatorServer and docs/protocol.md, "Agents".
  // Blocks until `attempt` is aborted or over (true, *reason set), `rank`'s exit of it has been
  // reported, or the deadline (false).
  grpc::Status AwaitAbort(int rank, int attempt, Clock::time_point deadline,
                          const Cancelled& cancelled, bool* aborted, std::string* reason);
  // Records how `rank`'s worker of `attempt` exited (a failed exit of the current attempt aborts
  // it), then blocks until the job moves past `attempt` or ends, or the deadline (kPending).
  grpc::Status WorkerExited(int attempt, const WorkerExit& exit, Clock::time_point deadline,
                            const Cancelled& cancelled, JobNext* next);
  std::vector<WorkerExit> WorkerExits() const;
  std::vector<int> WaitForWorkerExits(std::chrono::milliseconds timeout);
  void EndJob(bool succeeded, const std::string& reason);
  bool ended() const;
  bool WaitForAgentsToLearnTheEnd(std::chrono::milliseconds timeout);
  int attempt() const;

  void Abort(const std::string& reason);
  bool aborted() const;
  std::string abort_reason() const;
  int abort_rank() const;
  // Declares dead the running ranks not heard from within the heartbeat timeout, and aborts.
  void CheckLiveness();
  void WaitForAllJoined(std::chrono::milliseconds timeout);
  std::vector<RankState> Ranks() const;
  uint64_t WaitForUpdate(uint64_t seen, std::chrono::milliseconds timeout) const;
  bool AllDone() const;
  std::vector<WorkerReport> TakeStepReports();
  // Starts the next attempt (attempt() grows by one) with `plan`.
  void Reset(const std::string& plan);
  void Shutdown();

 private:
  struct Rank {
    JoinInfo info;
    bool joined = false;
    bool has_report = false;
    WorkerReport report;
    Clock::time_point last_heard;
    bool dead = false;
    int watches = 0;             // live Watch streams
    int64_t last_kept_step = 0;  // keep_step_reports: the step of the last report kept
    bool stepped = false;        // it reported a step (metrics): start-up is behind it
  };
  struct BarrierState {
    uint64_t generation = 0;
    std::set<int> arrived;
  };

  // Waits until `done()` or abort/shutdown/cancel/deadline; returns OK only when done() holds.
  // `what` names the wait in the DEADLINE_EXCEEDED message.
  grpc::Status WaitLocked(std::unique_lock<std::mutex>& lock, Clock::time_point deadline,
                          const Cancelled& cancelled, const std::function<bool()>& done,
                          const std::function<std::string()>& what);
  grpc::Status CheckRankLocked(int rank) const;
  // `rank`: the rank whose failure report, exit or silence aborted the job (-1: none).
  void AbortLocked(const std::string& reason, int rank = -1);
  void DeclareDeadLocked(int rank, const std::string& why);
  std::string DescribeLocked(int rank) const;
  void ChangedLocked();

  const CoordinatorOptions options_;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::string plan_;
  std::vector<Rank> ranks_;
  std::map<std::string, std::string> kv_;
  std::map<std::string, std::shared_ptr<BarrierState>> barriers_;
  std::vector<WorkerReport> step_reports_;  // keep_step_reports: not yet taken
  bool aborted_ = false;
  std::string abort_reason_;
  int abort_rank_ = -1;
  bool shutting_down_ = false;
  uint64_t version_ = 0;
  int attempt_ = 0;  // grows on Reset(): calls of an earlier attempt fail
  // Agents: the worker exits reported for this attempt (arrival order), the job's end, and the
  // ranks whose agents have been told of it.
  std::vector<WorkerExit> exits_;
  bool ended_ = false;
  bool succeeded_ = false;
  std::string end_reason_;
  std::set<int> told_end_;
};

}  // namespace baton
