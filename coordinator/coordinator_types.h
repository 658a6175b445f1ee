// Plain C++ mirrors of the coordinator's messages (join, reports, blocked actions, rank states), so
// that the launcher and the worker use the coordinator without including generated gRPC headers.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace baton {

// Who joins: sent once by every worker.
struct JoinInfo {
  int rank = 0;
  int world_size = 0;
  std::string host;  // the worker's host name, for messages
  int64_t pid = 0;
  std::string device;  // "cpu", "cuda:0"
  std::string job_id;  // must equal the coordinator's job id
  int attempt = 0;     // the attempt it was started for; must be the coordinator's current one
};

enum class WorkerStatus { kRunning, kDone, kFailed };
std::string_view Name(WorkerStatus status);  // "running", "done", "failed"

// What a worker is blocked on, for hang diagnosis: e.g. RECV_F of micro-batch 3 from rank 2.
struct BlockedAction {
  std::string action;    // "RECV_F", "SEND_B", "ALLREDUCE", "BARRIER", ...
  int micro_batch = -1;  // -1 when not about a micro-batch
  int peer_rank = -1;    // -1 when not about one peer
  double waiting_s = 0;  // how long it had waited when the report was sent

  // "RECV_F mb 3 from/to rank 2, waiting 12.0 s"
  std::string ToString() const;
};

// One worker's report; the latest one per rank is kept by the coordinator. Also a heartbeat.
struct WorkerReport {
  int rank = 0;
  int stage = -1;    // -1 until the worker knows its stage
  int replica = -1;  // data-parallel replica; -1 when the job has none (parallel.replicas 1)
  int tensor = -1;   // tensor-parallel rank; -1 when the job has none (parallel.tensor 1)
  int64_t step = 0;
  double loss = std::nan("");                  // NaN when the stage computes no loss
  std::map<std::string, double> metrics;       // "lr", "grad_norm", "tokens_per_s", ...
  std::map<std::string, double> timings_s;     // "step", "compute", "wait", "allreduce", "eval"
  std::map<std::string, int64_t> memory_peak;  // ledger peaks per category, bytes
  WorkerStatus status = WorkerStatus::kRunning;
  std::string error;                     // with kFailed
  std::optional<BlockedAction> blocked;  // set while the worker waits on something
};

// What the coordinator knows about one rank (CoordinatorServer::Ranks()).
struct RankState {
  int rank = 0;
  bool joined = false;
  std::string host;
  int64_t pid = 0;
  std::string device;
  bool has_report = false;
  WorkerReport report;             // the latest report (valid when has_report)
  double seconds_since_heard = 0;  // since the last report/heartbeat (or the join)
  bool dead = false;               // declared dead (no heartbeat, or its connection dropped)
  bool watching = false;           // its abort watch is connected (so a crash is seen at once)
};

// How a worker process ended: seen by the local launcher (job/process.h), or reported by
// its agent under mpirun / srun (CoordinatorClient::ReportWorkerExit).
struct WorkerExit {
  int rank = -1;
  int exit_code = 0;  // when it exited normally
  int signal = 0;     // when a signal killed it
  bool ok() const { return signal == 0 && exit_code == 0; }
  std::string Describe() const;  // "exited with code 3", "killed by signal 9 (Killed)"
};

// What an agent does once its worker has exited (CoordinatorClient::ReportWorkerExit).
struct JobNext {
  enum class Kind { kPending, kRestart, kEnd };
  Kind kind = Kind::kPending;  // kPending: not decided yet, ask again
  int attempt = 0;             // kRestart: start the worker again for this attempt
  bool succeeded = false;      // kEnd: the job's outcome...
  std::string reason;          // ...and, when it failed, why
};

// "stage 2 (rank 2)", "stage 2 replica 1 tensor 0 (rank 9)", or "rank 2" when the stage is not
// known yet.
std::string DescribeRank(int rank, int stage, int replica = -1, int tensor = -1);

// A table for hang diagnosis: one line per rank with stage, status, blocked action, peer, waiting
// time and time since last heard.
// `exited`: the ranks whose worker process has exited and how ("killed by signal 6 (Aborted)"):
// unless the rank reported its own failure (status "failed", the note its error), its status
// reads "exited" and the note says how.
std::string FormatRankTable(const std::vector<RankState>& ranks,
                            const std::map<int, std::string>& exited = {});

}  // namespace baton
