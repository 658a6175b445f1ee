// A worker's (or the launcher's) connection to the coordinator: join and get the plan, key-value
// rendezvous, barriers, reports and heartbeats, and abort in both directions. Protocol:
// docs/protocol.md.
//
// Every RPC carries the job token and a deadline (the call's own timeout plus
// `rpc_timeout`), so nothing waits forever. Errors are thrown as baton::Error naming the
// coordinator, the call and the server's message; an ABORTED answer also marks this client
// aborted.
//
// Ownership and threads: the client owns its channel and up to two background threads (the
// heartbeat started by StartHeartbeat, the abort watch started by Watch). All methods are
// thread-safe. Abort callbacks run once, on whichever thread learns of the abort first (watch,
// heartbeat, or a call that got ABORTED); they must be quick and must not destroy the client.
// The destructor stops both threads.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/coordinator_types.h"
#include "core/timeouts.h"

namespace baton {

struct CoordinatorClientOptions {
  // How long the constructor tries to reach the coordinator (it may still be starting).
  std::chrono::milliseconds connect_timeout{kDefaultCoordinatorWait};
  // Added to each call's own timeout to form its gRPC deadline.
  std::chrono::milliseconds rpc_timeout{kDefaultCoordinatorWait};
  // With no successful heartbeat or watch for this long, the client gives up on the coordinator
  // and aborts locally ("lost contact with the coordinator").
  std::chrono::milliseconds lost_coordinator_timeout{kDefaultCoordinatorWait};
};

class CoordinatorClient {
 public:
  // Connects to `address` ("host:port"); throws baton::Error if it is unreachable within
  // options.connect_timeout.
  CoordinatorClient(const std::string& address, const std::string& token,
                    const CoordinatorClientOptions& options = {});
  ~CoordinatorClient();
  CoordinatorClient(const CoordinatorClient&) = delete;
  CoordinatorClient& operator=(const CoordinatorClient&) = delete;

  // Joins as info.rank and returns the plan bytes (a serialized baton.pb.JobPlan). Throws with
  // the coordinator's reason when refused (rank taken or out of range, other job, wrong token).
  std::string Join(const JoinInfo& info);
  int rank() const;  // -1 before Join

  void KvSet(const std::string& key, const std::string& value);
  // Blocks until `key` is set; throws on timeout naming the key.
  std::string KvGet(const std::string& key, std::chrono::milliseconds timeout);
  void KvWait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  // Returns once every rank has entered barrier `name` (names may be reused in sequence).
  // Throws on timeout naming the ranks that did not arrive. Needs Join first.
  void Barrier(const std::string& name, std::chrono::milliseconds timeout);

  // Sends `report` now (rank filled in) and keeps it as the heartbeat payload. A kFailed report
  // makes the coordinator abort the job.
  void Report(const WorkerReport& report);
  // Sends the latest report every `interval` from a background thread, with the current blocked
  // action; learns of an abort from the answer. Needs Join first.
  void StartHeartbeat(std::chrono::milliseconds interval);
  // The action this worker now waits on (hang diagnosis); heartbeats carry it, with the time
  // waited so far, until ClearBlocked(). Cheap: call around every blocking wait.
  void SetBlocked(const std::string& action, int micro_batch, int peer_rank);
  void ClearBlocked();

  // Starts the abort watch: a server stream on which the coordinator pushes the abort (or its
  // shutdown, treated as an abort). Needs Join first.
  void Watch();
  // Registers a callback for the abort; runs at once if the client is already aborted.
  void OnAbort(std::function<void(const std::string& reason)> callback);
  // Asks the coordinator to abort the job for everyone.
  void RequestAbort(const std::string& reason, int stage = -1);

  // Agents (mpirun / srun, job/agent.h), which supervise `rank`'s worker process and need
  // no Join:
  // Blocks until attempt `attempt` is aborted or over (returns why), the exit of `rank`'s worker
  // of that attempt has been reported, or `timeout` passes (both nullopt).
  std::optional<std::string> AwaitAbort(int rank, int attempt, std::chrono::milliseconds timeout);
  // Reports how `exit.rank`'s worker of `attempt` exited (a failure aborts the attempt) and waits
  // up to `timeout` for what comes next; kPending: ask again.
  JobNext ReportWorkerExit(int attempt, const WorkerExit& exit, std::chrono::milliseconds timeout);

  // True once the abort is known and every callback registered before it has run.
  bool aborted() const;
  std::string abort_reason() const;
  // Blocks until aborted() (true) or the timeout passes (false).
  bool WaitForAbort(std::chrono::milliseconds timeout) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton
