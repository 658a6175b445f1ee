// The coordinator: a gRPC server that workers join to get the plan, rendezvous through (key-value
// store, barriers), report to (heartbeats, progress, blocked actions), and learn of an abort from.
// The launcher (or rank 0 under mpirun) hosts it. Protocol: docs/protocol.md.
//
// Ownership and threads: CoordinatorServer owns the gRPC server, its handler threads and a liveness
// monitor thread. All methods are thread-safe. The destructor calls Shutdown().
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/coordinator_types.h"
#include "core/timeouts.h"
#include "core/units.h"

namespace baton {

struct CoordinatorOptions {
  // host:port to bind; port 0 picks a free port. Local runs bind loopback only; multi-node runs
  // pass the node's address (or 0.0.0.0).
  std::string address = "127.0.0.1:0";
  std::string token;   // the job's secret; every call must carry it (MakeJobToken())
  std::string job_id;  // joiners must name the same job
  int world_size = 1;
  std::string plan;  // bytes handed to every joiner (a serialized baton.pb.JobPlan)
  // A joined rank that neither reported nor heartbeat for this long is declared dead and the job
  // aborts. <= 0 disables the check.
  double heartbeat_timeout_s = Seconds(kDefaultHeartbeatTimeout);
  // The same bound for a rank that has not reported a step yet (still starting: building and
  // loading its stage, meeting its peers), when larger: hundreds of processes starting on few
  // cores go silent for longer than a training step does (`baton run` passes the start-up
  // timeout). <= heartbeat_timeout_s: heartbeat_timeout_s throughout.
  double startup_silence_s = 0;
  // A rank still running whose Watch stream drops (its process died) is declared dead at once.
  bool abort_on_disconnect = true;
  // Keep the first report of every new step of every rank until TakeStepReports() drains them
  // (the launcher's per-step metrics need every step, not only the latest report). The holder
  // must drain them; ResetJob() drops those not yet taken.
  bool keep_step_reports = false;
};

class CoordinatorServer {
 public:
  CoordinatorServer();
  ~CoordinatorServer();
  CoordinatorServer(const CoordinatorServer&) = delete;
  CoordinatorServer& operator=(const CoordinatorServer&) = delete;

  // Binds and starts serving; returns the bound port. Throws baton::Error if it cannot bind.
  int Start(const CoordinatorOptions& options);
  int port() const { return port_; }
  // "host:port" with the bound port, for clients.
  std::string address() const;

  // Blocks until every rank has joined. Throws baton::Error naming the missing ranks on timeout,
  // or the abort reason if the job aborts meanwhile.
  void WaitForAllJoined(std::chrono::milliseconds timeout);

  // Snapshot of every rank: join info, latest report, time since last heard, dead or not.
  std::vector<RankState> Ranks() const;
  std::optional<WorkerReport> LatestReport(int rank) const;

  // A counter that grows on every join, report, watch change and abort. WaitForUpdate blocks until
  // it exceeds `seen` (or the timeout passes) and returns it: a launcher's progress loop.
  uint64_t WaitForUpdate(uint64_t seen, std::chrono::milliseconds timeout) const;
  // True once every rank has reported WorkerStatus::kDone.
  bool AllDone() const;
  // With keep_step_reports: the reports that started a new step (a running rank's first report
  // with a higher step than its previous one; heartbeats repeat a report and are not kept), in
  // arrival order, since the last call. A rank's reports arrive in step order. Empty otherwise.
  std::vector<WorkerReport> TakeStepReports();

  // Aborts the job (first reason wins): every Watch stream and every later response carries it,
  // and blocked KV/barrier calls return ABORTED.
  void RequestAbort(const std::string& reason);
  bool aborted() const;
  std::string abort_reason() const;
  // The rank whose failure report, failed exit or silence caused the abort: the first cause in
  // time, where later failures are the abort's consequences. -1 when not aborted, or aborted by
  // RequestAbort.
  int abort_rank() const;

  // Forgets joins, keys, barriers, reports, worker exits and the abort, for a restart of all
  // workers (none of the previous attempt may still be running), and starts the next attempt:
  // attempt() grows by one, and only workers started for it may join. `plan` replaces the plan.
  void ResetJob(const std::string& plan);
  // 0, then one more for every ResetJob().
  int attempt() const;

  // mpirun / srun: every rank's agent (job/agent.h) reports how its worker of the current
  // attempt exited, and waits for what comes next: the next attempt (ResetJob) or the job's end.
  // The exits reported for this attempt, in arrival order.
  std::vector<WorkerExit> WorkerExits() const;
  // Blocks until every rank's exit of this attempt is reported, the job ended or `timeout`
  // passed; returns the ranks still missing.
  std::vector<int> WaitForWorkerExits(std::chrono::milliseconds timeout);
  // Ends the job (first call wins): agents are told that it succeeded, or that it failed and
  // why (which also aborts the attempt).
  void EndJob(bool succeeded, const std::string& reason);
  bool ended() const;
  // Blocks until every rank's agent has been told of the end (true) or `timeout` passes.
  bool WaitForAgentsToLearnTheEnd(std::chrono::milliseconds timeout);

  // Ends every stream (SHUTDOWN), wakes blocked calls and stops the server. Idempotent.
  void Shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

// A fresh random secret (32 hex digits) for CoordinatorOptions::token.
std::string MakeJobToken();

}  // namespace baton
